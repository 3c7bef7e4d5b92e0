"""torchtitan 0.3.0 trains on any verifiers environment, each turn credited on its own tokens.

    Rollouter.Config  →  VerifiersRollouter.Config(taskset="stepwise-dapo-math",
                                                   env_args={"max_turns": 4})

The design of torchtitan main's own Verifiers integration (PR #4356), rebuilt for 0.3.0 with
per-turn rewards carried through (docs/torchtitan.md, "How a group runs").

Checked against torchtitan 0.3.0 (``Rollouter``, ``RolloutTurn``, ``Rubric``) and verifiers
0.4.0 (``EnvServer``, ``EnvClient``, ``TrainClientConfig``, ``Trace.branches``).
"""

from __future__ import annotations

import asyncio
import atexit
import itertools
import logging
import random
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Annotated, Any

from verifiers_stepwise.envs.harness import refuse_a_uv_harness_without_uv
from verifiers_stepwise.errors import ConfigError, RewardError
from verifiers_stepwise.hosts.token_endpoint import SESSION_HEADER, GenerateRequest, Generation, generate_routes
from verifiers_stepwise.hosts.torchtitan import Scalar, StepwiseAdvantage, env_config, requires_torchtitan
from verifiers_stepwise.hosts.torchtitan.release import LAYOUT  # on main's layout: the error naming .main
from verifiers_stepwise.hosts.torchtitan.turns import lay_out_credit, sampled_spans
from verifiers_stepwise.loopback import serve
from verifiers_stepwise.traces.credit import score_group

with requires_torchtitan(f"verifiers_stepwise.hosts.torchtitan.verifiers (torchtitan 0.3.0, {LAYOUT})", "tyro"):
    import tyro
    from torchtitan.config import Configurable
    from torchtitan.experiments.rl.environment import MessageEnv, TokenEnv
    from torchtitan.experiments.rl.rollout.rollouter import Rollouter
    from torchtitan.experiments.rl.rollout.types import GenerateFn, Rollout, RolloutGroup, RolloutStatus, RolloutTurn
    from torchtitan.experiments.rl.rubrics import RewardFn, Rubric
    from torchtitan.experiments.rl.types import RolloutTurnID

if TYPE_CHECKING:
    import verifiers.v1 as vf
    from renderers import Renderer
    from torchtitan.experiments.rl.actors.generator import SamplingConfig
    from torchtitan.experiments.rl.types import Completion

__all__ = [
    "ROUTE_HEADER",
    "VERIFIERS_REWARD",
    "VerifiersReward",
    "VerifiersRollouter",
    "VerifiersTasks",
    "trace_to_turns",
]

logger = logging.getLogger(__name__)

VERIFIERS_REWARD = "verifiers_reward"
"""``env_rewards`` key of the trace reward, on a rollout's last turn."""
ROUTE_HEADER = "X-Stepwise-Route"
"""Header naming which group's ``GenerateFn`` (train or validation) a request belongs to."""


class VerifiersTasks(Configurable):
    """The env's tasks as torchtitan samples (``task.data`` as JSON), endlessly, reshuffled
    each pass when ``shuffle``. Built by ``VerifiersRollouter`` with the env's config."""

    @dataclass(kw_only=True, slots=True)
    class Config(Configurable.Config):
        seed: int = 42
        shuffle: bool = True
        taskset_args: dict[str, Scalar] = field(default_factory=dict)
        """Overrides of the taskset's fields for this dataset (e.g. a validation split)."""

    def __init__(self, config: Config, *, env: dict[str, Any]) -> None:
        import verifiers.v1 as vf
        from verifiers.v1.utils.loaders import load_taskset

        block = {**env, "taskset": {**env["taskset"], **config.taskset_args}}
        taskset = load_taskset(vf.resolve_env_config(block).taskset)
        self._tasks = [task.data.model_dump(mode="json") for task in taskset]
        if not self._tasks:
            raise ValueError(f"taskset {block['taskset']} has no tasks")
        self._order = _passes(self._tasks, random.Random(config.seed) if config.shuffle else None)

    def __next__(self) -> dict[str, Any]:
        return next(self._order)


def _passes(tasks: list[dict[str, Any]], shuffler: random.Random | None) -> Iterator[dict[str, Any]]:
    while True:
        order = list(tasks)
        if shuffler is not None:
            shuffler.shuffle(order)
        yield from order


class VerifiersReward(RewardFn):
    """The reward verifiers computed for the trace (``env_rewards["verifiers_reward"]``)."""

    @dataclass(kw_only=True, slots=True)
    class Config(RewardFn.Config):
        pass

    async def __call__(self, rollout: Rollout, env_input: object) -> float:
        if rollout.turns and VERIFIERS_REWARD in rollout.turns[-1].env_rewards:  # trace_to_turns puts it there
            return rollout.turns[-1].env_rewards[VERIFIERS_REWARD]
        raise RewardError(
            f"torchtitan rollout {rollout.group_id}/rollout={rollout.rollout_id} ({rollout.status}) carries no "
            f"{VERIFIERS_REWARD!r}; set the rubric's error_reward to score failed episodes"
        )


class VerifiersRollouter(Rollouter):
    """``Controller.Config.rollouter``: episodes run by verifiers, trained by torchtitan.

    Replaces torchtitan's ``MessageEnv``/``TokenEnv`` path (its ``message_env``/``token_env``
    are unused and hidden from the CLI); turn caps are the verifiers env's own
    (``--rollouter.env_args max_turns 6``).
    """

    @dataclass(kw_only=True, slots=True)
    class Config(Rollouter.Config):
        taskset: str = "stepwise-dapo-math"
        """The verifiers env id (its taskset id): any installed env, this package's or yours."""
        env_args: dict[str, Scalar] = field(default_factory=dict)
        """Fields of the env's ``[env]`` config (``max_turns``; dotted keys nest)."""
        train_dataset: VerifiersTasks.Config = field(default_factory=VerifiersTasks.Config)
        validation_dataset: VerifiersTasks.Config = field(default_factory=lambda: VerifiersTasks.Config(shuffle=False))
        rubric: Rubric.Config = field(
            default_factory=lambda: Rubric.Config(reward_fns=[VerifiersReward.Config()], error_reward=0.0)
        )
        """Failed episodes (verifiers errors) score ``error_reward``; the rest their trace reward."""
        advantage: StepwiseAdvantage.Config = field(default_factory=StepwiseAdvantage.Config)
        message_env: Annotated[MessageEnv.Config | None, tyro.conf.Suppress] = None
        token_env: Annotated[TokenEnv.Config | None, tyro.conf.Suppress] = None
        model_name: str = "policy"
        """The model name verifiers records on traces."""
        renderer_model_name: str | None = None
        """Tokenizer the train client renders with; default: the one torchtitan's renderer uses."""
        env_workers: int = 1
        """Env-server worker processes (verifiers' ``serve_env`` ``max_workers``)."""
        env_in_process: bool = False
        """Serve the env in this process's event loop instead of a subprocess."""
        startup_timeout_s: float = 120.0

        def __post_init__(self) -> None:
            import verifiers.v1 as vf

            if self.env_workers < 1:
                raise ConfigError(f"env_workers must be >= 1, got {self.env_workers}")
            environment = vf.resolve_env_config(env_config(self.taskset, self.env_args))  # a bad env fails here
            refuse_a_uv_harness_without_uv(environment, f"rollouter env {self.taskset!r}")

    def __init__(self, config: Config) -> None:
        # Rollouter.__init__ would build datasets without the env they read and a MessageEnv.
        env = env_config(config.taskset, config.env_args)
        self.config = config
        self._env = env
        self._train_dataset = config.train_dataset.build(env=env)
        self._validation_dataset = config.validation_dataset.build(env=env)
        self.rubric: Rubric = config.rubric.build()
        self.advantage_estimator = config.advantage.build()
        self._routes: dict[str, tuple[GenerateFn, SamplingConfig]] = {}  # by ROUTE_HEADER value
        self._completions: dict[str, list[Completion]] = {}  # by session (trace) id, until its rollout is made
        self._calls = itertools.count()
        self._start_lock = asyncio.Lock()
        self._started: tuple[Any, vf.TrainClientConfig] | None = None
        self._endpoint: Any = None  # the token endpoint's aiohttp runner
        self._server: Any = None  # the env server's asyncio task or process
        self._lifeline: Any = None  # this process's end of the spawned server's death pipe

    # -- lifecycle: started by the first group, in the controller's event loop -------------------

    async def _start(self, renderer: Renderer) -> tuple[Any, vf.TrainClientConfig]:
        async with self._start_lock:
            if self._started is not None:
                return self._started
            import verifiers.v1 as vf
            from verifiers.v1.serve import EnvClient

            model = self.config.renderer_model_name or getattr(
                getattr(renderer, "_tokenizer", None), "name_or_path", None
            )
            if not model or getattr(renderer, "config", None) is None:
                raise ValueError(
                    f"{type(renderer).__name__} exposes no renderers config or tokenizer path; "
                    "set VerifiersRollouter.Config.renderer_model_name"
                )
            client = None
            try:
                self._endpoint, port = await serve(generate_routes(self._generate, failure_status=503))
                client = EnvClient(await self._start_env_server(vf.resolve_env_config(self._env)))
                await client.wait_for_server_startup(timeout=self.config.startup_timeout_s, interval=0.2)
            except BaseException:
                if client is not None:
                    await client.close()
                await self.close()
                raise
            train_client = vf.TrainClientConfig(
                base_url=f"http://127.0.0.1:{port}/v1",
                api_key_var="",
                renderer=renderer.config,
                renderer_model_name=model,
            )
            self._started = (client, train_client)
            return self._started

    async def _start_env_server(self, config: vf.EnvConfig) -> str:
        if self.config.env_in_process:
            from verifiers.v1.serve import EnvServer

            server = EnvServer(config, address="tcp://127.0.0.1:0")
            self._server = asyncio.get_running_loop().create_task(server.run())
            return server.address
        import multiprocessing

        from verifiers.v1.serve.pool import env_config_data, serve_env

        context = multiprocessing.get_context("spawn")
        addresses = context.Queue()
        # The server stops itself when this process dies (its end of the pipe closes), and is
        # stopped at a normal exit: torchtitan 0.3.0 never closes a rollouter, and
        # multiprocessing would otherwise wait for the server at exit, forever.
        death_pipe, self._lifeline = context.Pipe(duplex=False)
        self._server = context.Process(
            target=serve_env,
            kwargs=dict(
                max_workers=self.config.env_workers,
                address="tcp://127.0.0.1:0",
                address_queue=addresses,
                death_pipe=death_pipe,
                config_data=env_config_data(config),
            ),
            name="verifiers-env-server",
        )
        self._server.start()
        atexit.register(self._server.terminate)
        return await asyncio.to_thread(_address, self._server, addresses, self.config.startup_timeout_s)

    async def close(self) -> None:
        """Stop the env client, env server and endpoint (torchtitan 0.3.0 never calls this;
        a spawned server also stops when this process exits)."""
        started, self._started = self._started, None
        if started is not None:
            await started[0].close()
        server, self._server = self._server, None
        if isinstance(server, asyncio.Task):
            server.cancel()
            await asyncio.gather(server, return_exceptions=True)
        elif server is not None:
            atexit.unregister(server.terminate)
            server.terminate()
            await asyncio.to_thread(server.join, 10)
            self._lifeline.close()
        endpoint, self._endpoint = self._endpoint, None
        if endpoint is not None:
            await endpoint.cleanup()

    # -- one group ----------------------------------------------------------------------------

    async def run_group_rollouts(
        self,
        *,
        generate_fn: GenerateFn,
        sample: object,
        group_id: int,
        group_size: int,
        sampling: SamplingConfig,
        renderer: Renderer,
    ) -> RolloutGroup:
        """Run ``group_size`` verifiers episodes of ``sample``, score them and estimate advantages."""
        if not isinstance(sample, dict):
            raise TypeError(f"VerifiersRollouter samples are task data dicts (VerifiersTasks), got {type(sample)}")
        client, train_client = await self._start(renderer)
        route = f"route-{id(generate_fn)}"  # train or validation; held here, so no other object takes its id
        self._routes[route] = (generate_fn, sampling)
        train_client = train_client.model_copy(update={"headers": {ROUTE_HEADER: route}})
        played = await asyncio.gather(
            *(
                self._rollout(
                    client,
                    train_client,
                    sample,
                    sampling if sampling.seed is None else replace(sampling, seed=sampling.seed + j),
                    group_id,
                    j,
                )
                for j in range(group_size)
            )
        )
        rollouts = [rollout for rollout, *_ in played]
        outputs = await self.score_group(rollouts, sample)
        for rollout, output in zip(rollouts, outputs, strict=True):
            rollout.reward = output.reward
            rollout.reward_breakdown = output.reward_breakdown
        records = score_group([episode for _, episode, *_ in played if episode], self.advantage_estimator.estimator)
        for rollout, _, trace_id, nodes in played:
            where = f"torchtitan rollout {group_id}/rollout={rollout.rollout_id}"
            rollout.advantage = lay_out_credit(records.get(trace_id), rollout.turns, nodes, where)
        return RolloutGroup(group_id=group_id, rollouts=rollouts)

    async def _rollout(
        self, client: Any, train_client: Any, sample: dict, sampling: SamplingConfig, group_id: int, j: int
    ) -> tuple[Rollout, vf.Episode | None, str, list[int]]:
        """One episode as a torchtitan rollout, with the episode (None when it failed in
        transport), its trainable trace's id and the sampled node each turn came from."""
        import verifiers.v1 as vf

        try:
            episode = await self.episode(
                client,
                client=train_client,
                model=self.config.model_name,
                sampling=vf.SamplingConfig(
                    temperature=sampling.temperature,
                    top_p=sampling.top_p,
                    max_tokens=sampling.max_tokens,
                    seed=sampling.seed,
                ),
                task_data=sample,
            )
        except Exception:  # the env server or the transport failed: an errored rollout, the run goes on
            logger.exception("verifiers episode %s/rollout=%d failed", group_id, j)
            return Rollout(group_id=group_id, rollout_id=j, status=RolloutStatus.ERROR), None, "", []
        traces = [trace for trace in episode.traces if trace.agent.trainable]
        if len(traces) != 1:
            raise ValueError(f"VerifiersRollouter trains one agent per episode; {len(traces)} traces are trainable")
        (trace,) = traces
        done = {t.id: self._completions.pop(t.id, []) for t in episode.traces}[trace.id]  # none kept past here
        versions = (
            min((c.min_policy_version for c in done), default=None),
            max((c.max_policy_version for c in done), default=None),
        )
        turns = trace_to_turns(trace, group_id=group_id, rollout_id=j, versions=versions)
        if turns:
            turns[0].metrics.extend(metric for c in done for metric in c.metrics)
        rollout = Rollout(group_id=group_id, rollout_id=j, turns=turns, status=_status(episode.ok, trace, turns))
        return rollout, episode, trace.id, [span.node for span in sampled_spans(trace)]

    async def episode(self, env: Any, **run: Any) -> vf.Episode:
        """One verifiers episode through the env server (a seam for logging or inspection)."""
        return await env.run(**run)

    # -- generation: the train client's requests, answered by torchtitan's generator ----------

    async def _generate(self, request: GenerateRequest) -> Generation | None:
        route = request.headers.get(ROUTE_HEADER)
        if route not in self._routes:
            raise LookupError(f"no generator for route {route!r}")
        generate_fn, sampling = self._routes[route]
        sent = ("temperature", "top_p", "max_tokens", "seed")  # the rest keep the group's sampling
        sampling = replace(sampling, **{name: getattr(request, name) for name in sent if name in request.sampling})
        session = request.headers.get(SESSION_HEADER, "no-session")
        completion = await generate_fn(
            request.prompt_ids,
            request_id=f"{session}/call={next(self._calls)}",
            routing_session_id=session,  # a trace's calls share one generator's prefix cache
            sampling_config=sampling,
        )
        if completion is None:
            return None
        self._completions.setdefault(session, []).append(completion)
        return Generation(
            list(completion.token_ids), list(completion.token_logprobs), completion.finish_reason or "stop"
        )


def _address(process: Any, addresses: Any, timeout: float) -> str:
    """The address a spawned env server reports, or an error as soon as it dies."""
    import queue
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return addresses.get(timeout=0.5)
        except queue.Empty:
            if not process.is_alive():
                raise RuntimeError(
                    f"the verifiers env server exited (code {process.exitcode}) before serving"
                ) from None
    raise TimeoutError(f"the verifiers env server reported no address in {timeout}s")


def trace_to_turns(
    trace: vf.Trace,
    *,
    group_id: int,
    rollout_id: int,
    versions: tuple[int | None, int | None] = (None, None),
) -> list[RolloutTurn]:
    """One trace's torchtitan turns, a ``RolloutTurn`` per ``sampled_spans`` span, the trace
    reward on the last one (``env_rewards["verifiers_reward"]``). Credit them as
    ``VerifiersRollouter`` does: ``score_group`` on the group, then ``turns.lay_out_credit``."""
    turns: list[RolloutTurn] = []
    for span in sampled_spans(trace):
        tokens, logprobs = span.branch.token_ids, span.branch.logprobs
        turns.append(
            RolloutTurn(
                rollout_id=RolloutTurnID(group_id=group_id, rollout_id=rollout_id, turn_id=len(turns)),
                prompt_token_ids=tokens[: span.start],
                completion_token_ids=tokens[span.start : span.stop],
                completion_logprobs=logprobs[span.start : span.stop],
                min_policy_version=versions[0],
                max_policy_version=versions[1],
                completion_message=trace.nodes[span.node].message.model_dump(mode="json", exclude_none=True),
            )
        )
    if turns:
        turns[-1].env_rewards[VERIFIERS_REWARD] = trace.reward
    return turns


def _status(ok: bool, trace: vf.Trace, turns: list[RolloutTurn]) -> RolloutStatus:
    if not (ok and trace.ok and turns):
        return RolloutStatus.ERROR
    if not trace.is_truncated:
        return RolloutStatus.COMPLETED
    return RolloutStatus.TRUNCATED_MAX_TURNS if trace.stop_condition == "max_turns" else RolloutStatus.TRUNCATED_LENGTH
