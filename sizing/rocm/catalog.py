"""The routine catalog: every sizable routine with its parameters, one per ROCm release, read
from `sizing/rocm/data/catalog-<release>.json` (generated from that release's headers by
`sizing.catalog_build`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from hipmem._core.close_names import did_you_mean

from ..errors import UnknownRoutine
from .releases import sort_key

DATA_DIR = Path(__file__).parent / "data"

# Parameters the user never gives: the handle, and device pointers (null in query mode).
HIDDEN_KINDS = ("handle", "pointer")


@dataclass(frozen=True)
class Param:
    """One parameter as the header declares it."""

    name: str
    c_type: str
    kind: str  # handle, pointer, host_scalar, enum, i32, i64, u32, f32, f64, i8
    enum: str | None = None  # for kind == "enum": the enum's name, e.g. rocblas_fill
    scalar: str | None = None  # for kind == "host_scalar": element type, or "by_type"

    @property
    def user_settable(self) -> bool:
        return self.kind not in HIDDEN_KINDS and self.name != "result"


@dataclass(frozen=True)
class Routine:
    """One vendor function, e.g. rocsolver_dgetrf_strided_batched."""

    name: str
    library: str  # rocblas or rocsolver
    family: str  # getrf, gemm_ex, ...
    precision: str  # s, d, c, z, h, bf, sc, dz, or "" for _ex routines
    batch: str  # plain, batched, strided_batched
    ilp64: bool
    params: tuple[Param, ...]

    @property
    def short_name(self) -> str:
        return self.name.removeprefix(self.library + "_")

    def param(self, name: str) -> Param | None:
        return next((param for param in self.params if param.name == name), None)


@dataclass(frozen=True)
class Catalog:
    routines: dict[str, Routine]
    enums: dict[str, dict[str, int]]
    # The library versions whose headers the catalog was generated from.
    versions: dict[str, str] = field(default_factory=dict)
    # Every other rocblas_*/rocsolver_* API function (handles, streams, routines that need no
    # workspace): a call log naming one is not naming an unknown function.
    other_functions: frozenset[str] = frozenset()
    release: str = ""  # the ROCm release whose headers it was generated from

    def lookup(self, name: str) -> Routine:
        """A routine by C name (`rocsolver_dgetrf`) or short form (`dgetrf`)."""
        if name in self.routines:
            return self.routines[name]
        matches = [r for r in self.routines.values() if r.short_name == name]
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            names = " or ".join(sorted(r.name for r in matches))
            raise UnknownRoutine(f"'{name}' is ambiguous: say {names}")
        raise UnknownRoutine(self._unknown_message(name))

    def _unknown_message(self, name: str) -> str:
        elsewhere = [
            release
            for release in catalog_releases()
            if release != self.release and _knows(load_catalog(release), name)
        ]
        if elsewhere:
            return (
                f"'{name}' is not in ROCm {self.release}; ROCm {', '.join(elsewhere)} "
                f"{'has' if len(elsewhere) == 1 else 'have'} it (--rocm {elsewhere[-1]})"
            )
        candidates = [*self.routines, *(r.short_name for r in self.routines.values())]
        hint = did_you_mean(name, candidates)
        return f"unknown routine '{name}'{hint} (`hipmem routines` lists them)"


def catalog_releases() -> list[str]:
    """Releases with a catalog, oldest first."""
    names = [path.stem.removeprefix("catalog-") for path in DATA_DIR.glob("catalog-*.json")]
    return sorted(names, key=sort_key)


def catalog_path(rocm: str | None) -> Path:
    """The catalog of a release; for one without its own (a local ROCm 6.3, say), the newest
    catalog not newer than it; by default the newest."""
    releases = catalog_releases()
    chosen = releases[-1]
    if rocm is not None:
        older = [name for name in releases if sort_key(name) <= sort_key(rocm)]
        chosen = older[-1] if older else releases[0]
    return DATA_DIR / f"catalog-{chosen}.json"


@cache
def load_catalog(rocm: str | None = None) -> Catalog:
    """The routines of one ROCm release (`rocm="7.2"`); the newest by default."""
    return _load(catalog_path(rocm))


@cache
def _load(path: Path) -> Catalog:
    data = json.loads(path.read_text())
    routines = {name: _routine(name, entry) for name, entry in data["routines"].items()}
    return Catalog(
        release=path.stem.removeprefix("catalog-"),
        routines=routines,
        enums=data["enums"],
        versions=data.get("versions", {}),
        other_functions=frozenset(data.get("other_functions", ())),
    )


def _knows(catalog: Catalog, name: str) -> bool:
    return name in catalog.routines or any(r.short_name == name for r in catalog.routines.values())


def _routine(name: str, entry: dict[str, Any]) -> Routine:
    params = tuple(
        Param(p["name"], p["c_type"], p["kind"], p.get("enum"), p.get("scalar"))
        for p in entry["params"]
    )
    return Routine(
        name=name,
        library=entry["library"],
        family=entry["family"],
        precision=entry["precision"],
        batch=entry["batch"],
        ilp64=entry["ilp64"],
        params=params,
    )
