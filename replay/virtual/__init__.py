"""The virtual GPU: a stand-in CUDA runtime that hosts real allocators with no GPU."""
