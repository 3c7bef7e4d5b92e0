"""Stand-in: torchtitan main's ``RLDataLoader`` config, as the stored rollouter reads it
(``train_data.source.verifiers_taskset``). Main's loader needs grain and torchtitan main's
``RandomAccessDataSource``, neither here; this one only builds its source and serves it in order."""

from dataclasses import dataclass

from torchtitan.config import Configurable


class RLDataLoader(Configurable):
    @dataclass(kw_only=True, slots=True)
    class Config(Configurable.Config):
        source: Configurable.Config
        seed: int = 42
        shuffle: bool = True

    def __init__(self, config: Config) -> None:
        self._source = config.source.build()

    def get(self, index: int) -> object:
        return self._source[index % len(self._source)]
