"""The DAPO-math taskset: one task per problem, scored as DAPO scores it.

A response's reward is the sum of its named terms:

    correct           correct_reward (+1) if the extracted answer equals the ground truth,
                      else incorrect_reward (−1; 0 for a 1/0 reward)
    overlong_penalty  DAPO's soft overlong punishment of the response length (only when
                      ``overlong.enabled``; see :mod:`stepwise_dapo_math.shaping`)

and the metrics ``accuracy`` (1/0), ``has_answer`` (an answer was extracted, 1/0),
``verify_timeout`` (math-verify ran out of time, 1/0) and ``response_tokens`` (when known).
Scored on the trace's last reply; the multi-turn env scores every turn with the same
:meth:`DapoMathTask.score_reply`. Checked against verifiers 0.4.0 (``vf.Task``, ``vf.Taskset``,
``@vf.reward`` returning named terms).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property

import verifiers.v1 as vf

from stepwise_dapo_math.answers import check_against, extract_answer, normalize_integer
from stepwise_dapo_math.config import DapoMathTaskConfig, DapoMathTasksetConfig
from stepwise_dapo_math.loaders import DatasetError, load_problems
from stepwise_dapo_math.shaping import overlong_penalty
from stepwise_dapo_math.symbolic import shared_checker
from stepwise_dapo_math.tokens import TokenizerError, count_tokens, load_tokenizer
from verifiers_stepwise.envs.tasksets import CountedTake

DAPO_TURNS = "dapo_turns"

__all__ = [
    "DAPO_TURNS",
    "DapoMathData",
    "DapoMathTask",
    "DapoMathTaskset",
    "TurnScore",
    "last_sampled_node",
    "response_length",
    "response_lengths",
]


class DapoMathData(vf.TaskData):
    answer: str
    """The ground truth, as the dataset gives it."""
    problem: str | None = None
    """The bare problem statement (``prompt`` is the full DAPO user message)."""
    source: str = ""
    """Where the problem comes from (dataset, file or bundled generator)."""
    split: str | None = None


@dataclass(frozen=True)
class TurnScore:
    """How one response scored."""

    correct: bool
    extracted: str | None
    correctness: float
    """``correct_reward`` or ``incorrect_reward``."""
    overlong: float | None = None
    """R_length, or None when overlong shaping is off."""
    length: int | None = None
    timed_out: bool = False
    error: str | None = None
    """A math-verify worker failure (the answer then counts as wrong)."""
    echoed: bool = False
    """The extracted answer is the prompt's own ``Answer: ...`` text (its template, echoed
    back), so it does not count for ``has_answer``."""
    rewards: dict[str, float] = field(init=False)

    def __post_init__(self) -> None:
        rewards = {"correct": self.correctness}
        if self.overlong is not None:
            rewards["overlong_penalty"] = self.overlong
        object.__setattr__(self, "rewards", rewards)

    @property
    def reward(self) -> float:
        """The response's total reward: the sum of its named terms."""
        return sum(self.rewards.values())

    def record(self, node: int | None) -> dict:
        """This score as kept in ``trace.info["dapo_turns"]``, for the reply at ``node``."""
        record = {
            "node": node,
            "extracted": self.extracted,
            "correct": self.correct,
            "rewards": self.rewards,
            "metrics": self.metrics,
        }
        return record | ({"verify_error": self.error} if self.error is not None else {})

    @property
    def metrics(self) -> dict[str, float]:
        metrics = {
            "accuracy": float(self.correct),
            "has_answer": float(self.extracted is not None and not self.echoed),
            "verify_timeout": float(self.timed_out),
            "verify_error": float(self.error is not None),
        }
        if self.length is not None:
            metrics["response_tokens"] = float(self.length)
        return metrics


class DapoMathTask(vf.Task[DapoMathData, vf.State, DapoMathTaskConfig]):
    @property
    def key(self) -> str:
        return self.data.id or self.hash

    async def score_reply(self, reply: str, length: int | None = None) -> TurnScore:
        """Score one response of ``length`` tokens (needed only for overlong shaping)."""
        config = self.config
        overlong = None
        if config.overlong.enabled:
            if length is None:
                fix = (
                    "; set overlong.tokenizer (--env.taskset.task.overlong.tokenizer) to the model's tokenizer, "
                    "a Hugging Face name or local directory, to count them from the reply's text"
                    if config.overlong.tokenizer is None
                    else ""
                )
                raise ValueError(
                    f"task {self.key}: overlong shaping needs the response's token count, "
                    f"but the trace has neither sampled tokens nor provider usage for it{fix}"
                )
            overlong = overlong_penalty(length, config.overlong.max_tokens, config.overlong.cache_tokens)
        timed_out, error = False, None
        if config.verifier == "integer":
            check = check_against(reply, self._gold, boxed_fallback=config.boxed_fallback)
            correct, extracted = check.correct, check.extracted
        else:
            found = extract_answer(reply, boxed_fallback=config.boxed_fallback)
            extracted = None if found is None else found[0]
            correct = False
            if extracted is not None:
                checker = shared_checker(config.math_verify.workers, config.math_verify.timeout_s)
                result = await checker.acheck(extracted, self.data.answer)
                correct, timed_out, error = result.correct, result.timed_out, result.error
        reward = config.correct_reward if correct else config.incorrect_reward
        echoed = extracted is not None and self._in_prompt_answer(extracted)
        return TurnScore(correct, extracted, reward, overlong, length, timed_out, error, echoed)

    def _in_prompt_answer(self, extracted: str) -> bool:
        """Whether the answer starts like one the prompt itself gives after ``Answer:`` (DAPO's
        template: ``Answer: $Answer (without quotes) where $Answer is ...``): echoed, not answered."""
        head = extracted.split(maxsplit=1)[0] if extracted.strip() else extracted
        return head in self._prompt_answer_heads

    @cached_property
    def _prompt_answer_heads(self) -> frozenset[str]:
        """The first word after each ``Answer:`` in the prompt (a closing quote or period too)."""
        prompt = self.data.prompt
        text = prompt if isinstance(prompt, str) else " ".join(str(getattr(m, "content", m)) for m in prompt or [])
        return frozenset(re.findall(r"Answer\s*[:：]\s*(\S+)", text, re.IGNORECASE))

    @vf.reward
    async def dapo(self, trace: vf.Trace) -> dict[str, float]:
        scored = _scored_last_reply(trace)
        if scored is None:
            _, scored = await self.score_last_reply(trace, trace.last_reply)
        trace.record_metrics(scored["metrics"])
        return scored["rewards"]

    async def score_last_reply(self, trace: vf.Trace, reply: str) -> tuple[TurnScore, dict]:
        """Score ``reply``, the trace's last model response, and its ``dapo_turns`` record."""
        node = last_sampled_node(trace)
        overlong = self.config.overlong
        tokenizer = overlong.tokenizer if overlong.enabled else None
        score = await self.score_reply(reply, response_length(trace, node, tokenizer))
        return score, score.record(node)

    @cached_property
    def _gold(self) -> str:
        """The ground truth in canonical form, normalized once per task (every reply uses it)."""
        gold = normalize_integer(self.data.answer)
        if gold is None:
            raise ValueError(
                f"task {self.key}: ground truth {self.data.answer!r} is not an integer; "
                "use verifier='math_verify' for symbolic answers"
            )
        return gold


class DapoMathTaskset(CountedTake, vf.Taskset[DapoMathTask, DapoMathTasksetConfig]):
    """DAPO-Math-17k, AIME-style sets, a local file, or the bundled offline set
    (``--env.taskset.dataset`` / ``--env.taskset.path``; see :class:`DapoMathTasksetConfig`)."""

    def load(self) -> list[DapoMathTask]:
        """The selected problems as tasks. A source that cannot be read, a bad row, an empty
        selection or an ``overlong.tokenizer`` that cannot load stops the run here, before any
        episode, with its one line: ``SystemExit``, as verifiers' own setup errors do (``vf-eval``
        prints any other exception from a taskset's ``load`` as a traceback). The
        :class:`DatasetError` or :class:`TokenizerError` is its ``__cause__``."""
        try:
            return self._tasks()
        except (DatasetError, TokenizerError) as error:
            raise SystemExit(f"stepwise-dapo-math: {error}") from error

    def _tasks(self) -> list[DapoMathTask]:
        overlong = self.config.task.overlong
        if overlong.enabled and overlong.tokenizer:
            load_tokenizer(overlong.tokenizer)  # a name that cannot load stops the run before any episode
        problems = load_problems(self.config)
        if not problems:
            raise DatasetError(
                f"no problems selected from {self.config.path or self.config.dataset!r} "
                f"(split={self.config.split!r}, limit={self.config.limit!r})"
            )
        tasks = []
        for problem in problems:
            if self.config.task.verifier == "integer" and normalize_integer(problem.answer) is None:
                raise DatasetError(
                    f"{problem.source} problem {problem.id!r}: ground truth {problem.answer!r} "
                    "is not an integer; set task.verifier=math_verify for symbolic answers"
                )
            data = DapoMathData(
                id=problem.id,
                prompt=problem.prompt,
                system_prompt=problem.system_prompt,
                answer=problem.answer,
                problem=problem.problem,
                source=problem.source,
                split=problem.split,
            )
            tasks.append(DapoMathTask(data, self.config.task))
        return tasks

    def source(self) -> str:
        """The file or dataset the problems come from (``CountedTake``'s warning on ``-n``)."""
        return str(self.config.path or self.config.dataset)


def response_lengths(trace: vf.Trace) -> list[int | None]:
    """Token count of every model response in ``trace``, in order (see ``response_length``)."""
    return [response_length(trace, i) for i, node in enumerate(trace.nodes) if node.sampled]


def response_length(trace: vf.Trace, index: int | None, tokenizer: str | None = None) -> int | None:
    """Token count of the model response ``trace.nodes[index]``: the node's sampled tokens
    (train client), else the provider's ``completion_tokens`` for the call that produced it
    (eval client), else its text (reasoning and content) counted with ``tokenizer`` when given
    (``overlong.tokenizer``), else None (also when ``index`` is None: the model never spoke)."""
    if index is None:
        return None
    node = trace.nodes[index]
    if len(node.token_ids):  # a list, or an array from newer train clients
        return node.mask.count(True)
    call = next((call for call in reversed(trace.calls) if call.node == index), None)
    if call is not None and call.usage is not None:
        return call.usage.completion_tokens
    if tokenizer is None:
        return None
    message = node.message
    content = message.content if isinstance(message.content, str) else None
    return count_tokens(tokenizer, getattr(message, "reasoning_content", None), content)


def last_sampled_node(trace: vf.Trace) -> int | None:
    """Index of the trace's last model response in ``trace.nodes`` (None: the model never spoke)."""
    return next((i for i in reversed(range(len(trace.nodes))) if trace.nodes[i].sampled), None)


def _scored_last_reply(trace: vf.Trace) -> dict | None:
    """The env's score of the trace's last reply, if the env scored it (multi-turn mode): a
    reply is never verified twice, which matters on the math-verify path."""
    turns = trace.info.get(DAPO_TURNS)
    node = last_sampled_node(trace)
    if turns and node is not None and turns[-1].get("node") == node:
        return turns[-1]
    return None
