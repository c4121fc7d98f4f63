"""hipBLASLt: releases, fetching, locating, matmul heuristics and its logs."""
