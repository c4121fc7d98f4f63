"""The smallest capacity a replay fits in (`--find-capacity`) and the fits table of devices."""
