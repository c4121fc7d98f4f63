"""Allocation logs: reading (.csv, .csv.gz, snapshots through `snapshots`), the events, analysis,
writing, plots."""
