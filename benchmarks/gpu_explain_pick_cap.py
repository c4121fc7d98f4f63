"""On the GPU machine: a cap at which some settings of `recommend --from-snapshot`'s grid serve
a snapshot's job and PyTorch's defaults do not (halfway between the smallest cap a setting
needs and the cap the defaults need), for `gpu_explain_check.py --cap-bytes`. Prints the cap
and the two figures, or says that every setting needs the same cap.

    python3 benchmarks/gpu_explain_pick_cap.py SNAPSHOT DEVICE_BYTES
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    snapshot, device_bytes = sys.argv[1], sys.argv[2]
    done = subprocess.run(
        [sys.executable, "-m", "hipmem.cli.main", "recommend", "--from-snapshot", snapshot,
         "--device-memory", device_bytes, "--json"],
        capture_output=True, text=True, cwd=REPO, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    candidates = json.loads(done.stdout)["allocator_settings"]["candidates"]
    needs = {c["settings"]: c["capacity_bytes"] for c in candidates
             if c["cap_bytes"] is None and c["capacity_bytes"]}  # fmt: skip
    defaults, least = needs[""], min(needs.values())
    if least >= defaults:
        print(f"every setting needs {defaults:,} bytes or more: no cap tells them apart")
        return
    best = [s for s, n in needs.items() if n == least]
    print(f"{(least + defaults) // 2} defaults need {defaults:,}; {best[0]} needs {least:,}")


if __name__ == "__main__":
    main()
