"""`fleet`: replays of many logs through many resources on a Dask cluster."""
