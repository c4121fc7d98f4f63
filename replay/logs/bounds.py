"""The bounds every allocation log is held to: the loader skips a row past the first and
refuses a log past the second; a fleet's results file holds its records to the same.

No device holds a petabyte: a larger size is a damaged row, skipped and reported. With every
size below MAX_PLAUSIBLE_BYTES, sums of sizes fit int64 unless the log allocates 2**62 bytes
in all, which `load_log` refuses; so live bytes, totals and peaks never wrap.
"""

MAX_PLAUSIBLE_BYTES = 1 << 50
MAX_TOTAL_BYTES = 1 << 62
