"""The summary of `gpu_record_truths.py`: one row per run (the table printed at the end and
written to summary.json) and the checks read from the rows: did each script reserve the same
twice, which batch size was the largest that fit, what each setting did under the cap."""

from __future__ import annotations

from typing import Any

from benchmarks.record_truths_plan import SCRIPTS, USUAL, Result

COLUMNS = ("script", "setting", "reserved B", "allocated B", "oom", "s", "status")
ROW_KEYS = ("status", "note", "lane", "wall_s", "reserved_bytes_peak", "allocated_bytes_peak",
            "requested_bytes_peak", "num_ooms", "num_alloc_retries", "device_total_bytes",
            "device_free_bytes_at_start", "trace_entries", "snapshot_bytes")  # fmt: skip


def ordered(results: list[Result]) -> list[Result]:
    """By script (in SCRIPTS' order); the defaults, expandable segments and the defaults again,
    then the batch sizes from the smallest, then the rest in the order the runs finished."""
    scripts = list(SCRIPTS)
    usual = ("defaults #1", "expandable", "defaults #2")

    def key(result: Result) -> tuple[int, int, int]:
        run = result.run
        rank = usual.index(run.setting) if run.setting in usual else len(usual)
        return scripts.index(run.script), rank, int(run.env.get("BATCH", 0))

    return sorted(results, key=key)


def row(result: Result) -> dict[str, Any]:
    run, stats = result.run, result.stats
    fields: dict[str, Any] = {"name": run.name, "script": run.script, "setting": run.setting,
                              "alloc_conf": run.alloc_conf, "env": run.env}  # fmt: skip
    fields.update({key: getattr(result, key, stats.get(key)) for key in ROW_KEYS})
    fields["script_wall_s"] = stats.get("wall_s")
    fields["oom"] = stats.get("oom")
    fields["oom_message"] = stats.get("oom_message")
    return fields


def table(results: list[Result]) -> tuple[list[dict[str, Any]], str]:
    """The rows for summary.json, and the table as text."""
    rows = [row(r) for r in ordered(results)]
    cells = [COLUMNS] + [
        (r["script"].removesuffix(".py"), r["setting"], _bytes(r["reserved_bytes_peak"]),
         _bytes(r["allocated_bytes_peak"]), _oom(r["oom"]),
         "-" if r["wall_s"] is None else f"{r['wall_s']:.1f}", r["status"])
        for r in rows
    ]  # fmt: skip
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
    right = {2, 3, 5}
    lines = ["  ".join(c.rjust(w) if i in right else c.ljust(w)
                       for i, (c, w) in enumerate(zip(line, widths, strict=True))).rstrip()
             for line in cells]  # fmt: skip
    return rows, "\n".join(lines) + "\n"


def _bytes(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _oom(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "no")


def checks(results: list[Result]) -> dict[str, Any]:
    """What the runs say together, as data and as lines to print."""
    found: dict[str, Any] = {"lines": []}
    by_name = {r.run.name: r for r in results}
    recorded = {r.run.script for r in results}
    for script in (s for s in USUAL if s in recorded):
        stem = script.removesuffix(".py")
        pair = [by_name.get(f"{stem}-defaults-{n}") for n in (1, 2)]
        peaks = [None if r is None else r.figure("reserved_bytes_peak") for r in pair]
        same = peaks[0] is not None and peaks[0] == peaks[1]
        found[f"{stem}_deterministic"] = same if None not in peaks else None
        verdict = "the same" if same else "DIFFERENT" if None not in peaks else "no figures"
        found["lines"].append(f"{stem}: defaults #1 and #2 reserved {verdict}: "
                              + " / ".join(_bytes(p) for p in peaks))  # fmt: skip
    found.update(_sweep(results))
    found.update(_cap(results))
    counts: dict[str, int] = {}
    for result in results:
        counts[result.status] = counts.get(result.status, 0) + 1
    found["counts"] = counts
    found["lines"].append(", ".join(f"{n} {status}" for status, n in sorted(counts.items())))
    found["lines"] = found.pop("lines") + found.pop("sweep_lines") + found.pop("cap_lines")
    return found


def _sweep(results: list[Result]) -> dict[str, Any]:
    swept = sorted((int(r.run.env["BATCH"]), r) for r in results
                   if r.run.script == "gpt_train.py" and "BATCH" in r.run.env)  # fmt: skip
    fits = [b for b, r in swept if r.status == "ok"]
    ooms = [b for b, r in swept if r.status == "oom"]
    largest = max(fits) if fits else None
    first_oom = min(ooms) if ooms else None
    peak = dict(swept)[largest].figure("reserved_bytes_peak") if largest else None
    line = (f"gpt_train BATCH sweep: {[b for b, _ in swept]}; largest that fit {largest} "
            f"(reserved {_bytes(peak)}), first out of memory {first_oom}")  # fmt: skip
    return {"sweep": {"batches": [b for b, _ in swept], "largest_fit": largest,
                      "first_oom": first_oom}, "sweep_lines": [line]}  # fmt: skip


def _cap(results: list[Result]) -> dict[str, Any]:
    capped = [r for r in results if r.run.script == "oom_cap.py"]
    outcomes = {r.run.setting: {"status": r.status, "env": r.run.env,
                                "reserved_bytes_peak": r.figure("reserved_bytes_peak")}
                for r in capped}  # fmt: skip
    lines = [f"oom_cap {r.run.setting}: {r.status}, "
             f"reserved {_bytes(r.figure('reserved_bytes_peak'))}" for r in capped]  # fmt: skip
    return {"cap": outcomes, "cap_lines": lines}
