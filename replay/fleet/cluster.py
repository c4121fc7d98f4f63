"""Where a fleet sweep runs: a local Dask cluster, or an existing one.

With no scheduler address, a local cluster of worker processes, one thread each:

- NVIDIA GPUs: one worker per GPU, each seeing only its own (dask-cuda's `LocalCUDACluster`,
  which rotates `CUDA_VISIBLE_DEVICES`; without dask-cuda, the same done here);
- AMD GPUs (dask-cuda does not run there): one worker per GPU whose `HIP_VISIBLE_DEVICES`
  names that GPU alone;
- no GPU, or only host memory to replay: CPU workers (the `host` backend, the virtual device).

With an address (`tcp://host:8786`), the existing cluster's workers are used as they are
(`dask-cuda-worker` starts one per GPU of a node).

Dask is an optional dependency (`pip install 'hipmem[fleet]'`): imported here, on first use.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ..engine.backends import cuda_device_count, hip_device_count
from ..errors import ReplayError, ReplayUsageError

INSTALL_HINT = "the fleet needs Dask: pip install 'hipmem[fleet]'"


class FleetUnavailable(ReplayError):
    """Dask is not installed, or the scheduler cannot be reached."""


def require_dask() -> None:
    """Fail in one line, before any work, when Dask is missing."""
    if importlib.util.find_spec("distributed") is None:
        raise FleetUnavailable(INSTALL_HINT)


@dataclass(frozen=True)
class ClusterPlan:
    """The local cluster to start: what its workers replay on, and each one's environment."""

    kind: str  # cuda, hip or cpu
    worker_envs: list[dict[str, str]] = field(default_factory=list)

    @property
    def workers(self) -> int:
        return len(self.worker_envs)

    def describe(self) -> str:
        if self.kind == "cpu":
            return f"a local cluster of {self.workers} CPU worker(s)"
        return f"a local cluster of {self.workers} worker(s), one per {self.kind} GPU"


def plan_local_cluster(*, gpus_needed: bool, workers: int | None = None) -> ClusterPlan:
    """One worker per GPU where GPUs are needed and found, else `workers` CPU workers."""
    if workers is not None and workers < 1:
        raise ReplayUsageError("must be at least 1", parameter="workers", value=workers)
    if gpus_needed:
        for kind, count in (("cuda", cuda_device_count()[0]), ("hip", hip_device_count()[0])):
            if count:
                count = min(count, workers or count)
                return ClusterPlan(kind, [_gpu_env(kind, i, count) for i in range(count)])
    count = workers or max(1, min(os.cpu_count() or 1, 8))
    return ClusterPlan("cpu", [{} for _ in range(count)])


def _gpu_env(kind: str, index: int, count: int) -> dict[str, str]:
    if kind == "hip":
        return {"HIP_VISIBLE_DEVICES": str(index)}
    # As dask-cuda does: own GPU first, the others after it (device 0 is the worker's own).
    order = [index, *(i for i in range(count) if i != index)]
    return {"CUDA_VISIBLE_DEVICES": ",".join(map(str, order))}


def check_scheduler_address(scheduler: str) -> None:
    """A `--scheduler` that is no address, refused before any work (usage), by Dask's own
    reading of addresses: a protocol (optional) and a host with its port."""
    require_dask()
    from distributed.comm.addressing import parse_address, parse_host_port

    try:
        parse_host_port(parse_address(scheduler, strict=False)[1])
    except ValueError:
        raise ReplayUsageError(
            "not a Dask scheduler address (tcp://host:8786)", parameter="scheduler",
            value=scheduler,
        ) from None  # fmt: skip


@contextmanager
def fleet_client(scheduler: str | None = None, plan: ClusterPlan | None = None) -> Iterator[Any]:
    """A Dask client on the cluster at `scheduler`, or on a local cluster started from `plan`
    (closed again on the way out)."""
    require_dask()
    import dask
    from distributed import Client

    if scheduler is not None:
        try:
            client = Client(scheduler, timeout="20s")
        except (OSError, TimeoutError) as err:
            raise FleetUnavailable(f"cannot reach the Dask scheduler {scheduler}: {err}") from None
        except ValueError:  # Dask's address parser: no port, an unknown protocol
            raise ReplayUsageError(
                "not a Dask scheduler address (tcp://host:8786)", parameter="scheduler",
                value=scheduler,
            ) from None  # fmt: skip
        with client:
            yield client
        return
    plan = plan or plan_local_cluster(gpus_needed=False)
    # Every worker death reaches the fleet's own retry loop (see replay/fleet/run.py).
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        cluster = _local_cluster(plan)
        try:
            with Client(cluster) as client:
                client.wait_for_workers(plan.workers, timeout=120)
                yield client
        finally:
            cluster.close()


def _dask_cuda() -> Any:
    """dask-cuda when it imports here (it needs cuda-core and NVML), else None."""
    try:
        import dask_cuda
    except ImportError:
        return None
    return dask_cuda


# A local cluster listens on loopback only: a Dask scheduler runs whatever task it is sent,
# so one reachable from the network would run anyone's code on this machine.
LOOPBACK = "127.0.0.1"


def _local_cluster(plan: ClusterPlan) -> Any:
    # Worker restarts and failed pairs are reported by the sweep, one line each, not as Dask's
    # log noise; nor is a worker's heartbeat that meets a scheduler already closing (an ERROR
    # with a traceback at shutdown on a loaded machine, although every pair ran).
    quiet = logging.CRITICAL
    if plan.kind == "cuda" and _dask_cuda() is not None:
        from dask_cuda import LocalCUDACluster

        visible = ",".join(str(i) for i in range(plan.workers))
        return LocalCUDACluster(
            CUDA_VISIBLE_DEVICES=visible,
            host=LOOPBACK,
            threads_per_worker=1,
            dashboard_address=f"{LOOPBACK}:0",  # any free port: never a clash with a running one
            memory_limit=0,
            silence_logs=quiet,
        )
    from distributed import Nanny, Scheduler, SpecCluster

    workers = {
        f"hipmem-{i}": {
            "cls": Nanny,
            "options": {
                "nthreads": 1,
                "host": LOOPBACK,
                "env": env,
                "memory_limit": 0,  # the replay's memory is the log's: not Dask's to police
                "silence_logs": quiet,
            },
        }
        for i, env in enumerate(plan.worker_envs)
    }
    # The dashboard on any free port: never a clash with a cluster already running.
    scheduler = {
        "cls": Scheduler,
        "options": {"host": LOOPBACK, "dashboard_address": f"{LOOPBACK}:0"},
    }
    return SpecCluster(workers=workers, scheduler=scheduler, silence_logs=quiet)
