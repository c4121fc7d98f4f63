"""`hipmem fleet --plot`: the distribution of capacities across logs, one curve per resource.

Each curve says, for a size on the x axis, what fraction of the fleet's logs replay with no
failure in that size: the capacity found per log with `--find-capacity`, else the peak
reserved bytes (what each log took). The size covering 95% of the logs and the one covering
all of them are marked on each curve.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from hipmem._core.atomic_write import atomic_output
from hipmem._core.decimate import envelope
from hipmem._core.pyplot import pyplot

from .records import STATUS_OK

_STYLES = ("-", "--", ":", "-.")


def write_fleet_plot(path: Path, records: list[dict[str, Any]], resources: list[str]) -> None:
    """Write the plot atomically (temp file beside it, then rename)."""
    plt = pyplot()
    key = "capacity_bytes" if any("capacity_bytes" in r for r in records) else "peak_reserved_bytes"
    what = "capacity found" if key == "capacity_bytes" else "peak reserved"
    gib = float(1 << 30)
    fig, ax = plt.subplots(figsize=(10, 5.5))
    for n, resource in enumerate(resources):
        values = sorted(
            int(r[key])
            for r in records
            if r["spec"] == resource and r["status"] == STATUS_OK and r.get(key) is not None
        )
        if not values:
            continue
        sizes = np.asarray(values, dtype=np.float64) / gib
        covered = np.arange(1, len(sizes) + 1) / len(sizes)
        p95 = float(np.percentile(sizes, 95, method="higher"))
        label = f"{resource}: {len(sizes)} logs, p95 {p95:.2f} GiB, all {sizes[-1]:.2f} GiB"
        # Dashed and thinner in turn, so that resources with the same curve stay visible.
        # Thousands of logs are thinned as every series is (hipmem/_core/decimate.py): the
        # largest size, which covers all the logs, is always drawn.
        (line,) = ax.step(
            *envelope(np.concatenate([[sizes[0]], sizes]), np.concatenate([[0.0], covered])),
            where="post",
            label=label,
            linestyle=_STYLES[n % len(_STYLES)],
            linewidth=2.5 - 0.5 * (n % 3),
        )
        at_p95 = np.searchsorted(sizes, p95, side="right") / len(sizes)
        ax.plot([p95], [at_p95], "o", color=line.get_color(), markersize=8 - n % 3)
        ax.plot([sizes[-1]], [1.0], "s", color=line.get_color(), markersize=8 - n % 3)
    ax.set_xlabel(f"{what} per log (GiB)")
    ax.set_ylabel("fraction of logs covered")
    ax.set_ylim(0, 1.05)
    ax.grid(True, alpha=0.3)
    ax.set_title(f"{what.capitalize()} across the fleet (circle: covers p95, square: covers all)")
    ax.legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    suffix = path.suffix or ".png"
    try:
        with atomic_output(path, suffix=suffix) as temp:
            fig.savefig(temp, format=suffix.lstrip("."))
    finally:
        plt.close(fig)
