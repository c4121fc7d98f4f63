"""PyTorch memory snapshots: a restricted, streaming pickle reader that builds the replay's
columns."""
