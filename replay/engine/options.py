"""How a replay runs: the options every loop reads, checked before any work."""

from __future__ import annotations

from dataclasses import dataclass

from hipmem._core.devices import Device

from ..errors import ReplayUsageError
from ..virtual.devices import DEFAULT_DEVICE, custom_device, find_device

THREADS = ("logged", "single")
STREAMS = ("logged", "default")
ON_FAILURE = ("skip", "stop")
ENGINES = ("auto", "native", "python")


@dataclass(frozen=True)
class ReplayOptions:
    """How to replay (validated by `check()`)."""

    backend: str = "auto"  # auto | cuda | hip | host | virtual
    threads: str = "logged"  # logged | single
    streams: str = "logged"  # logged | default
    on_failure: str = "skip"  # skip | stop
    engine: str = "auto"  # auto (native where it exists) | native | python
    # Passes over one resource; events/s is the best pass (as the C++ floor). With more than
    # one (and time_calls), one more pass runs first that times each call, apart from them.
    repeats: int = 1
    time_calls: bool = True  # time each allocator call (latency percentiles)
    plot_samples: int = 0  # reserved-bytes samples to take for a plot (0: none)
    device: int = 0
    # The virtual GPU (backend "virtual"): a device of the table (replay/virtual/devices.py)
    # or a memory size, and the PyTorch whose allocator runs there (replay/pytorch/allocator.py).
    device_name: str | None = None  # MI300X, H100, ... (default: devices.DEFAULT_DEVICE)
    device_memory_bytes: int | None = None  # instead of a device
    torch_version: str | None = None  # 2.11, 2.9 (default: HIPMEM_TORCH, then the search order)
    # RMM's resources on the virtual GPU: the fetched release (replay/rmm/fetch.py).
    rmm_version: str | None = None  # 25.4, 24.12 (default: rmm_fetch.DEFAULT_RMM)

    def check(self) -> None:
        for name, value, allowed in (
            ("threads", self.threads, THREADS),
            ("streams", self.streams, STREAMS),
            ("on_failure", self.on_failure, ON_FAILURE),
            ("engine", self.engine, ENGINES),
        ):
            if value not in allowed:
                raise ReplayUsageError(
                    f"not one of {', '.join(allowed)}", parameter=name, value=value
                )
        if self.repeats < 1:
            raise ReplayUsageError("must be at least 1", parameter="repeats", value=self.repeats)
        if self.device_name is not None and self.device_memory_bytes is not None:
            raise ReplayUsageError(
                "give a device or a memory size, not both",
                parameter="device_memory_bytes",
                value=self.device_memory_bytes,
            )
        self.virtual_device()  # an unknown device is a usage error before any work

    def virtual_device(self) -> Device:
        """The virtual GPU these options name."""
        if self.device_memory_bytes is not None:
            return custom_device(self.device_memory_bytes)
        return find_device(self.device_name or DEFAULT_DEVICE)
