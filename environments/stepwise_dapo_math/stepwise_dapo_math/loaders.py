"""Where problems come from: the Hugging Face hub, a local file, or the bundled offline set.

Every source is read into the same :class:`Problem` rows, then selected the same way:

    rows (file / hub order) → split filter → de-duplication by id → seeded shuffle → limit

A row is read in the DAPO-Math-17k schema (``prompt`` = chat messages holding the DAPO user
message, ``reward_model.ground_truth``, ``extra_info.index``) or a plain one (``problem`` or
``question`` wrapped in the DAPO template, ``answer``); ``problem_key``/``answer_key`` name other
columns. Bad rows raise :class:`DatasetError` naming the source, the row and the field.
"""

from __future__ import annotations

import json
import random
import warnings
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepwise_dapo_math.prompts import dapo_prompt, problem_of
from verifiers_stepwise.envs.tasksets import warn_fewer

if TYPE_CHECKING:
    from stepwise_dapo_math.config import DapoMathTasksetConfig

__all__ = [
    "BUNDLED",
    "BUNDLED_PATH",
    "PRESETS",
    "HUB_PROBE_TIMEOUT_S",
    "DatasetError",
    "HubPreset",
    "Problem",
    "hub_reachable",
    "load_problems",
    "read_file",
    "select",
    "to_problem",
]


BUNDLED = "bundled"
BUNDLED_PATH = Path(__file__).parent / "data" / "offline.jsonl"

_ANSWER_KEYS = ("reward_model.ground_truth", "answer", "ground_truth", "final_answer")
_PROBLEM_KEYS = ("problem", "question")
_ID_KEYS = ("extra_info.index", "id", "unique_id")
_SPLIT_KEYS = ("split", "extra_info.split")


@dataclass(frozen=True)
class HubPreset:
    repo: str
    split: str


PRESETS: dict[str, HubPreset] = {
    "dapo-math-17k": HubPreset("BytedTsinghua-SIA/DAPO-Math-17k", "train"),
    "aime-2024": HubPreset("HuggingFaceH4/aime_2024", "train"),
    "aime-2025": HubPreset("math-ai/aime25", "test"),
    "aime-2022-2024": HubPreset("AI-MO/aimo-validation-aime", "train"),
}


class DatasetError(ValueError):
    """A source or row that cannot be turned into a problem."""


@dataclass(frozen=True)
class Problem:
    id: str
    prompt: str
    """The full user message (the DAPO template around the problem)."""
    answer: str
    """The ground truth as the source gives it."""
    problem: str | None
    """The bare problem statement, when known."""
    source: str
    split: str | None = None
    system_prompt: str | None = None


def load_problems(config: DapoMathTasksetConfig) -> list[Problem]:
    """The selected problems of ``config`` (see the module docstring)."""
    if config.path is not None:
        rows: Iterable[Mapping[str, Any]] = read_file(config.path)
        origin, file_split = str(config.path), config.split
    elif config.dataset == BUNDLED:
        rows, origin, file_split = read_file(BUNDLED_PATH), BUNDLED, config.split
    else:
        preset = PRESETS.get(config.dataset, HubPreset(config.dataset, "train"))
        repo = preset.repo
        try:
            rows = hub_rows(repo, config.subset, config.split or preset.split)
            origin, file_split = f"hf:{repo}", None
        except ConnectionError as error:
            rows, origin, file_split = _offline(config, repo, error), BUNDLED, config.split or preset.split
    problems = (
        to_problem(row, number, origin, config.problem_key, config.answer_key) for number, row in enumerate(rows)
    )
    selected = select(
        problems,
        split=file_split,
        dedupe=config.dedupe,
        shuffle=config.shuffle,
        seed=config.seed,
        limit=config.limit,
    )
    if config.limit is not None and len(selected) < config.limit:
        warn_fewer(
            "--env.taskset.limit", config.limit, len(selected), origin, "after the split filter and de-duplication"
        )
    return selected


def _offline(config: DapoMathTasksetConfig, repo: str, error: ConnectionError) -> Iterator[Mapping[str, Any]]:
    """The bundled set in place of an unreachable hub dataset, only for the default dataset and
    with a warning on stderr (a logger may have no handler); a dataset the user named is never
    replaced: that is an error saying how to run on the bundled set."""
    if "dataset" in config.model_fields_set or not config.offline_fallback:
        raise DatasetError(
            f"cannot load the dataset {config.dataset!r} ({repo}) from the Hugging Face hub: {error}. "
            f"To run offline on the bundled problems instead, pass --env.taskset.dataset {BUNDLED}"
        ) from error
    warnings.warn(
        f"cannot reach {repo} on the Hugging Face hub ({error}); running on the bundled offline set "
        f"({BUNDLED_PATH.name}) instead. Pass --env.taskset.dataset {BUNDLED} to choose it, or "
        "--env.taskset.offline-fallback false to fail instead",
        stacklevel=3,
    )
    return read_file(BUNDLED_PATH)


def select(
    problems: Iterable[Problem],
    *,
    split: str | None = None,
    dedupe: bool = True,
    shuffle: bool = False,
    seed: int = 0,
    limit: int | None = None,
) -> list[Problem]:
    """Split filter → de-duplication → seeded shuffle → limit. Without ``dedupe`` a repeated
    id gets an occurrence suffix (``id#2``), so ids stay unique task keys."""
    kept: list[Problem] = []
    seen: dict[str, int] = {}
    for problem in problems:
        if split is not None and problem.split != split:
            continue
        count = seen.get(problem.id, 0)
        seen[problem.id] = count + 1
        if count:
            if dedupe:
                continue
            problem = replace(problem, id=f"{problem.id}#{count + 1}")
        kept.append(problem)
    if shuffle:
        random.Random(seed).shuffle(kept)
    return kept if limit is None else kept[:limit]


def read_file(path: Path) -> Iterator[Mapping[str, Any]]:
    """Rows of a ``.jsonl``, ``.json`` (a list of rows) or ``.parquet`` file."""
    if not path.is_file():
        raise DatasetError(f"dataset file {str(path)!r} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        yield from pq.read_table(path).to_pylist()
    elif suffix == ".jsonl":
        with path.open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as error:
                    raise DatasetError(f"{path}:{number}: not valid JSON ({error})") from error
                if not isinstance(row, dict):
                    raise DatasetError(f"{path}:{number}: a row must be a JSON object")
                yield row
    elif suffix == ".json":
        try:
            rows = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise DatasetError(f"{path}: not valid JSON ({error})") from error
        if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
            raise DatasetError(f"{path}: a .json dataset must be a list of objects")
        yield from rows
    else:
        raise DatasetError(f"dataset file {str(path)!r}: unsupported format {suffix!r} (use .jsonl, .json or .parquet)")


def hub_rows(repo: str, subset: str | None, split: str) -> Iterator[dict[str, Any]]:
    """Rows of a Hugging Face dataset split, read lazily in batches. Raises ``ConnectionError``
    right away when the hub cannot be reached and the dataset is not cached: a hub that does
    not answer one probe (:func:`hub_reachable`) is read in offline mode, from the cache only
    (without it, ``huggingface_hub`` retries an unreachable hub for 23 s before giving up)."""
    import datasets
    from huggingface_hub import constants

    if hub_reachable():
        dataset = datasets.load_dataset(repo, subset, split=split)
    else:
        why = (
            "offline mode (HF_HUB_OFFLINE)"
            if constants.HF_HUB_OFFLINE
            else f"{constants.ENDPOINT} did not answer within {HUB_PROBE_TIMEOUT_S:g} s"
        )
        try:
            with _offline_mode():
                dataset = datasets.load_dataset(repo, subset, split=split)
        except ConnectionError as error:
            raise ConnectionError(f"{why}, and it is not in the local cache") from error

    def rows() -> Iterator[dict[str, Any]]:
        for batch in dataset.iter(batch_size=4096):
            columns = list(batch)
            for values in zip(*(batch[column] for column in columns)):
                yield dict(zip(columns, values))

    return rows()


HUB_PROBE_TIMEOUT_S = 3.0


def hub_reachable(timeout: float = HUB_PROBE_TIMEOUT_S) -> bool:
    """Whether the Hugging Face hub (``HF_ENDPOINT``) answers one HEAD request within ``timeout``
    seconds, whatever the status; False at once in offline mode (``HF_HUB_OFFLINE=1``).

    The probe is the standard library's (proxies from the environment, as every HTTP client
    reads them), not ``huggingface_hub``'s session, whose HTTP client and its exception types
    changed between its major versions (httpx in 1.x, httpx2 in 2.x)."""
    import urllib.error
    import urllib.request

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    try:
        urllib.request.urlopen(urllib.request.Request(constants.ENDPOINT, method="HEAD"), timeout=timeout).close()
    except urllib.error.HTTPError:
        return True  # it answered, with an error status
    except OSError:  # URLError, refused, reset, timed out
        return False
    return True


@contextmanager
def _offline_mode() -> Iterator[None]:
    """``huggingface_hub`` and ``datasets`` in the offline mode ``HF_HUB_OFFLINE=1`` turns on,
    for this block (both read the variable once, at import, into these two flags)."""
    import datasets.config
    from huggingface_hub import constants

    saved = constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = datasets.config.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE = saved


def to_problem(
    row: Mapping[str, Any],
    number: int,
    origin: str,
    problem_key: str | None = None,
    answer_key: str | None = None,
) -> Problem:
    """One row as a :class:`Problem` (``number`` is the row's position, for messages)."""
    where = f"{origin} row {number}"
    answer = _field(row, (answer_key,) if answer_key else _ANSWER_KEYS, where, "answer")
    if answer is None or not str(answer).strip():
        raise DatasetError(f"{where}: empty ground truth")
    system_prompt = None
    if problem_key is None and row.get("prompt") is not None:
        prompt, system_prompt = _prompt_text(row["prompt"], where)
        problem = problem_of(prompt)
    else:
        keys = (problem_key,) if problem_key else _PROBLEM_KEYS
        problem = _field(row, keys, where, "problem")
        if not isinstance(problem, str) or not problem.strip():
            raise DatasetError(f"{where}: the problem must be non-empty text")
        prompt = dapo_prompt(problem)
    ident = _optional(row, _ID_KEYS)
    split = _optional(row, _SPLIT_KEYS)
    return Problem(
        id=str(ident) if ident is not None else f"{origin}#{number}",
        prompt=prompt,
        answer=_answer_text(answer),
        problem=problem,
        source=str(row.get("data_source") or origin),
        split=None if split is None else str(split),
        system_prompt=system_prompt,
    )


def _prompt_text(prompt: Any, where: str) -> tuple[str, str | None]:
    """(user message, system message) of a ``prompt`` cell: text or chat messages."""
    if isinstance(prompt, str):
        return prompt, None
    if isinstance(prompt, list) and all(isinstance(m, Mapping) for m in prompt):
        users = [m.get("content") for m in prompt if m.get("role") == "user"]
        systems = [m.get("content") for m in prompt if m.get("role") == "system"]
        if len(users) == 1 and isinstance(users[0], str):
            return users[0], systems[0] if systems else None
    raise DatasetError(f"{where}: 'prompt' must be text or chat messages with exactly one user message")


def _answer_text(answer: Any) -> str:
    if isinstance(answer, float) and answer.is_integer():
        return str(int(answer))
    return str(answer).strip()


def _lookup(row: Mapping[str, Any], key: str) -> tuple[bool, Any]:
    value: Any = row
    for part in key.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return False, None
        value = value[part]
    return True, value


def _field(row: Mapping[str, Any], keys: Iterable[str], where: str, what: str) -> Any:
    for key in keys:
        found, value = _lookup(row, key)
        if found:
            return value
    raise DatasetError(
        f"{where}: no {what} column (looked for {', '.join(keys)}; the row has "
        f"{', '.join(sorted(row)) or 'no columns'}); name it with {what}_key"
    )


def _optional(row: Mapping[str, Any], keys: Iterable[str]) -> Any:
    for key in keys:
        found, value = _lookup(row, key)
        if found and value is not None:
            return value
    return None
