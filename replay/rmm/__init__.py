"""RMM's own memory resources (pool, arena, binning, ...) on the virtual GPU."""
