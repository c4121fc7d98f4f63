"""One routine call to size: parsed from `ROUTINE[:ARG=VALUE[,ARG=VALUE...]]` or built from
keyword arguments, checked against the catalog, with every unspecified argument defaulted."""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import simpleeval

from hipmem._core.close_names import did_you_mean

from ..defaults import FUNCTIONS, rules_for
from ..errors import BadArgument
from ..rocm.catalog import Catalog, Param, Routine, load_catalog

Value = int | float | str

# Short spellings users type for enum values, per enum (keys lower-case).
ENUM_ALIASES: dict[str, dict[str, str]] = {
    "rocblas_operation": {"n": "none", "t": "transpose", "c": "conjugate_transpose"},
    "rocblas_fill": {"u": "upper", "l": "lower", "f": "full"},
    "rocblas_diagonal": {"n": "non_unit", "nonunit": "non_unit", "u": "unit"},
    "rocblas_side": {"l": "left", "r": "right", "b": "both"},
    "rocblas_svect": {"a": "all", "s": "singular", "o": "overwrite", "n": "none"},
    "rocblas_evect": {"v": "original", "i": "tridiagonal", "n": "none"},
    "rocblas_workmode": {"o": "outofplace", "i": "inplace"},
    # The letters and numbers rocsolver-bench uses (and its call logs record).
    "rocblas_erange": {"a": "all", "v": "value", "i": "index"},
    "rocblas_srange": {"a": "all", "v": "value", "i": "index"},
    "rocblas_eorder": {"b": "blocks", "e": "entire"},
    "rocblas_esort": {"n": "none", "a": "ascending"},
    "rocblas_eform": {"1": "ax", "2": "abx", "3": "bax"},
    "rocblas_storev": {"c": "column_wise", "r": "row_wise"},
    "rocblas_direct": {"f": "forward_direction", "b": "backward_direction"},
    "rocblas_pivot": {"v": "variable", "t": "top", "b": "bottom"},
}

_INT_RANGES = {"i32": (-(2**31), 2**31 - 1), "i64": (-(2**63), 2**63 - 1), "u32": (0, 2**32 - 1)}
_INT_RANGES["i8"] = (-128, 127)
DECIMAL = re.compile(r"[+-]?[0-9]+", re.ASCII)  # a whole number in plain ASCII digits
_MAX_DIGITS = 40
_MAX_SHOWN_CHARS = 80  # far past any int64; keeps int() of a huge string out of reach
_DIMENSIONS = frozenset(
    {"m", "n", "k", "nrhs", "kl", "ku", "batch_count", "nb", "nblocks", "nu", "nv", "nc"}
)
# rocblas_gemm_ex's supported (a/b type, c/d type, compute type) triples, from its docs.
GEMM_EX_TYPES = frozenset(
    {
        ("f16_r", "f16_r", "f16_r"),
        ("f16_r", "f16_r", "f32_r"),
        ("f16_r", "f32_r", "f32_r"),
        ("bf16_r", "bf16_r", "f32_r"),
        ("bf16_r", "f32_r", "f32_r"),
        ("f32_r", "f32_r", "f32_r"),
        ("f64_r", "f64_r", "f64_r"),
        ("f32_c", "f32_c", "f32_c"),
        ("f64_c", "f64_c", "f64_c"),
        ("i8_r", "i32_r", "i32_r"),
    }
)
TRSM_EX_TYPES = frozenset({"f32_r", "f64_r", "f32_c", "f64_c"})

# The element type a `const void*` scalar has, from the routine's compute/execution type.
_SCALAR_OF_DATATYPE = {
    "f16_r": "f16",
    "bf16_r": "bf16",
    "f32_r": "f32",
    "f64_r": "f64",
    "f32_c": "c32",
    "f64_c": "c64",
    "i32_r": "i32",
}


@dataclass(frozen=True)
class Call:
    """A fully specified call: every user-settable argument has a value."""

    routine: Routine
    args: dict[str, Value]  # in header order; enum values by canonical name
    given: frozenset[str]  # the names the user set

    @property
    def label(self) -> str:
        """The call as the user would type it back, with only the arguments they gave."""
        given = ",".join(f"{name}={self.args[name]}" for name in self.args if name in self.given)
        return f"{self.routine.name}:{given}" if given else self.routine.name

    def key(self) -> tuple[str, tuple[tuple[str, Value], ...]]:
        """Identical calls have equal keys (they are sized once)."""
        return self.routine.name, tuple(self.args.items())

    def worker_args(self, catalog: Catalog) -> list[list[Any]]:
        """The argument list as the worker passes it to the C function: [kind, value]."""
        encoded: list[list[Any]] = []
        for param in self.routine.params:
            if param.kind == "handle":
                encoded.append(["handle", None])
            elif param.kind == "pointer":
                encoded.append(["pointer", None])
            elif param.kind == "host_scalar":
                encoded.append(["scalar", [self._scalar_type(param), self.args.get(param.name, 0)]])
            elif param.kind == "enum":
                assert param.enum is not None
                encoded.append(["i32", catalog.enums[param.enum][str(self.args[param.name])]])
            else:
                encoded.append([param.kind, self.args[param.name]])
        return encoded

    def _scalar_type(self, param: Param) -> str:
        if param.scalar != "by_type":
            return param.scalar or "raw"
        for source in ("compute_type", "execution_type", "result_type"):
            if source in self.args:
                return _SCALAR_OF_DATATYPE.get(str(self.args[source]), "raw")
        return "raw"


def parse_call(text: str, catalog: Catalog | None = None) -> Call:
    """`rocsolver_dgetrf:m=1024,n=1024` -> Call. Raises BadArgument / UnknownRoutine."""
    catalog = catalog or load_catalog()
    routine, given = split_call(text, catalog)
    return make_call(routine, given, catalog)


def split_call(text: str, catalog: Catalog) -> tuple[Routine, dict[str, str]]:
    """`ROUTINE:ARG=VALUE,...` -> the routine and its arguments as given, not yet checked
    (a sweep fills in the swept ones before the call is made)."""
    name, _, arg_text = text.strip().partition(":")
    routine = catalog.lookup(name.strip())
    given: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in arg_text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise BadArgument(f"{routine.name}: '{item}' is not ARG=VALUE")
        if key.strip() in given:
            raise BadArgument(f"{routine.name}: argument '{key.strip()}' given twice")
        given[key.strip()] = value.strip()
    return routine, given


def make_call(
    routine: Routine | str, given: Mapping[str, Value], catalog: Catalog | None = None
) -> Call:
    """A Call from already-split arguments (strings from the command line, or Python values)."""
    catalog = catalog or load_catalog()
    if isinstance(routine, str):
        routine = catalog.lookup(routine)
    settable = {param.name: param for param in routine.params if param.user_settable}
    for name in given:
        if name not in settable:
            raise BadArgument(unknown_argument(routine, name, settable))
    values = {
        name: convert_value(routine, settable[name], raw, catalog, given=True)
        for name, raw in given.items()
    }
    _apply_defaults(routine, settable, values, catalog)
    ordered = {name: values[name] for name in settable}
    _check_types(routine, ordered)
    return Call(routine=routine, args=ordered, given=frozenset(given))


def _check_types(routine: Routine, args: Mapping[str, Value]) -> None:
    """The data types must be a combination the routine implements: rocBLAS answers a size
    query for any combination (0 bytes), and only fails when the call is made."""
    for name, value in args.items():
        if value == "invalid":
            raise BadArgument(f"{routine.name}: {name}=invalid is not a data type")
    if routine.family == "gemm_ex":
        triple = (str(args["a_type"]), str(args["c_type"]), str(args["compute_type"]))
        pairs_match = args["b_type"] == args["a_type"] and args["d_type"] == args["c_type"]
        if triple not in GEMM_EX_TYPES or not pairs_match:
            supported = "; ".join(f"{a}/{c}/{t}" for a, c, t in sorted(GEMM_EX_TYPES))
            raise BadArgument(
                f"{routine.name}: a_type={args['a_type']}, b_type={args['b_type']}, "
                f"c_type={args['c_type']}, d_type={args['d_type']}, "
                f"compute_type={args['compute_type']} is not a type combination rocBLAS "
                f"implements (a=b / c=d / compute: {supported})"
            )
    if routine.family == "trsm_ex" and str(args.get("compute_type")) not in TRSM_EX_TYPES:
        raise BadArgument(
            f"{routine.name}: compute_type={args.get('compute_type')} is not one of "
            f"{', '.join(sorted(TRSM_EX_TYPES))}"
        )


def unknown_argument(routine: Routine, name: str, settable: Mapping[str, Param]) -> str:
    """The message for an argument `routine` does not take, with the likeliest meant."""
    hint = did_you_mean(name, settable, n=1, quote="'")
    return f"{routine.name} has no argument '{name}'{hint} (it takes {', '.join(settable)})"


def convert_value(
    routine: Routine, param: Param, raw: Value, catalog: Catalog, *, given: bool = False
) -> Value:
    """`given`: the user's value (a float is no whole number); else a default rule's."""
    where = f"{routine.name}: {param.name}={raw}"
    if isinstance(raw, str) and len(raw) > _MAX_SHOWN_CHARS:  # say how long, not all of it
        where = f"{routine.name}: {param.name} (a value of {len(raw):,} characters)"
    if param.kind == "enum":
        assert param.enum is not None
        return _enum_value(where, param.enum, str(raw), catalog)
    if param.kind in ("f32", "f64", "host_scalar"):
        try:
            return float(raw)
        except ValueError:
            raise BadArgument(f"{where}: expected a number") from None
    if given and isinstance(raw, float):
        raise BadArgument(f"{where}: expected a whole number, not a decimal")
    return check_integer(where, param.name, param.kind, raw)


def check_integer(where: str, name: str, kind: str, raw: Value) -> int:
    """`raw` as a whole number of `kind`'s range (BadArgument naming `where` otherwise).
    Plain ASCII decimal only: Python's int() would also take '４０', '4_000' and (base 0)
    '0x10', none of which rocsolver-bench or a C header's reader would."""
    if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
        raise BadArgument(f"{where}: expected a whole number")
    if isinstance(raw, str):
        if not DECIMAL.fullmatch(raw) or len(raw) > _MAX_DIGITS:
            raise BadArgument(f"{where}: expected a whole number in plain decimal digits")
        value = int(raw)
    else:
        value = int(raw)
    low, high = _INT_RANGES.get(kind, (-(2**63), 2**63 - 1))
    if not low <= value <= high:
        raise BadArgument(f"{where}: out of range for {kind} ({low}..{high})")
    if value < 0 and is_dimension(name):
        # rocBLAS does not check sizes in query mode: it would answer 0 bytes.
        raise BadArgument(f"{where}: a dimension cannot be negative")
    return value


def is_dimension(name: str) -> bool:
    """Sizes, leading dimensions and counts: never negative (increments and strides may be)."""
    return name in _DIMENSIONS or name.startswith(("ld", "nnz"))


def _enum_value(where: str, enum: str, raw: str, catalog: Catalog) -> str:
    names = catalog.enums[enum]
    lowered = raw.lower().removeprefix(enum + "_")
    canonical = ENUM_ALIASES.get(enum, {}).get(lowered, lowered)
    if canonical not in names:
        allowed = sorted(set(names) | set(ENUM_ALIASES.get(enum, {})))
        raise BadArgument(f"{where}: not a {enum} (one of {', '.join(allowed)})")
    return canonical


@functools.cache
def parsed_rule(rule: str) -> Any:
    """A default rule parsed once (rules are the project's own data, a few hundred of them):
    a sweep evaluates the same rules at every point."""
    return simpleeval.SimpleEval().parse(rule)


@functools.cache
def rule_names(rule: str) -> frozenset[str]:
    """The argument names a default rule reads (`max(1, m)` -> {m})."""
    return frozenset(
        node.id for node in ast.walk(parsed_rule(rule)) if isinstance(node, ast.Name)
    ) - set(FUNCTIONS)


def _apply_defaults(
    routine: Routine, settable: Mapping[str, Param], values: dict[str, Value], catalog: Catalog
) -> None:
    """Fill in defaults; a rule may use any argument known so far, so repeat until done."""
    rules = rules_for(routine.family)
    pending = [name for name in settable if name not in values]
    evaluator = simpleeval.EvalWithCompoundTypes(functions=FUNCTIONS)
    while pending:
        progressed = False
        for name in list(pending):
            if name not in rules:
                continue
            evaluator.names = dict(values)
            try:
                result = evaluator.eval(rules[name], previously_parsed=parsed_rule(rules[name]))
            except simpleeval.NameNotDefined:
                continue  # depends on an argument not known yet
            values[name] = convert_value(routine, settable[name], result, catalog)
            pending.remove(name)
            progressed = True
        if not progressed:
            break
    if pending:
        # Name only the roots: an argument whose rule waits on a missing one is not missing.
        pending = [name for name in pending if name not in rules] or pending
        raise BadArgument(
            f"{routine.name}: missing argument{'s' if len(pending) > 1 else ''} "
            f"{', '.join(pending)} (no default for "
            f"{'them' if len(pending) > 1 else 'it'})"
        )
