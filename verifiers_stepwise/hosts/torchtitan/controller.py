"""torchtitan's ``Controller.Config`` that refuses a stepwise advantage without its builder.

Imports torchtitan's controller, hence vLLM, Monarch and torchstore: GPU-only, so the
recipes in ``hosts.torchtitan.config_registry`` import this module only when a recipe is called.
``Controller.Config.__post_init__`` runs whenever the config is constructed, which includes
torchtitan's ``ConfigManager`` re-building it with the CLI's overrides, so the check
(``hosts.torchtitan.check_credit``, ``check_cli_flags``) sees the final config. On torchtitan 0.3.0's
layout and main's alike.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from verifiers_stepwise.hosts.torchtitan import RL_PACKAGE, check_cli_flags, check_credit, requires_torchtitan

with requires_torchtitan("verifiers_stepwise.hosts.torchtitan.controller"):
    if RL_PACKAGE == "torchtitan.rl":  # torchtitan main
        from torchtitan.rl.controller import Controller
    else:
        from torchtitan.experiments.rl.controller import Controller

__all__ = ["StepwiseController", "stepwise_controller"]


class StepwiseController(Controller):
    """torchtitan's controller, unchanged; only its config checks credit assignment."""

    @dataclass(kw_only=True, slots=True)
    class Config(Controller.Config):
        def __post_init__(self) -> None:
            Controller.Config.__post_init__(self)
            check_credit(self)
            check_cli_flags(self)


def stepwise_controller(config: Controller.Config) -> StepwiseController.Config:
    """``config`` as a ``StepwiseController.Config`` (same fields, checked): a torchtitan recipe's
    ``Controller.Config`` on either layout."""
    return StepwiseController.Config(**{f.name: getattr(config, f.name) for f in fields(config) if f.init})
