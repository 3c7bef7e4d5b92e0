"""prime-rl: a stepwise ``Algorithm`` for the orchestrator, selected with ``type = "stepwise"``.

Run against PrimeIntellect-ai/prime-rl 559b447 (2026-08-21; prime-rl is not on PyPI) with its
pinned verifiers a60a606 in CI (``tests/hosts/test_prime_rl_host.py``). See docs/prime-rl.md.

prime-rl hands an algorithm one group of verifiers v1 episodes (``Algorithm.score_group``) and
trains on ``node.advantages`` (one value per sampled token of each sampled node):

    trace.info["turn_rewards"] (and "turn_nodes")          per-turn rewards of each trace
      → score_group: the estimator under ``estimator``     one credit record per trace
      → write_credit: node.advantages = [A_t] * sampled    on turn t's sampled nodes only

prime-rl's algorithm set is closed (the discriminated union ``AlgoConfig`` and the dict
``ALGORITHM_CLASSES``): ``register()`` adds this algorithm to both in the calling process, and
``python -m verifiers_stepwise.hosts.prime_rl {rl,orchestrator} …`` runs prime-rl's entry points
with it registered.
"""

from __future__ import annotations

import atexit
import importlib
import os
import shutil
import sys
import tempfile
import types
from collections.abc import Iterable, Sequence
from graphlib import TopologicalSorter
from pathlib import Path
from typing import Annotated, Any, Final, Literal, Union, get_args, get_origin

import numpy as np
import verifiers.v1 as vf
from pydantic import BaseModel, Field, model_validator

from verifiers_stepwise.errors import TraceError
from verifiers_stepwise.estimators import Estimator
from verifiers_stepwise.estimators.base import Estimate
from verifiers_stepwise.estimators.ragged import RaggedBatch
from verifiers_stepwise.estimators.registry import get_estimator
from verifiers_stepwise.extras import requires
from verifiers_stepwise.traces.credit import Missing, score_group, write_credit
from verifiers_stepwise.traces.kinds import default_estimator
from verifiers_stepwise.traces.turns import TURN_NODES, TURN_REWARDS, Reading

# prime-rl is git-only, so no extra can install it; the adapter needs nothing else.
with requires(
    "verifiers_stepwise.hosts.prime_rl",
    "prime_rl",
    also="install prime-rl from https://github.com/PrimeIntellect-ai/prime-rl (not on PyPI)",
):
    from prime_rl.configs.algorithm import BaseAlgoConfig
    from prime_rl.orchestrator.algo.base import Algorithm

__all__ = ["Float32Resolution", "StepwiseAlgoConfig", "StepwiseAlgorithm", "register"]

TYPE: Final = "stepwise"
FLOAT32_EPS = float(np.finfo(np.float32).eps)  # 2^-23, the resolution of prime-rl's GRPO arithmetic


class StepwiseAlgoConfig(BaseAlgoConfig):
    """``[orchestrator.algo]`` (or a source's ``algo``) with ``type = "stepwise"``."""

    type: Literal["stepwise"] = TYPE
    """Stepwise credit: each turn's advantage on that turn's action tokens (``rl`` loss)."""
    estimator: str | None = None
    """Registered estimator name (``verifiers_stepwise.available_estimators()``). Unset: the one
    measured best for the kind of credit the env declares (``traces.kinds``), said once on the
    orchestrator's stderr; ``stepwise`` for an env that declares none, or when ``options`` are set."""
    options: dict[str, float | int | str | bool] = Field(default_factory=dict)
    """Fields of the estimator's own config (``[orchestrator.algo.options] gamma = 0.9``),
    validated by it; unset fields keep its defaults. ``scale = "none"`` centres only, as
    prime-rl's GRPO does."""
    missing: Missing = "final_turn"
    """A trace without ``turn_rewards``: "final_turn" scores its trace reward as the last
    turn's reward; "error" fails."""
    reading: Reading | None = None
    """How ``trace.info["turn_rewards"]`` is read: "rewards" (one reward per env turn) or "scores"
    (one state score per turn, ``None`` unscored, read by differences: prime-rl PR #3282's).
    Unset: as rewards when the trace also records ``turn_nodes`` (every env of this package
    does); without them (PR #3282's layout) refused, as the two readings differ."""
    # prime-rl's GRPO fields that prime-rl 065a864 (its configs/algorithm.py) checks across a
    # run's rl envs; only the values this algorithm implements are accepted.
    length_weighted_baseline: Literal[False] = False
    """As prime-rl's GRPO field; the stepwise baseline is the estimator's, never length-weighted."""
    loss_aggregation: Literal["token"] = "token"
    """As prime-rl's GRPO field: every loss token weighs the same (prime-rl's default)."""

    @model_validator(mode="after")
    def _estimator_builds(self) -> StepwiseAlgoConfig:
        self.build_estimator()  # a bad name or option raises a ConfigError, a ValueError pydantic reports
        return self

    def build_estimator(self) -> Estimator | None:
        """The named estimator (options alone configure ``stepwise``), or None when neither is
        set: each group's kind of credit decides (``traces.kinds``)."""
        if self.estimator is None and not self.options:
            return None
        return get_estimator(self.estimator or "stepwise", **self.options)


class StepwiseAlgorithm(Algorithm):
    """prime-rl ``Algorithm``: per-turn advantages on each turn's sampled tokens."""

    def __init__(self, config: StepwiseAlgoConfig, policy_pool: Any):
        super().__init__(config, policy_pool)
        self.config = config
        named = config.build_estimator()
        self.estimator = None if named is None else Float32Resolution(named)

    async def score_group(self, episodes: list[vf.Episode]) -> None:
        traces = {trace.id: trace for episode in episodes for trace in episode.traces}
        if self.config.reading is None:
            _refuse_unmarked_turn_rewards(traces.values())
        estimator = self.estimator or Float32Resolution(default_estimator(list(traces.values())))
        reading = self.config.reading or "rewards"
        for trace_id, credit in score_group(episodes, estimator, missing=self.config.missing, reading=reading).items():
            write_credit(traces[trace_id], credit)


def _refuse_unmarked_turn_rewards(traces: Iterable[vf.Trace]) -> None:
    """A ``turn_rewards`` without ``turn_nodes`` may be PR #3282's scores: refuse to guess."""
    for trace in traces:
        info = trace.info or {}
        if TURN_REWARDS in info and TURN_NODES not in info:
            raise TraceError(
                f"trace {trace.id}: {TURN_REWARDS} without {TURN_NODES}, the layout of prime-rl PR "
                f"#3282 (one state score per sampled turn), which this package reads differently; set "
                f'[orchestrator.algo] reading = "scores" to read them as scores (by differences) or '
                f'reading = "rewards" if each entry is that turn\'s own reward (docs/prime-rl.md)'
            )


class Float32Resolution(Estimator):
    """``inner``'s advantages at prime-rl's float32 resolution: per group g of n_g turns,

        A_t := 0   where |A_t| <= n_g * eps_f32 * max_{s in g} |A_s|     (eps_f32 = 2^-23)

    prime-rl's GRPO centres rewards in float32, so a difference below that resolution is exactly
    0 there and its tokens leave the RL loss under ``filter_zero_advantages``; float64 residues
    such as -2.8e-17 (rewards [0.1, 0.2, 0.3]) would keep them. Larger advantages are unchanged."""

    def __init__(self, inner: Estimator) -> None:
        self.inner = inner
        self.config = inner.config
        self.name = inner.name

    def batched(self, batch: RaggedBatch) -> np.ndarray:
        return self.estimate(batch).advantages

    def estimate(self, batch: RaggedBatch) -> Estimate:
        returns, advantages = self.inner.estimate(batch)
        return Estimate(returns, self._resolved(batch, advantages))

    @staticmethod
    def _resolved(batch: RaggedBatch, advantages: np.ndarray) -> np.ndarray:
        if not advantages.size:
            return advantages
        magnitude = np.abs(advantages)
        # Usually nothing is that small: one bound over the whole batch rules it out in a few numpy
        # calls (prime-rl scores one group at a time, where this is most of the cost). The batch's
        # turn count is >= every group's n_g, so the bound is >= every group's tolerance; a
        # nonzero advantage at most that bound exists iff more entries are <= it than are 0.
        bound = advantages.size * FLOAT32_EPS * float(magnitude.max())
        if np.count_nonzero(magnitude <= bound) == advantages.size - np.count_nonzero(advantages):
            return advantages
        counts = batch.group_turns
        peak = np.maximum.reduceat(magnitude, batch.group_turn_starts)
        tolerance = np.repeat(counts * FLOAT32_EPS * peak, counts)
        return np.where(magnitude <= tolerance, 0.0, advantages)


# -- registration ---------------------------------------------------------------------------------


def register() -> None:
    """Make ``type = "stepwise"`` a prime-rl algorithm in this process (idempotent): prime-rl's
    ``AlgoConfig`` union, wherever a config module or a config field holds it, gains
    ``StepwiseAlgoConfig``, and ``ALGORITHM_CLASSES`` gains ``StepwiseAlgorithm``."""
    from prime_rl.configs import algorithm as algorithm_configs
    from prime_rl.configs import orchestrator as orchestrator_configs  # noqa: F401 (loads models)
    from prime_rl.configs import rl as rl_configs  # noqa: F401 (loads models)
    from prime_rl.orchestrator import algo as algorithm_runtime

    algorithm_runtime.ALGORITHM_CLASSES.setdefault(TYPE, StepwiseAlgorithm)
    old_alias = algorithm_configs.AlgoConfig
    old_union, *metadata = get_args(old_alias)  # Annotated[Union[...], Field(discriminator)]
    members = get_args(old_union)
    if StepwiseAlgoConfig in members:
        return
    new_union = Union[(*members, StepwiseAlgoConfig)]  # type: ignore[valid-type]  # a union made at run time
    new_alias = Annotated[(new_union, *metadata)]
    modules: list[Any] = [m for name, m in sys.modules.items() if name.startswith("prime_rl.configs.") and m]
    for module in modules:
        if getattr(module, "AlgoConfig", None) is old_alias:
            module.AlgoConfig = new_alias
    models = {
        value
        for module in modules
        for value in vars(module).values()
        if isinstance(value, type) and issubclass(value, BaseModel) and value.__module__ == module.__name__
    }
    changed = set()
    for model in models:
        for field in model.model_fields.values():
            swapped = _swap(field.annotation, members, new_union)
            if swapped is not field.annotation:
                field.annotation = swapped
                changed.add(model)
    _rebuild(changed, models)


def _rebuild(changed: set[type[BaseModel]], models: set[type[BaseModel]]) -> None:
    """Rebuild ``changed`` and every model holding one of them, transitively, each after the
    models it holds (a container embeds a snapshot of its members' schemas)."""
    holds = {m: set().union(*(_models_in(f.annotation) for f in m.model_fields.values())) - {m} for m in models}
    affected = set(changed)
    while grown := {m for m in models if m not in affected and holds[m] & affected}:
        affected |= grown
    for model in TopologicalSorter({m: holds[m] & affected for m in affected}).static_order():
        model.model_rebuild(force=True)


def _swap(annotation: Any, members: tuple, new_union: Any) -> Any:
    """``annotation`` with every union of exactly ``members`` replaced by ``new_union``;
    the same object when nothing matched."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, types.UnionType) and args == members:
        return new_union
    if not args or origin is None:
        return annotation
    swapped = tuple(_swap(arg, members, new_union) if not isinstance(arg, (str, int)) else arg for arg in args)
    if all(a is b for a, b in zip(swapped, args)):
        return annotation
    if origin is Annotated:
        return Annotated[swapped]
    if origin in (Union, types.UnionType):
        return Union[swapped]  # noqa: UP007 (built from a tuple at run time; `X | Y` has no such form)
    return origin[swapped]


def _models_in(annotation: Any) -> set[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return {annotation}
    return set().union(*(_models_in(arg) for arg in get_args(annotation)))


# -- running prime-rl's entry points with the registration ----------------------------------------

ENTRY_POINTS = ("rl", "orchestrator")
MODULE = "verifiers_stepwise.hosts.prime_rl"
"""This module's import name (``__name__`` is ``"__main__"`` under ``python -m``)."""


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m verifiers_stepwise.hosts.prime_rl {rl,orchestrator} [args…]``.

    Registers, then runs that prime-rl entry point with the remaining arguments. For ``rl``,
    the orchestrator process the launcher starts (it runs the ``orchestrator`` command from
    PATH) is started through this module too, via a shim first on PATH.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in ENTRY_POINTS:
        raise SystemExit(f"usage: python -m {MODULE} {{{','.join(ENTRY_POINTS)}}} [prime-rl arguments]")
    entry, rest = args[0], args[1:]
    register()
    if entry == "rl":
        _shim_orchestrator()
    sys.argv = [entry, *rest]
    importlib.import_module(f"prime_rl.entrypoints.{entry}").main()


def _shim_orchestrator() -> None:
    shim = Path(tempfile.mkdtemp(prefix="stepwise-prime-rl-")) / "orchestrator"
    atexit.register(shutil.rmtree, shim.parent, ignore_errors=True)  # the launcher outlives its children
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m {MODULE} orchestrator "$@"\n')
    shim.chmod(0o755)
    os.environ["PATH"] = f"{shim.parent}{os.pathsep}{os.environ.get('PATH', '')}"


if __name__ == "__main__":
    # Register the classes of the importable module, not of this __main__ copy of it.
    from verifiers_stepwise.hosts.prime_rl import main as _main

    _main()
