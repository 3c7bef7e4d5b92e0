"""Kinds of credit (``traces.kinds``): what a group declares, the estimator each kind gets when
none is named, and that the choice is said with its reason."""

from __future__ import annotations

import pytest
import verifiers.v1 as vf

from verifiers_stepwise import get_estimator, score_group
from verifiers_stepwise.errors import TraceError
from verifiers_stepwise.testing.traces import TraceBuilder
from verifiers_stepwise.traces import kinds
from verifiers_stepwise.traces.kinds import CREDIT_KIND, DEFAULTS, CreditKind, group_kind
from verifiers_stepwise.traces.turns import append_turn


def episode(rewards, kind=None):
    builder = TraceBuilder()
    for reward in rewards:
        append_turn(builder.trace, reward, [builder.sample("7")])
        builder.add(vf.UserMessage(content="Again."))
    if kind is not None:
        builder.trace.info[CREDIT_KIND] = kind
    return builder.episode()


def test_every_kind_has_a_default_that_is_a_valid_registered_configuration():
    assert set(DEFAULTS) == {*CreditKind, None}
    for kind in CreditKind:
        chosen = DEFAULTS[kind]
        get_estimator(chosen.estimator, **chosen.options)  # a bad name or option raises
        assert chosen.why.startswith(kind.value)  # the reason names the suite's task of the kind
    assert DEFAULTS[None].estimator == "stepwise"


def test_a_group_declares_one_kind_or_none():
    assert group_kind([episode([1.0]).traces[0], episode([0.0]).traces[0]]) is None
    assert group_kind([episode([1.0], "states").traces[0], episode([0.0]).traces[0]]) is CreditKind.STATES
    with pytest.raises(TraceError, match=r"mixes kinds of credit: refinement \(trace .*\), states"):
        group_kind([episode([1.0], "refinement").traces[0], episode([0.0], "states").traces[0]])
    with pytest.raises(TraceError, match="credit_kind 'stepwise' is not one of independent, refinement"):
        group_kind([episode([1.0], "stepwise").traces[0]])


def test_no_estimator_named_scores_with_the_kinds_default_and_says_so_once(capsys):
    kinds.estimator_for.cache_clear()
    group = [episode([-1.0, 1.0], "refinement"), episode([1.0], "refinement")]
    records = score_group(group)
    assert {r.estimator for r in records.values()} == {"grpo"}
    assert list(records.values()) == list(score_group(group, "grpo").values())
    score_group(group)
    said = capsys.readouterr().err.splitlines()
    why = DEFAULTS[CreditKind.REFINEMENT].why
    assert said == [f"verifiers-stepwise: no estimator named; credit kind refinement -> grpo(): {why}"]


def test_an_undeclared_group_gets_the_package_default(capsys):
    kinds.estimator_for.cache_clear()
    group = [episode([0.0, 1.0]), episode([1.0])]
    assert list(score_group(group).values()) == list(score_group(group, "stepwise").values())
    assert "credit kind undeclared -> stepwise(): the env declares no kind" in capsys.readouterr().err
