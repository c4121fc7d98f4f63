"""Help epilogs of the `hipmem rocm` commands (kept apart from cmd_rocm.py, which changes
with each ROCm release): real examples and the exit codes."""

FETCH_EPILOG = """\b
Examples:
  hipmem rocm fetch
  hipmem rocm fetch --rocm 6.4,7.2 --arch gfx90a --arch gfx942

size, recommend and check fetch what they need on first use (the release, the device's
arch's gemm data, hipBLASLt); fetch ahead for a machine without network, then pass --offline
or set HIPMEM_OFFLINE=1 there.

Exit codes: 0 the libraries are ready; 1 a download, check or unpack failed (run it
again: it resumes); 2 usage; 130 interrupted (run it again: it resumes).

Docs: hipmem docs rocm-releases
"""

WHERE_EPILOG = """\b
Examples:
  hipmem rocm where
  hipmem rocm where --json

Exit codes: 0 found; 1 no rocBLAS in any place searched (each is named); 2 usage;
130 interrupted.

Docs: hipmem docs rocm-releases
"""

ROCM_EPILOG = "Docs: hipmem docs rocm-releases"
