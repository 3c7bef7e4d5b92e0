"""Command-line flags generated from a pydantic config class, and the options as one JSON flag.

Every field of an estimator's ``Config`` becomes ``--field-name VALUE`` (``--estimator-field-name``
where the command has that flag already), so a third-party estimator gets its own flags; values
are validated by the config, and a flag left out keeps the config's default.
"""

from __future__ import annotations

import argparse
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

__all__ = ["add_config_flags", "config_values", "field_description", "options_json", "type_name"]

_PREFIX = "config_field:"


def options_json(text: str, flag: str = "--options") -> dict[str, Any]:
    """A command line's JSON-object flag (``--options '{"gamma": 0.9}'``, the TRL host's env
    blocks) as a dict; ConfigError naming ``flag`` when it is not JSON or not an object."""
    import json

    from verifiers_stepwise.errors import ConfigError

    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"{flag}: not JSON ({error}): {text!r}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{flag}: must be a JSON object, got {text!r}")
    return value


def type_name(annotation: Any) -> str:
    """A short name for a field's type: ``float``, ``sum|max``, ``int | None``."""
    if get_origin(annotation) is Literal:
        return "|".join(str(value) for value in get_args(annotation))
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def field_description(info: FieldInfo) -> str:
    """A field's docstring on one line ("" when it has none)."""
    return " ".join((info.description or "").split())


def add_config_flags(group: Any, config: type[BaseModel]) -> None:
    """Add one flag per field of ``config`` to an argparse parser or argument group."""
    for name, info in config.model_fields.items():
        default = "required" if info.is_required() else f"default: {info.get_default(call_default_factory=True)!r}"
        help_text = f"{field_description(info)} ({default})".replace("%", "%%").lstrip()  # argparse formats help with %
        kwargs: dict[str, Any] = {"dest": _PREFIX + name, "default": argparse.SUPPRESS, "help": help_text}
        if info.annotation is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif get_origin(info.annotation) is Literal:
            # Hand the config the choice itself, not its spelling (Literal[1, 2] wants ints).
            values = {str(v): v for v in get_args(info.annotation)}
            kwargs["type"] = lambda text, values=values: values.get(text, text)
            kwargs["choices"] = list(values.values())
            kwargs["metavar"] = "{" + ",".join(values) + "}"
        else:
            kwargs["metavar"] = type_name(info.annotation).upper()
        flag = name.replace("_", "-")
        try:
            group.add_argument(f"--{flag}", **kwargs)
        except argparse.ArgumentError:  # the command has a flag of that name
            group.add_argument(f"--estimator-{flag}", **kwargs)


def config_values(namespace: argparse.Namespace) -> dict[str, Any]:
    """The config fields given on the command line, by field name."""
    return {dest[len(_PREFIX) :]: value for dest, value in vars(namespace).items() if dest.startswith(_PREFIX)}
