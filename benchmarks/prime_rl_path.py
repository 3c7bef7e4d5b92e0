"""The prime-rl path: stepwise credit vs a plain reward-minus-mean broadcast, same episodes.

1,024 groups × 16 episodes of 1–8 turns each, built as verifiers v1 traces with token ids
(32–256 sampled tokens per turn by default; ``--tokens MIN MAX``). prime-rl hands its
algorithm one group at a time, so all paths run group by group, as prime-rl would call them:

- stepwise: ``StepwiseAlgorithm.score_group`` (``verifiers_stepwise.hosts.prime_rl``; without
  prime-rl installed, the two calls it makes, ``credit.score_group`` and ``write_credit``): per-turn rewards from
  ``trace.info``, the ``stepwise`` estimator, ``node.advantages`` per turn.
- reference: reward minus group mean broadcast to every sampled token of the trace — prime-rl's
  GRPO written as plain Python, counting sampled tokens with ``sum(node.mask)`` as prime-rl
  does (``GRPOAlgorithm`` itself is also timed when prime-rl is installed).
- the same reference counting with ``mask.count(True)``, as the stepwise path does: the
  stepwise path's cost beyond a broadcast written as fast as plain Python allows.
- ``credit.score_group`` with the default estimator (``stepwise()``: ``absorbing``, γ 1).
- ``credit.score_group`` with a free estimator: each group's estimate made before timing and
  handed back (``Replayed``), so the path minus all of the math. No estimator, however fast,
  takes the path below this: it bounds what a faster estimator could gain.

Prints, for wall-clock and for CPU time (the process's; on a core shared with another job the
wall clock also counts the other job's time slices), the median seconds per pass over all
groups and the median per-repeat ratios of the stepwise path to each other path. The goal
(issue #33): the stepwise path ≤ 1.25× prime-rl's own ``GRPOAlgorithm`` in the same run, which
is what a prime-rl user pays for per-turn credit; prime-rl's GRPO itself costs 1.6–1.7× the
plain broadcast (docs/benchmarks.md says where the time goes). The paths alternate within
each repeat, since this machine is shared, and the garbage
collector is off while timing, as in ``timeit``.

``--walked``: before each group's call, and untimed, the group is walked as prime-rl 559b447's
``TrainSink.process_group`` walks it just before ``finalize_group`` (``walk_as_prime_rl``), so
every path starts from the caches prime-rl leaves it; the clocks then run per group (two
readings a group, the same for every path).

    python benchmarks/prime_rl_path.py [--groups 1024] [--tokens 32 256] [--repeats 7] [--walked]
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import operator
import os
import random
import statistics
import time
from collections.abc import Callable

os.environ.setdefault("OMP_NUM_THREADS", "1")

import verifiers.v1 as vf  # noqa: E402

from verifiers_stepwise import get_estimator  # noqa: E402
from verifiers_stepwise.estimators import Estimator  # noqa: E402
from verifiers_stepwise.estimators.base import Estimate  # noqa: E402
from verifiers_stepwise.testing.traces import TraceBuilder  # noqa: E402
from verifiers_stepwise.traces.credit import score_group, write_credit  # noqa: E402
from verifiers_stepwise.traces.turns import append_turn  # noqa: E402


def build_groups(
    n_groups: int, group_size: int, max_turns: int, tokens: tuple[int, int], seed: int
) -> list[list[vf.Episode]]:
    """Episodes of 1..max_turns turns, each turn one sampled node of ``tokens`` sampled tokens.

    Committing turns through verifiers' graph takes milliseconds, so 64 template traces are
    built that way and every episode is a fresh copy of one (parsed from its JSON), with its
    own random turn rewards; the trace reward is its last turn's reward.
    """
    rng = random.Random(seed)
    templates: dict[int, list[str]] = {}
    for n_turns in range(1, max_turns + 1):
        for _ in range(8):
            b = TraceBuilder(prompt="Solve the task and show the answer.")
            for t in range(n_turns):
                if t:
                    b.add(vf.UserMessage(content="Not yet right, try again."))
                append_turn(b.trace, 0.0, [b.sample("an attempt", n_tokens=rng.randint(*tokens))])
            templates.setdefault(n_turns, []).append(b.episode(reward=0.0).model_dump_json())
    groups = []
    for _ in range(n_groups):
        episodes = []
        for _ in range(group_size):
            episode = vf.Episode.model_validate_json(rng.choice(templates[rng.randint(1, max_turns)]))
            trace = episode.traces[0]
            rewards = [rng.choice([0.0, 0.25, 0.5, 1.0]) for _ in trace.info["turn_rewards"]]
            trace.info["turn_rewards"] = rewards
            trace.record_reward("reward", rewards[-1])
            episodes.append(episode)
        groups.append(episodes)
    return groups


def reward_minus_mean(episodes: list[vf.Episode], count_sampled: Callable[[list[bool]], int] = sum) -> None:
    """prime-rl's GRPO (grpo.py + routing.assign_advantages) as plain Python.

    ``count_sampled(node.mask)`` counts a node's sampled tokens: ``sum``, as prime-rl writes
    it, or ``count_true``, the C-level count the stepwise path uses.
    """
    traces = [trace for episode in episodes for trace in episode.traces]
    rewards = [trace.reward for trace in traces]
    mean = sum(rewards) / len(rewards)
    for trace, reward in zip(traces, rewards):
        advantage = reward - mean
        for node in trace.nodes:
            sampled = count_sampled(node.mask)
            if sampled:
                node.advantages = [advantage] * sampled


def score_and_write(episodes: list[vf.Episode], estimator: Estimator) -> None:
    """What ``StepwiseAlgorithm.score_group`` does: the group's records, each kept on its trace."""
    records = score_group(episodes, estimator)
    for episode in episodes:
        for trace in episode.traces:
            if trace.id in records:
                write_credit(trace, records[trace.id])


count_true = operator.methodcaller("count", True)  # mask.count(True), without a Python frame


def walk_as_prime_rl(episodes: list[vf.Episode]) -> list[vf.Trace]:
    """What prime-rl's ``process_group`` reads of a group before it calls the algorithm: each
    trace's error flag (counted for its log line) and, for its survivors
    (``iter_trainable_traces``), trainability and whether any node holds a sampled token."""
    traces = [trace for episode in episodes for trace in episode.traces]
    sum(not trace.ok for trace in traces)
    return [t for t in traces if t.ok and t.agent.trainable and any(any(node.mask) for node in t.nodes)]


class Replayed(Estimator):
    """``inner``'s estimate of each group, recorded on a first pass over the groups and handed
    back in the same order on every later pass: an estimator that costs nothing."""

    def __init__(self, inner: Estimator, groups: list[list[vf.Episode]]) -> None:
        super().__init__()
        self.name, self.inner, self.recorded, self.k = inner.name, inner, [], 0
        self.estimate = self._record  # type: ignore[method-assign]
        for group in groups:
            score_group(group, self)
        self.estimate = self._replay  # type: ignore[method-assign]

    def batched(self, batch):
        return self.estimate(batch).advantages

    def _record(self, batch) -> Estimate:
        self.recorded.append(self.inner.estimate(batch))
        return self.recorded[-1]

    def _replay(self, batch) -> Estimate:
        estimate = self.recorded[self.k]
        self.k = (self.k + 1) % len(self.recorded)
        return estimate


CLOCKS = {"wall": time.perf_counter, "CPU": time.process_time}


BROADCAST = "reward-minus-mean broadcast"


Score = Callable[[list[vf.Episode]], object]  # one path: scores one group


def one_pass(score: Score, groups: list[list[vf.Episode]], walked: bool) -> dict[str, float]:
    """Seconds per clock of ``score`` over every group; with ``walked``, each group walked first
    (``walk_as_prime_rl``, untimed) and the clocks read around each group's call."""
    spent = dict.fromkeys(CLOCKS, 0.0)
    if not walked:
        start = {clock: now() for clock, now in CLOCKS.items()}
        for group in groups:
            score(group)
        return {clock: now() - start[clock] for clock, now in CLOCKS.items()}
    for group in groups:
        walk_as_prime_rl(group)
        start = {clock: now() for clock, now in CLOCKS.items()}
        score(group)
        for clock, now in CLOCKS.items():
            spent[clock] += now() - start[clock]
    return spent


def paired_medians(
    paths: dict, groups: list[list[vf.Episode]], repeats: int, walked: bool = False
) -> dict[str, tuple[dict[str, float], dict[str, float], dict[str, float]]]:
    """Per clock of ``CLOCKS``: the median seconds per path (``paths`` score one group), the
    paths taking turns within each repeat so that a load change on the machine hits them alike;
    for every other path, the median of the per-repeat ratios of the first path to it; and for
    every path, the median of its per-repeat ratios to the ``BROADCAST`` path."""
    for score in paths.values():
        one_pass(score, groups, walked)  # warm up
    times: dict[str, dict[str, list[float]]] = {clock: {name: [] for name in paths} for clock in CLOCKS}
    gc.collect()
    gc.disable()  # as timeit does: millions of live token objects make collections dominate
    try:
        for _ in range(repeats):
            for name, score in paths.items():
                for clock, seconds in one_pass(score, groups, walked).items():
                    times[clock][name].append(seconds)
    finally:
        gc.enable()
    first, *others = paths
    return {
        clock: (
            {name: statistics.median(t) for name, t in by_path.items()},
            {name: statistics.median(a / b for a, b in zip(by_path[first], by_path[name])) for name in others},
            {name: statistics.median(a / b for a, b in zip(t, by_path[BROADCAST])) for name, t in by_path.items()},
        )
        for clock, by_path in times.items()
    }


ADDED = (
    "credit.score_group, default estimator (absorbing, gamma 1)",
    "credit.score_group, free estimator (estimates replayed)",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=1024)
    parser.add_argument("--group-size", type=int, default=16)
    parser.add_argument("--max-turns", type=int, default=8)
    parser.add_argument("--tokens", type=int, nargs=2, default=(32, 256), metavar=("MIN", "MAX"))
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--walked", action="store_true", help="walk each group as prime-rl does first (untimed)")
    args = parser.parse_args()

    start = time.perf_counter()
    groups = build_groups(args.groups, args.group_size, args.max_turns, tuple(args.tokens), seed=0)
    turns = sum(len(e.traces[0].info["turn_rewards"]) for g in groups for e in g)
    tokens = sum(sum(n.mask) for g in groups for e in g for n in e.traces[0].nodes)
    print(
        f"{args.groups} groups x {args.group_size} episodes, {turns} turns, {tokens} sampled tokens "
        f"({args.tokens[0]}-{args.tokens[1]} per turn; built in {time.perf_counter() - start:.1f} s)"
    )

    default = get_estimator("stepwise")
    replayed = Replayed(get_estimator("stepwise", gamma=0.4), groups)
    paths: dict[str, Score] = {}
    prime_rl_paths: dict[str, Score] = {}
    if importlib.util.find_spec("prime_rl") is not None:
        from prime_rl.configs.algorithm import GRPOAlgoConfig
        from prime_rl.orchestrator.algo import GRPOAlgorithm

        from verifiers_stepwise.hosts.prime_rl import StepwiseAlgoConfig, StepwiseAlgorithm

        algorithm = StepwiseAlgorithm(
            StepwiseAlgoConfig(estimator="stepwise", options={"gamma": 0.4}), policy_pool=None
        )
        grpo = GRPOAlgorithm(GRPOAlgoConfig(), policy_pool=None)
        paths["stepwise: StepwiseAlgorithm.score_group"] = lambda group: _drive(algorithm.score_group(group))
        prime_rl_paths["prime-rl GRPOAlgorithm.score_group"] = lambda group: _drive(grpo.score_group(group))
    else:
        estimator = get_estimator("stepwise", gamma=0.4)
        paths["stepwise: score_group + write_credit (StepwiseAlgorithm's calls)"] = lambda g: score_and_write(
            g, estimator
        )
    paths[BROADCAST] = reward_minus_mean
    paths["reward-minus-mean broadcast, list.count"] = lambda group: reward_minus_mean(group, count_true)
    paths.update(prime_rl_paths)
    paths[ADDED[0]] = lambda group: score_and_write(group, default)
    paths[ADDED[1]] = lambda group: score_and_write(group, replayed)

    first = next(iter(paths))
    if args.walked:
        print("each group walked as prime-rl's process_group walks it before each call (untimed)")
    for clock, (medians, ratios, to_broadcast) in paired_medians(paths, groups, args.repeats, args.walked).items():
        print(f"-- {clock} time")
        for name, seconds in medians.items():
            print(f"{name:<60} {seconds:8.3f} s")
        for name, ratio in ratios.items():
            target = " (goal <= 1.25x)" if name in prime_rl_paths else ""
            print(f"ratio stepwise / {name}: {ratio:.2f}x{target}")
        for name, ratio in to_broadcast.items():
            if name not in (first, BROADCAST) and name in ADDED:
                print(f"ratio {name} / {BROADCAST}: {ratio:.2f}x")


def _drive(coroutine) -> None:
    """Run a coroutine that never awaits anything (score_group does no I/O) without an event loop."""
    try:
        coroutine.send(None)
    except StopIteration:
        return
    raise RuntimeError("score_group awaited something; run it in an event loop")


if __name__ == "__main__":
    main()
