"""The arguments of a swept call at each point of its grid: the fixed ones copied, the
swept ones set, and only the defaults that depend on them (`lda = max(1, n)`) evaluated
again, so that a point costs a few dictionary writes, not a whole `make_call`."""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any

import simpleeval

from ..calls.spec import Call, Value, convert_value, parsed_rule, rule_names
from ..defaults import FUNCTIONS, rules_for
from ..errors import SizingError
from ..rocm.catalog import Catalog
from ..rocm.rule_closures import closure_of
from .plan import SweptCall


class PointMaker:
    """The call's arguments at each point: the fixed ones copied, the swept ones set, and
    the defaults that depend on them evaluated again, in dependency order."""

    def __init__(self, plan: SweptCall, catalog: Catalog) -> None:
        routine = plan.routine
        self.routine = routine
        self.catalog = catalog
        self.settable = {param.name: param for param in routine.params if param.user_settable}
        self.swept = [sweep.arg for sweep in plan.sweeps]
        self.rules = rules_for(routine.family)
        defaulted = [n for n in self.settable if n not in plan.given and n not in self.swept]
        self.affected = self._evaluation_order(self._depending(defaulted))
        self.varying = self.swept + self.affected
        self.base = {n: v for n, v in plan.corner.args.items() if n not in self.varying}
        self.names = list(self.settable)
        # Read many values of a dict in one C call (one name alone would give a bare value).
        self._all_values = operator.itemgetter(*self.names, *self.names[:1])
        self._varying_values = operator.itemgetter(*self.varying, *self.varying[:1])
        self.given = frozenset(plan.given) | frozenset(self.swept)
        positions = {param.name: index for index, param in enumerate(routine.params)}
        self.slots = [positions[name] for name in self.varying]
        self.enums = [self.settable[name].enum for name in self.varying]
        self.evaluator = simpleeval.EvalWithCompoundTypes(functions=FUNCTIONS)
        # Each depending default: its parameter, and its rule as a closure (or None: simpleeval).
        self.rules_to_run = [
            (name, self.settable[name], self.rules[name], closure_of(self.rules[name]))
            for name in self.affected
        ]

    def _depending(self, defaulted: list[str]) -> list[str]:
        """The defaulted arguments whose rule reads a swept one, directly or not."""
        changing = set(self.swept)
        grew = True
        while grew:
            grew = False
            for name in defaulted:
                if name not in changing and rule_names(self.rules[name]) & changing:
                    changing.add(name)
                    grew = True
        return [name for name in defaulted if name in changing]

    def _evaluation_order(self, affected: list[str]) -> list[str]:
        order: list[str] = []
        pending = list(affected)
        while pending:
            ready = [n for n in pending if not rule_names(self.rules[n]) & (set(pending) - {n})]
            if not ready:  # the project's rules are acyclic; say so if one is not
                raise SizingError(f"{self.routine.name}: default rules of {pending} form a cycle")
            order.extend(ready)
            pending = [n for n in pending if n not in ready]
        return order

    def values(self, point: tuple[int, ...]) -> dict[str, Value]:
        values = dict(self.base)
        values.update(zip(self.swept, point, strict=True))
        if not self.affected:
            return values
        self.evaluator.names = values
        for name, param, rule, closure in self.rules_to_run:
            if closure is not None:
                result = closure(values)
            else:
                result = self.evaluator.eval(rule, previously_parsed=parsed_rule(rule))
            values[name] = convert_value(self.routine, param, result, self.catalog)
        return values

    def key(self, values: Mapping[str, Value]) -> tuple[Any, ...]:
        """The point's full argument values: equal for identical calls (the answer cache)."""
        return (self.routine.name, *self._all_values(values)[:-1])

    def call_key(self, values: Mapping[str, Value]) -> tuple[str, tuple[tuple[str, Value], ...]]:
        """`Call.key()` of the point, to find calls the session sized one by one."""
        return self.routine.name, tuple((name, values[name]) for name in self.names)

    def encoded(self, values: Mapping[str, Value]) -> list[Any]:
        """The values the worker puts at `slots` (enums by number, as `Call.worker_args`)."""
        if not any(self.enums):
            return list(self._varying_values(values)[:-1])
        return [
            values[name] if enum is None else self.catalog.enums[enum][str(values[name])]
            for name, enum in zip(self.varying, self.enums, strict=True)
        ]

    def call(self, values: Mapping[str, Value]) -> Call:
        ordered = {name: values[name] for name in self.names}
        return Call(routine=self.routine, args=ordered, given=self.given)
