"""StepwiseMultiTurnEnv: a verifiers v1 ``Env`` that runs the turn loop and records a reward per turn.

Verifiers 0.4.0 has no ``MultiTurnEnv``; a multi-turn env writes ``Env.run`` around
``agents.agent.interaction(task)``. This class writes that loop once:

    model turn (one harness segment, tool calls included)
      -> env_response(task, turn) scores it and returns the next user message, or None to stop
      -> ... until env_response stops, the segment terminates (a limit, a @stop, an error),
         or max_turns turns were taken

and records every turn on the trace (``verifiers_stepwise.traces.turns``) as it ends, so a
fault keeps the turns already earned: a reward in ``trace.info["turn_rewards"]``, or, for an env
that scores the state after each turn (``TurnResult(score=...)``), a score in
``["turn_scores"]``, read as rewards by differences. Subclasses write ``env_response``, and
``forfeit`` and ``turn_state`` where those apply.

The policy cannot stall or quit for free. Unless ``agent.max_turns`` is set, the run's model
calls are capped at ``max_turns × max_calls_per_turn``, so a model that answers every call with
a tool call ends the run. A run that a limit or a task's ``@vf.stop`` ends after the env asked
for another turn forfeits the n turns it did not take: ``forfeit(task, n)`` is added to the last
recorded turn's reward (to its score when recorded by scores: the same change of r_last), and
``trace.info["forfeited_turns"]`` says n. Under the absorbing baseline a run that stops after
one −1 otherwise out-scores one that kept trying (group [−1, +1], [−1, −1, −1], [−1]: the
quitter's turn gets +0.33).

Being right sooner. ``turn_cost`` c is charged on every turn after which the env asks for
another and on every forfeited turn: r_t becomes r_t − c (a turn recorded by score: φ_t less c
for each such turn so far, so the difference is r_t − c). Without it an env paying 1 for the
answer that ends the episode and 0 before pays [1] and [0, 1] the same sum, and an estimator
that sums an episode (``grpo``, γ 1) cannot prefer the shorter.

The default agent plays through the in-process ``stepwise-chat`` harness, which executes
nothing itself; tools that execute code belong in the task's toolsets, sandboxed by their own
runtime. Any harness that can resume an exchange works (``--env.agent.harness.id null``),
except with ``exclude_think``. Checked against verifiers 0.4.0 (``verifiers/v1/env.py``,
``agent.py``, ``configs/env.py``).
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass

import verifiers.v1 as vf
from pydantic import Field, model_validator
from verifiers.v1.agent import agent_config_fields

from verifiers_stepwise.envs.harness import HARNESS_ID
from verifiers_stepwise.traces.kinds import CREDIT_KIND, CreditKind
from verifiers_stepwise.traces.turns import append_turn, append_turn_score, append_turn_state, forfeit_turns

__all__ = ["StepwiseMultiTurnEnv", "StepwiseMultiTurnEnvConfig", "Turn", "TurnResult"]


class StepwiseMultiTurnEnvConfig(vf.EnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig(harness={"id": HARNESS_ID}, runtime=vf.SubprocessConfig())
    """The one seat: the policy, through the in-process harness by default."""
    max_turns: int = Field(4, ge=1)
    """Environment turns per episode (``--env.max-turns``). A turn is one model reply the env
    scores and may hold several model calls (a tool loop); ``--env.agent.max-turns`` caps
    model calls instead."""
    max_calls_per_turn: int = Field(64, ge=1)
    """Model calls (a tool loop) budgeted per turn: with ``agent.max_turns`` unset, the run's
    calls are capped at ``max_turns × max_calls_per_turn`` (module docstring)."""
    credit_kind: CreditKind | None = None
    """How the env's reward is laid over its turns (``verifiers_stepwise.traces.kinds``):
    independent, refinement, states or outcome. Recorded on every trace; a host given no
    estimator trains with the one measured best for the kind. None: undeclared (the package
    default estimator)."""
    turn_cost: float = Field(0.0, ge=0.0, allow_inf_nan=False)
    """Charged on every turn after which the env asks for another, and on every turn a limit
    took away (module docstring): among episodes that end the same, the shorter earns more, so
    being right sooner is preferred even by estimators that sum an episode's rewards."""
    exclude_think: bool = False
    """Remove earlier turns' reasoning (``<think>…</think>`` and reasoning fields) from the
    context the model sees on later turns; the current turn keeps its own (Kevin)."""

    @model_validator(mode="after")
    def _configure_agents(self) -> StepwiseMultiTurnEnvConfig:
        """Cap each agent's model calls (without a cap a model that only makes tool calls never
        ends its turn), and carry ``exclude_think`` to its harness, which builds each request's
        context."""
        for name, spec in agent_config_fields(self).items():
            if spec.max_turns is None:
                spec.max_turns = self.max_turns * self.max_calls_per_turn
            if not self.exclude_think:
                continue
            harness = spec.harness
            if harness is None or "exclude_think" not in type(harness).model_fields:
                used = harness.id if harness is not None else "the taskset's default"
                raise ValueError(
                    f"exclude_think needs a harness that rebuilds each turn's context "
                    f"({HARNESS_ID!r}); agent {name!r} runs {used!r}, which replays the "
                    f"conversation as it was"
                )
            spec.harness = harness.model_copy(update={"exclude_think": True})
        return self


@dataclass(frozen=True)
class Turn:
    """One finished model turn, as ``env_response`` sees it."""

    index: int
    """0 for the first turn."""
    segment: vf.Segment
    """What the model produced this turn: its assistant messages and tool results."""
    trace: vf.Trace
    """The live trace (the whole exchange so far)."""
    last: bool
    """Whether this is turn ``max_turns``: a returned message is not sent."""

    @property
    def reply(self) -> str:
        """The model's final text this turn."""
        return self.segment.last_reply


@dataclass(frozen=True)
class TurnResult:
    """``env_response``'s verdict on a turn: its ``reward`` or its ``score``, exactly one.

    An env whose score describes the episode's state after the turn (the answer's closeness,
    tests passed so far) returns ``score=``: it is recorded in ``trace.info["turn_scores"]``
    and read as rewards by differences, r_t = φ_t − φ_prev, so a turn earns what it improved
    and repeating a good answer earns nothing more. Recorded as rewards, the same scores would
    sum: four near misses would out-earn one right answer. One kind per trace.
    """

    reward: float | None = None
    """This turn's reward, recorded in ``trace.info["turn_rewards"]``."""
    message: str | vf.Messages | None = None
    """The next user message, or None to end the episode."""
    score: float | None = None
    """The score φ_t of the state after this turn, recorded in ``trace.info["turn_scores"]``."""

    def __post_init__(self) -> None:
        if (self.reward is None) == (self.score is None):
            raise ValueError(
                f"TurnResult takes exactly one of reward= and score=, got reward={self.reward!r}, score={self.score!r}"
            )


class StepwiseMultiTurnEnv(vf.Env[StepwiseMultiTurnEnvConfig]):
    """Runs the turn loop for its subclasses; they score turns in ``env_response``.

    Tasks must carry a prompt: the model speaks first. The seat is the config's ``agent``.
    A subclass with a config of its own names it the way verifiers reads it, from an
    ``Env[...]`` base: ``class MyEnv(StepwiseMultiTurnEnv, vf.Env[MyConfig])`` with
    ``MyConfig(StepwiseMultiTurnEnvConfig)``.
    """

    config: StepwiseMultiTurnEnvConfig

    @abstractmethod
    async def env_response(self, task: vf.Task, turn: Turn) -> TurnResult:
        """Score ``turn`` and say what the user answers (``TurnResult.message``) or that the
        episode ends (``message=None``). Called after every turn, the last one included."""

    def turn_state(
        self, task: vf.Task, index: int, trace: vf.Trace, message: str | vf.Messages | None
    ) -> str | int | None:
        """The anchor state turn ``index`` acts from, as a key compared exactly across the
        rollouts of a group (``gigpo`` groups turns by it), or None: no state to say. Called
        before the model's turn with the live ``trace`` and the ``message`` about to be sent
        (None on the first turn, which answers the task's prompt); recorded with the turn in
        ``trace.info["turn_states"]``. Key a state by what defines it (the board, the files,
        the observation's text), never by what differs between rollouts. None here."""
        return None

    def forfeit(self, task: vf.Task, turns: int) -> float:
        """The reward of ``turns`` turns the run did not take because a limit ended it after
        the env asked for more (module docstring); added to the last recorded turn. 0 here:
        an env with negative rewards for unsolved turns returns what those turns cost."""
        return 0.0

    async def run(self, task: vf.Task, agents: vf.Agents) -> None:
        cost = self.config.turn_cost
        async with agents.agent.interaction(task) as chat:
            if self.config.credit_kind is not None:
                chat.trace.info[CREDIT_KIND] = self.config.credit_kind.value
            message: str | vf.Messages | None = None
            charged = 0.0  # the cost of the turns so far that asked for another (scores: φ_t − charged)
            for index in range(self.config.max_turns):
                first = len(chat.trace.nodes)
                state = self.turn_state(task, index, chat.trace, message)
                segment = await chat.turn(message)
                if segment.terminated:
                    left = self.config.max_turns - index
                    if index > 0 and not chat.trace.errors:  # a limit or @stop refused the next turn
                        forfeit_turns(chat.trace, left, self.forfeit(task, left) - cost * left)
                    return
                nodes = [i for i in range(first, len(chat.trace.nodes)) if chat.trace.nodes[i].sampled]
                last = index == self.config.max_turns - 1
                result = await self.env_response(task, Turn(index, segment, chat.trace, last))
                paid = cost if result.message is not None else 0.0
                charged += paid
                if result.score is not None:
                    append_turn_score(chat.trace, result.score - charged, nodes)
                else:
                    append_turn(chat.trace, result.reward - paid, nodes)  # type: ignore[operator]  # one is set
                append_turn_state(chat.trace, state)
                if result.message is None:
                    return
                message = result.message
