"""Call specs, call results, call logs and workload files: what a sizing session sizes."""
