"""Kinds of per-turn credit, and the estimator each kind gets when the user names none.

Which estimator trains a multi-turn policy best depends on how the task's reward is laid over
its turns, so an env declares that (``StepwiseMultiTurnEnvConfig.credit_kind``, recorded on every
trace as ``trace.info["credit_kind"]``) and a host that was given no estimator takes the one the
learning suite (``benchmarks/credit_suite.py``) measured best for the kind:

    independent   each turn's reward is about that turn alone (sub-questions of one conversation)
    refinement    each turn is scored and a later turn can fix an earlier one (retries, Kevin)
    states        rollouts of a group reach the same environment states (GiGPO's setting)
    outcome       only the episode's end is paid (the control: every method should tie)

``DEFAULTS`` holds each kind's estimator (None: no kind declared), its options and why, with the suite's numbers
(held-out success after training, mean ± std over 5 paired seeds; a difference is the paired
mean with its 95% interval). Each is the suite's pre-registered rule (the highest held-out
success among methods not worse than ``grpo``; within 0.02 of it, the fewest options) applied
to the configurations that, on every bundled env of the kind, credit being right sooner above
being right later (``tests/test_right_sooner.py``): where the rule's first pick cannot
(independent: γ 1; states: ``grpo`` without std), the next one is taken and the reason says so.
A group whose traces declare no kind gets the package default,
``stepwise`` with its own defaults, and is told so. A group mixing kinds is refused.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cache
from typing import TYPE_CHECKING, Any

from verifiers_stepwise.errors import TraceError
from verifiers_stepwise.estimators import Estimator
from verifiers_stepwise.estimators.registry import get_estimator

if TYPE_CHECKING:
    from verifiers.v1 import Trace

__all__ = [
    "CREDIT_KIND",
    "DEFAULTS",
    "CreditKind",
    "KindDefault",
    "default_estimator",
    "estimator_for",
    "group_kind",
]

CREDIT_KIND = "credit_kind"
"""The ``trace.info`` key an env's declared kind is recorded under."""


class CreditKind(StrEnum):
    INDEPENDENT = "independent"
    REFINEMENT = "refinement"
    STATES = "states"
    OUTCOME = "outcome"


@dataclass(frozen=True)
class KindDefault:
    """The estimator a kind gets when the user names none: a registered name, its options, and
    the measurement that chose it."""

    estimator: str
    options: Mapping[str, Any] = field(default_factory=dict)
    why: str = ""


DEFAULTS: Mapping[CreditKind | None, KindDefault] = {
    None: KindDefault("stepwise", {}, "the env declares no kind of credit: the package default"),
    CreditKind.INDEPENDENT: KindDefault(
        "stepwise",
        {"gamma": 0.0},
        "independent (stepwise-quiz): 0.424 ± 0.104 held-out vs grpo 0.354 ± 0.115 (+0.070 [-0.031, +0.171], "
        "not shown to differ); gamma 1 (0.433) is within 0.02 but credits a wrong answer above a right one on "
        "the same turn when a later answer differs (15% of wrong turns pushed up, 0% at gamma 0)",
    ),
    CreditKind.REFINEMENT: KindDefault(
        "grpo",
        {},
        "refinement (stepwise-sums, -1 a wrong try): grpo 0.647 ± 0.048 held-out, the highest; stepwise "
        "gamma 0 0.500, gamma 1 0.453, kevin 0.567, grpo without std 0.433, none shown to differ; "
        "gamma 1 and grpo without std fell below the untrained 0.404 on two seeds each",
    ),
    CreditKind.STATES: KindDefault(
        "gigpo",
        {},
        "states (stepwise-walk): no method learned the walk in 10 steps (untrained 0.175; gigpo 0.173 ± 0.042, "
        "grpo 0.157, none shown to differ from grpo); grpo without std (0.230, the highest) credits arriving at "
        "once and a step later alike, gamma 0 (0.167) ties gigpo within 0.02 with an option more; gigpo is "
        "measured below grpo without std (-0.057 [-0.111, -0.003])",
    ),
    CreditKind.OUTCOME: KindDefault(
        "grpo",
        {},
        "outcome (stepwise-quiz paid at the end): grpo 0.349 ± 0.114 held-out, the highest; above grpo "
        "without std (+0.107 [+0.003, +0.210]) and stepwise gamma 0 (+0.234 [+0.123, +0.346]: gamma 0 sees "
        "no reward before the last turn), stepwise gamma 1 0.255 not shown to differ",
    ),
}


def group_kind(traces: Sequence[Trace]) -> CreditKind | None:
    """The kind the group's traces declare (``trace.info["credit_kind"]``), or None when none
    does. Refused with the traces named: a value that is not a kind, or a group mixing kinds."""
    seen: dict[str, str] = {}
    for trace in traces:
        raw = (trace.info or {}).get(CREDIT_KIND)
        if raw is None:
            continue
        if raw not in set(CreditKind):
            raise TraceError(f"trace {trace.id}: credit_kind {raw!r} is not one of {', '.join(CreditKind)}")
        seen.setdefault(raw, trace.id)
    if len(seen) > 1:
        named = ", ".join(f"{kind} (trace {trace})" for kind, trace in seen.items())
        raise TraceError(f"a group mixes kinds of credit: {named}; a group is one task's rollouts of one env")
    return CreditKind(next(iter(seen))) if seen else None


def default_estimator(traces: Sequence[Trace]) -> Estimator:
    """The estimator for a group whose user named none: ``estimator_for`` its ``group_kind``."""
    return estimator_for(group_kind(traces))


@cache
def estimator_for(kind: CreditKind | None) -> Estimator:
    """``DEFAULTS[kind]``'s estimator, said once per process and kind on stderr with why."""
    chosen = DEFAULTS[kind]
    options = ", ".join(f"{key}={value!r}" for key, value in chosen.options.items())
    said = f"credit kind {kind or 'undeclared'} -> {chosen.estimator}({options}): {chosen.why}"
    print(f"verifiers-stepwise: no estimator named; {said}", file=sys.stderr)
    return get_estimator(chosen.estimator, **chosen.options)
