"""The replay engine: resources (`-r`), backends, the native core and the report."""
