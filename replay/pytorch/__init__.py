"""PyTorch's caching allocator (`-r torch`): releases, fetching, the replay worker."""
