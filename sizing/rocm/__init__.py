"""ROCm releases: fetching Debian's rocBLAS/rocSOLVER, locating libraries, the routine catalog."""
