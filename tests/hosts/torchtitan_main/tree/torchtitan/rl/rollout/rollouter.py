"""Stand-in: the two names torchtitan main's Verifiers rollouter takes from main's
``torchtitan.rl.rollout.rollouter``. torchtitan 0.3.0's ``Rollouter`` is another contract (its
``__init__`` builds datasets and a ``MessageEnv``, its groups take a renderer), so this is only
what the stored rollouter uses: a ``Configurable`` whose config has the three worker fields the
stored rollouter redeclares, and a ``RolloutWorker`` config type for one of them."""

from dataclasses import dataclass

from torchtitan.config import Configurable


class RolloutWorker(Configurable):
    @dataclass(kw_only=True, slots=True)
    class Config(Configurable.Config):
        pass


class Rollouter(Configurable):
    @dataclass(kw_only=True, slots=True)
    class Config(Configurable.Config):
        worker: RolloutWorker.Config | None = None
        worker_pool_size: int = 1
        num_threads_per_worker: int = 1

        def __post_init__(self) -> None:
            pass

    def __init__(self, config: Config) -> None:
        self.config = config
