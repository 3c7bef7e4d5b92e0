"""SWE-bench instances: the fields a task carries, and where they come from.

Rows come from ``swebench``'s own loader (``swebench.harness.utils.load_swebench_dataset``: a
Hugging Face dataset id, or a local ``.json``/``.jsonl``/``.parquet`` file) or from the bundled
task repository (``fixtures``). ``swebench`` 5.x grades from columns the datasets carry
(``eval_script``, ``log_parser``, ``eval_type``, ``image``), so those are required; a row without
an image gets the official name swebench derives from its id. Bundled tasks have no image: they
run locally.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

if TYPE_CHECKING:
    from swebench.types import TestSpec

__all__ = ["BUNDLED", "DATASETS", "FIXTURES", "InstanceError", "SweInstance", "fixture_instances", "load_instances"]

DATASETS = {
    "verified": "SWE-bench/SWE-bench_Verified",
    "lite": "SWE-bench/SWE-bench_Lite",
    "full": "SWE-bench/SWE-bench",
}
"""Short names for the official Hugging Face datasets."""
BUNDLED = "fixtures"
"""Source name of the bundled offline tasks."""
FIXTURES = Path(__file__).parent / "fixtures"
"""The bundled tasks: a task repository in the layout ``swebench`` itself reads
(``swebench.task.repo``), ``tasks/<instance_id>/`` with ``task.yaml``, ``tests.json``,
``problem_statement.md``, ``gold.patch``, ``test.patch`` and ``eval.sh`` (and ``repo/``, see
``fixtures``)."""


class InstanceError(ValueError):
    """A row is not a usable SWE-bench instance."""


class SweInstance(BaseModel):
    """One SWE-bench task instance. ``patch`` and ``test_patch`` are never shown to the model."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    instance_id: str
    repo: str
    base_commit: str
    problem_statement: str
    version: str
    patch: str
    """The reference fix (hidden)."""
    test_patch: str
    """The tests that grade the task (hidden)."""
    FAIL_TO_PASS: list[str] = Field(min_length=1)
    PASS_TO_PASS: list[str]
    GOLD_XFAIL: list[str] = Field(default_factory=list)
    """Graded tests that the gold patch's run reports XFAIL (recorded from that run, in the
    task's ``tests.json`` or the row): only these pass as ``xfailed``, every other test only as
    ``passed``. Hub rows have no such record, so none of their tests pass as xfailed."""
    eval_script: str
    """Bash script that applies ``test_patch``, runs the tests between swebench's markers and
    restores the test files; run in the repository at /testbed."""
    log_parser: str
    """Name of the swebench log parser for the test output."""
    eval_type: str = "pass_and_fail"
    image: str | None = None
    """Container image with the repository at /testbed; None for bundled local tasks."""
    hints_text: str = ""
    created_at: str = ""
    environment_setup_commit: str = ""
    image_assets: dict[str, Any] = Field(default_factory=dict)

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", "GOLD_XFAIL", mode="before")
    @classmethod
    def _json_list(cls, value: Any) -> Any:
        # The Hugging Face datasets store these lists as JSON strings.
        return json.loads(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _gold_xfail_graded(self) -> SweInstance:
        stray = sorted(set(self.GOLD_XFAIL) - {*self.FAIL_TO_PASS, *self.PASS_TO_PASS})
        if stray:
            raise ValueError(f"GOLD_XFAIL names tests that are neither FAIL_TO_PASS nor PASS_TO_PASS: {stray}")
        return self

    @field_validator("image", mode="before")
    @classmethod
    def _no_empty_image(cls, value: Any) -> Any:
        return value or None

    @field_validator("image_assets", mode="before")
    @classmethod
    def _assets(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = json.loads(value) if value else {}
        if value:
            raise ValueError("binary test assets (SWE-bench Multimodal) are not supported by this environment")
        return value or {}

    @classmethod
    def from_row(cls, row: Mapping[str, Any], source: str) -> SweInstance:
        """Validate one dataset row; errors name the instance and where it came from."""
        try:
            return cls.model_validate(dict(row))
        except ValidationError as error:
            name = row.get("instance_id", "<no instance_id>")
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'row'}: {e['msg']}" for e in error.errors())
            hint = ""
            if any(e["type"] == "missing" for e in error.errors()):
                hint = (
                    " (swebench>=5 grades from the dataset's eval_script, log_parser and "
                    "image columns; use the SWE-bench/* datasets or a dump of them)"
                )
            raise InstanceError(f"instance {name!r} from {source}: {problems}{hint}") from None

    def test_spec(self) -> TestSpec:
        """swebench's ``TestSpec`` for this instance (eval script with exit-code recording)."""
        from swebench.harness.utils import make_test_spec

        return make_test_spec({**self.model_dump(), "image": self.image or ""})


def load_instances(
    source: str = BUNDLED, split: str = "test", instance_ids: Sequence[str] | None = None
) -> list[SweInstance]:
    """Instances from ``source``: ``"fixtures"`` (bundled, offline), a short name from
    ``DATASETS``, a Hugging Face dataset id, or a local ``.json``/``.jsonl``/``.parquet``
    file. ``instance_ids`` selects rows (unknown ids are an error)."""
    if source == BUNDLED:
        try:
            rows = fixture_instances(instance_ids)
        except KeyError as error:
            raise InstanceError(f"bundled tasks: {error.args[0]}") from None
    else:
        from swebench.harness.utils import load_swebench_dataset

        name = DATASETS.get(source.lower(), source)
        try:
            rows = load_swebench_dataset(name, split, list(instance_ids or []) or None)
        except ValueError as error:
            raise InstanceError(f"{name} (split {split!r}): {error}") from None
        except Exception as error:  # datasets/hub errors vary by version
            raise InstanceError(
                f"could not load SWE-bench instances from {name!r} (split {split!r}): {type(error).__name__}: {error}"
            ) from error
        rows = [_with_image(row) for row in rows]
    return [SweInstance.from_row(row, f"{source} ({split})") for row in rows]


def fixture_instances(instance_ids: Sequence[str] | None = None) -> list[dict]:
    """The bundled tasks as SWE-bench instance dicts (read by swebench's own loader)."""
    from swebench.task.repo import load_task_repo

    return load_task_repo(FIXTURES, list(instance_ids) if instance_ids else None)


def _with_image(row: Mapping[str, Any]) -> dict[str, Any]:
    """A dataset row's image, or the official one swebench derives from the instance id."""
    from swebench.task.checks import expected_image

    row = dict(row)
    if not row.get("image") and "instance_id" in row:
        row["image"] = expected_image(row["instance_id"])
    return row
