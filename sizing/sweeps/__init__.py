"""Sweeps: a call's workspace over a range of sizes."""
