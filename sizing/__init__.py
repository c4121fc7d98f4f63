"""Workspace sizing against the real rocBLAS/rocSOLVER and hipBLASLt, on a real or a virtual
AMD GPU.

Usable from Python alone; never imports typer or rich. The supported entry points are named
in `hipmem` (`hipmem.SizingSession`, `hipmem.recommend`, ...). Here: the session
(`session.py`), recommendations (`recommend.py`, `minimum.py`, `env_formats.py`,
`defaults.py`) and the gate (`workspace_check.py`); one folder per further concept:

    calls/       call specs, results, call logs and workload files: what is sized
    rocm/        ROCm releases: fetching, locating the libraries, the routine catalog
    hipblaslt/   hipBLASLt: releases, fetching, matmul heuristics, its logs
    sweeps/      a call's workspace over a range of sizes
    worker/      the crash-isolated process that loads the vendor libraries, and the
                 virtual device it can run on
"""
