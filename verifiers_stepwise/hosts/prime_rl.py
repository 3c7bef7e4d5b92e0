"""prime-rl: a stepwise ``Algorithm`` for the orchestrator, selected with ``type = "stepwise"``.

Run against PrimeIntellect-ai/prime-rl 559b447 (2026-08-21; prime-rl is not on PyPI) with its
pinned verifiers a60a606 in CI (``tests/hosts/test_prime_rl_host.py``); the config fields of
prime-rl's GRPO that a run-wide check reads were read from prime-rl 065a864's
``configs/algorithm.py`` (``length_weighted_baseline``, ``loss_aggregation``). See docs/prime-rl.md.

Shapes translated: prime-rl hands an algorithm one group of verifiers v1 episodes
(``Algorithm.score_group(episodes)``) and trains on ``node.advantages`` (one value per sampled
token of each sampled node), so the algorithm is ``credit.score_group`` and ``write_credit``:

    trace.info["turn_rewards"] (and "turn_nodes")          per-turn rewards of each trace
      → score_group: the estimator under ``estimator``     one credit record per trace
      → write_credit: node.advantages = [A_t] * sampled    on turn t's sampled nodes only

A trace without ``turn_rewards`` is scored with its trace reward as a final-turn reward
(``missing = "final_turn"``: every sampled node is a turn, earlier ones with reward 0), so a
single-turn env gets exactly prime-rl's GRPO with ``scale = "none"``; ``missing = "error"``
rejects such traces instead. Errored traces get no advantages and stay out of the baseline
(see ``verifiers_stepwise.traces.credit``).

prime-rl's algorithm set is closed: a pydantic discriminated union ``AlgoConfig`` used by
``OrchestratorConfig.algo`` and ``TrainSourceConfig.algo``, and the dict ``ALGORITHM_CLASSES``
that ``build_algorithm`` reads. ``register()`` adds ``StepwiseAlgoConfig`` to that union (on
every prime-rl config model whose fields use it, and the models that contain those) and
``StepwiseAlgorithm`` to the dict, in the calling process. Run prime-rl's entry points through
``python -m verifiers_stepwise.hosts.prime_rl <entry point> …`` so that both the ``rl``
launcher and the ``orchestrator`` it starts register first.

With ``orchestrator.train.filter_zero_advantages = true`` (prime-rl's default) prime-rl drops
RL tokens whose advantage is exactly 0 before training. Here that happens per turn: a turn
whose advantage is 0 leaves the RL loss, the other turns of the same trace still train. Exact
zeros matter there, so advantages are given at prime-rl's own resolution (``Float32Resolution``):
prime-rl's GRPO subtracts the group mean in float32, where rewards ``[0.1, 0.2, 0.3]`` leave the
middle trace exactly 0 (dropped) while float64 leaves -2.8e-17 (kept).

Each trace's credit record (``trace.info["stepwise_credit"]``, ``traces.credit.Credit``) names
the estimator as configured here (``estimator``) and the reading applied: ``"rewards"`` (each
entry is that turn's reward, as in ``verifiers_stepwise.traces.turns``; a ``None`` entry, which
prime-rl's open turn-credit PR #3282 allows for an unscored turn, is an error), ``"scores"``
(the trace records ``turn_scores``, or ``reading = "scores"`` reads ``turn_rewards`` as scores,
by differences) or ``"final_turn"`` (neither: the trace reward on the last turn). With
``reading`` unset, ``turn_rewards`` without ``turn_nodes`` (PR #3282's layout) is refused
rather than guessed at (docs/prime-rl.md, "Moving from prime-rl PR #3282").
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import types
from collections.abc import Sequence
from typing import Annotated, Any, ClassVar, Final, Literal, Union, get_args, get_origin

import numpy as np
import verifiers.v1 as vf
from pydantic import BaseModel, Field, model_validator

from verifiers_stepwise.errors import TraceError
from verifiers_stepwise.estimators import Estimator
from verifiers_stepwise.estimators.base import Estimate
from verifiers_stepwise.estimators.ragged import RaggedBatch
from verifiers_stepwise.extras import requires
from verifiers_stepwise.hosts import estimator_from
from verifiers_stepwise.traces.credit import Missing, score_group, write_credit
from verifiers_stepwise.traces.kinds import default_estimator
from verifiers_stepwise.traces.turns import TURN_NODES, TURN_REWARDS, Reading

# prime-rl is git-only, so no extra can install it; the adapter needs nothing else.
with requires(
    "verifiers_stepwise.hosts.prime_rl",
    "prime_rl",
    also="install prime-rl from https://github.com/PrimeIntellect-ai/prime-rl (not on PyPI)",
):
    from prime_rl.configs.algorithm import ActionLossType, BaseAlgoConfig
    from prime_rl.orchestrator.algo.base import Algorithm

__all__ = ["Float32Resolution", "StepwiseAlgoConfig", "StepwiseAlgorithm", "register"]

TYPE: Final = "stepwise"
FLOAT32_EPS = float(np.finfo(np.float32).eps)  # 2^-23, the resolution of prime-rl's GRPO arithmetic


class StepwiseAlgoConfig(BaseAlgoConfig):
    """``[orchestrator.algo]`` (or a source's ``algo``) with ``type = "stepwise"``."""

    type: Literal["stepwise"] = TYPE
    """Stepwise credit: each turn's advantage on that turn's action tokens (``rl`` loss)."""

    action_loss_type: ClassVar[ActionLossType] = "rl"

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
    """How ``trace.info["turn_rewards"]`` is read: "rewards" (one reward per env turn, this
    package's convention) or "scores" (one state score per turn, ``None`` for unscored, read by
    differences: prime-rl PR #3282's convention). Unset: a trace that also records
    ``turn_nodes`` (every env of this package does) is read as rewards, and a trace with
    ``turn_rewards`` but no ``turn_nodes`` (PR #3282's layout) is refused, since its numbers
    mean different credit under the two readings."""
    # prime-rl's GRPO fields that newer prime-rl (065a864) checks across a run's rl envs; only
    # the values this algorithm implements are accepted.
    length_weighted_baseline: Literal[False] = False
    """As prime-rl's GRPO field; the stepwise baseline is the estimator's, never length-weighted."""
    loss_aggregation: Literal["token"] = "token"
    """As prime-rl's GRPO field: every loss token weighs the same (prime-rl's default)."""

    @model_validator(mode="after")
    def _estimator_builds(self) -> StepwiseAlgoConfig:
        try:
            self.build_estimator()
        except LookupError as error:  # pydantic reports ValueErrors, not LookupErrors
            raise ValueError(str(error)) from None
        return self

    def build_estimator(self) -> Estimator | None:
        """The named estimator (options alone configure ``stepwise``), or None when neither is
        set: each group's kind of credit decides (``traces.kinds``)."""
        if self.estimator is None and not self.options:
            return None
        return estimator_from(self.model_copy(update={"estimator": self.estimator or "stepwise"}))


class StepwiseAlgorithm(Algorithm):
    """prime-rl ``Algorithm``: per-turn advantages on each turn's sampled tokens."""

    action_loss_type: ClassVar[ActionLossType] = "rl"

    def __init__(self, config: StepwiseAlgoConfig, policy_pool: Any):
        super().__init__(config, policy_pool)
        self.name = config.estimator or TYPE
        named = config.build_estimator()
        self.estimator = None if named is None else Float32Resolution(named)
        self.missing = config.missing
        self.reading = config.reading

    async def score_group(self, episodes: list[vf.Episode]) -> None:
        if self.reading is None:
            _refuse_unmarked_turn_rewards(episodes)
        estimator = self.estimator or Float32Resolution(default_estimator([t for e in episodes for t in e.traces]))
        records = score_group(episodes, estimator, missing=self.missing, reading=self.reading or "rewards")
        for episode in episodes:
            for trace in episode.traces:
                if trace.id in records:
                    write_credit(trace, records[trace.id])


def _refuse_unmarked_turn_rewards(episodes: list[vf.Episode]) -> None:
    """A ``turn_rewards`` without ``turn_nodes`` may be PR #3282's scores: refuse to guess."""
    for episode in episodes:
        for trace in episode.traces:
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
    """Make ``type = "stepwise"`` a prime-rl algorithm in this process (idempotent).

    Patches, in prime-rl: ``prime_rl.configs.algorithm.AlgoConfig`` (and the same name in
    ``prime_rl.configs.orchestrator``) to a union that also holds ``StepwiseAlgoConfig``; the
    fields of prime-rl config models annotated with the old union, then rebuilds those models
    and every loaded prime-rl config model that contains them; and
    ``prime_rl.orchestrator.algo.ALGORITHM_CLASSES["stepwise"]``.
    """
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
    for module in _config_modules():
        if getattr(module, "AlgoConfig", None) is old_alias:
            module.AlgoConfig = new_alias

    models = _config_models()
    changed = set()
    for model in models:
        for field in model.model_fields.values():
            swapped = _swap(field.annotation, members, new_union)
            if swapped is not field.annotation:
                field.annotation = swapped
                changed.add(model)
    # Containers embed a snapshot of their members' schemas: rebuild dependents after them.
    for model in _with_dependents(changed, models):
        model.model_rebuild(force=True)


def _config_modules() -> list[Any]:  # prime-rl's config modules, whose names mypy cannot know
    return [m for name, m in sys.modules.items() if name.startswith("prime_rl.configs.") and m]


def _config_models() -> list[type[BaseModel]]:
    found = []
    for module in _config_modules():
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, BaseModel) and value.__module__ == module.__name__:
                found.append(value)
    return found


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


def _models_in(annotation: Any) -> set[type]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return {annotation}
    return set().union(*(_models_in(arg) for arg in get_args(annotation)))


def _with_dependents(changed: set[type], models: Sequence[type[BaseModel]]) -> list[type[BaseModel]]:
    """``changed`` plus every model holding one of them in a field, transitively, ordered so
    that each comes after the models it holds."""
    holds = {m: set().union(*(_models_in(f.annotation) for f in m.model_fields.values())) for m in models}
    affected = set(changed)
    while grown := {m for m in models if m not in affected and holds[m] & affected}:
        affected |= grown
    ordered: list[type[BaseModel]] = []

    def place(model: type, path: frozenset = frozenset()) -> None:
        if model in ordered or model in path:  # placed already, or a self-referencing model
            return
        for held in holds.get(model, set()) & affected:
            place(held, path | {model})
        ordered.append(model)

    for model in sorted(affected, key=lambda m: m.__qualname__):
        place(model)
    return ordered


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
    from importlib import import_module

    sys.argv = [entry, *rest]
    import_module(f"prime_rl.entrypoints.{entry}").main()


def _shim_orchestrator() -> None:
    shim_dir = tempfile.mkdtemp(prefix="stepwise-prime-rl-")
    atexit.register(shutil.rmtree, shim_dir, ignore_errors=True)  # the launcher outlives its children
    shim = os.path.join(shim_dir, "orchestrator")
    with open(shim, "w") as f:
        f.write(f'#!/bin/sh\nexec "{sys.executable}" -m {MODULE} orchestrator "$@"\n')
    os.chmod(shim, 0o755)
    os.environ["PATH"] = shim_dir + os.pathsep + os.environ.get("PATH", "")


if __name__ == "__main__":
    # Register the classes of the importable module, not of this __main__ copy of it.
    from verifiers_stepwise.hosts.prime_rl import main as _main

    _main()
