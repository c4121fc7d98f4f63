"""The `hipmem` command line: a thin typer + rich layer over `sizing` and `replay`."""
