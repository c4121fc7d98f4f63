"""The plumbing every part of hipmem shares: errors, byte sizes, the cache root, atomic
writes, progress callbacks. It imports nothing of hipmem's own above it, so `sizing`,
`replay` and the CLI may all import it (see docs/architecture.md)."""
