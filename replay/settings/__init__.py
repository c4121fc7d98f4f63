"""PyTorch allocator settings: recommend and check them by replaying a snapshot."""
