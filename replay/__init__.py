"""RMM/hipMM allocation logs and PyTorch memory snapshots: reading them, and replaying them
through real memory resources, on a GPU or on the virtual GPU.

Usable from Python alone; never imports typer or rich. The supported entry points are named
in `hipmem` (`hipmem.load_log`, `hipmem.replay_log`, ...). One folder per concept:

    logs/        allocation logs: reading, the events, analysis, writing, plots
    snapshots/   PyTorch memory snapshots: the restricted, streaming pickle reader
    engine/      the replay: resources (`-r`), backends, the native core, the report
    virtual/     the virtual GPU: the stand-in CUDA runtime and its builds
    pytorch/     PyTorch's caching allocator (`-r torch`): releases, fetching, its worker
    rmm/         RMM's own resources on the virtual GPU: releases, fetching, builds
    capacity/    the smallest capacity that fits (`--find-capacity`), the fits table
    settings/    PyTorch allocator settings: recommend and check them by replay
    explain/     why an allocation ran out of memory, and what would have avoided it
    fleet/       many logs through many resources on a Dask cluster
    pictures/    plots and interactive pages
"""
