"""Calls checked against one release, then sized with another (`size --rocm 6.4,7.2`): each
call remade from what was given, against the other release's catalog (its routines, enums
and defaults)."""

from __future__ import annotations

from ..rocm.catalog import load_catalog
from ..rocm.locator import Libraries
from ..sweeps.plan import SweptCall, plan_sweep
from .spec import Call, make_call


def in_release(
    calls: list[tuple[Call, int] | SweptCall], libraries: Libraries
) -> list[tuple[Call, int] | SweptCall]:
    """The same calls checked against another release's catalog (its routines and enums);
    a routine that release lacks is a usage error naming the releases that have it."""
    catalog = load_catalog(libraries.rocm)
    remade: list[tuple[Call, int] | SweptCall] = []
    for item in calls:
        if isinstance(item, SweptCall):
            limit = item.point_count  # already checked against the user's limit
            name, sweeps, given, count = item.routine.name, item.sweeps, item.given, item.count
            remade.append(plan_sweep(name, sweeps, catalog, given=given, count=count,
                                     max_points=limit))  # fmt: skip
            continue
        call, count = item
        given = {name: call.args[name] for name in call.args if name in call.given}
        remade.append((make_call(call.routine.name, given, catalog), count))
    return remade
