"""Every exception class the package defines has one boundary from ``verifiers_stepwise.errors``
(docs/contributing.md), and the raise sites fixed in issue 24 raise theirs."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from verifiers_stepwise import errors

ROOT = Path(__file__).resolve().parents[1]

BOUNDARY = {
    "verifiers_stepwise.errors.ConfigError": errors.ConfigError,
    "verifiers_stepwise.errors.RewardError": errors.RewardError,
    "verifiers_stepwise.errors.TraceError": errors.TraceError,
    "verifiers_stepwise.errors.HostMismatch": errors.HostMismatch,
    "verifiers_stepwise.errors.DependencyMissing": errors.DependencyMissing,
    "verifiers_stepwise.estimators.registry.UnknownEstimator": errors.ConfigError,
    "verifiers_stepwise.plugins.EntryPointConflict": errors.ConfigError,
    "verifiers_stepwise.traces.credit.MissingTurnRewards": errors.TraceError,
    "verifiers_stepwise.analysis.tracefile.BadInput": errors.TraceError,
    "verifiers_stepwise.extras.TrainerDependencyMissing": errors.HostMismatch,
    "verifiers_stepwise.extras.MissingExtra": errors.DependencyMissing,
}
"""Each exception class -> its boundary."""
RECORDED = {"verifiers_stepwise.envs.harness.ModelCallError"}
"""Rollout faults: recorded on the trace by verifiers' error model, never raised past an episode."""


def defined_exceptions() -> set[str]:
    """``module.Class`` of every class in the package whose bases name an Error/Exception/Missing…"""
    found = set()
    for path in (ROOT / "verifiers_stepwise").rglob("*.py"):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                isinstance(b, ast.Name) and (b.id.endswith(("Error", "Exception", "Mismatch", "Missing")))
                for b in node.bases
            ):
                found.add(f"{module}.{node.name}")
    return found


def test_every_exception_class_has_a_boundary():
    assert defined_exceptions() == set(BOUNDARY) | RECORDED | {"verifiers_stepwise.errors.StepwiseError"}
    for name, boundary in BOUNDARY.items():
        module, _, cls = name.rpartition(".")
        error = getattr(importlib.import_module(module), cls)
        assert issubclass(error, boundary) and issubclass(error, errors.StepwiseError), name


@pytest.mark.parametrize(
    "boundary, builtin",
    [
        (errors.ConfigError, ValueError),
        (errors.RewardError, ValueError),
        (errors.TraceError, ValueError),
        (errors.HostMismatch, RuntimeError),
        (errors.DependencyMissing, ImportError),
    ],
)
def test_each_boundary_is_still_the_builtin_older_code_caught(boundary, builtin):
    assert issubclass(boundary, builtin)


def test_a_bad_setting_is_a_config_error_where_it_was_a_bare_value_error():
    from types import SimpleNamespace

    from verifiers_stepwise.analysis.stats import with_gamma
    from verifiers_stepwise.estimators.registry import get_estimator
    from verifiers_stepwise.traces.credit import score_group
    from verifiers_stepwise.traces.turns import read_turns

    with pytest.raises(errors.ConfigError, match="missing must be"):
        score_group([], "stepwise", missing="never")  # type: ignore[arg-type]
    trace = SimpleNamespace(id="t", info={"turn_rewards": [1.0]}, nodes=[])
    with pytest.raises(errors.ConfigError, match="reading must be"):
        read_turns(trace, reading="points")  # type: ignore[arg-type]
    with pytest.raises(errors.ConfigError, match="no gamma to sweep"):
        with_gamma(get_estimator("grpo"), 0.5)
    with pytest.raises(errors.ConfigError):
        get_estimator("no-such-estimator")
