"""The estimators the benchmark compares, each picked by registered name.

A method is a registered estimator name plus its config, built through
``verifiers_stepwise.get_estimator`` so any installed estimator (a third party's too) can be
benchmarked with ``--method NAME:key=value,...``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verifiers_stepwise import Estimator, get_estimator

__all__ = ["DEFAULT_METHODS", "Method"]


@dataclass(frozen=True)
class Method:
    estimator: str
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """``name`` or ``name:key=value,...`` (the form ``parse`` reads)."""
        if not self.config:
            return self.estimator
        return self.estimator + ":" + ",".join(f"{k}={v}" for k, v in self.config.items())

    @property
    def short(self) -> str:
        """Compact name for plot legends: ``stepwise sum γ=0.4 per_turn``."""
        parts = [
            f"γ={v}" if k == "gamma" else f"{v}" if isinstance(v, str) else f"{k}={v}" for k, v in self.config.items()
        ]
        return " ".join([self.estimator, *parts])

    def build(self) -> Estimator:
        return get_estimator(self.estimator, **self.config)

    @classmethod
    def parse(cls, spec: str) -> Method:
        """``"stepwise:gamma=0.8,aggregation=max"`` -> Method; numbers become floats."""
        name, _, rest = spec.partition(":")
        config: dict[str, Any] = {}
        for item in filter(None, rest.split(",")):
            key, eq, value = item.partition("=")
            if not eq or not key:
                raise ValueError(f"method {spec!r}: expected key=value, got {item!r}")
            try:
                config[key] = float(value)
            except ValueError:
                config[key] = value
        if not name:
            raise ValueError(f"method {spec!r}: missing the estimator name")
        return cls(name, config)


DEFAULT_METHODS: tuple[Method, ...] = (
    Method("grpo"),
    Method("stepwise", {"aggregation": "sum", "gamma": 0.4, "baseline": "pooled", "scale": "std"}),
    Method("stepwise", {"aggregation": "max", "gamma": 0.8, "baseline": "pooled", "scale": "std"}),
    Method("stepwise", {"aggregation": "mean", "gamma": 0.4, "baseline": "pooled", "scale": "std"}),
    Method("stepwise", {"aggregation": "sum", "gamma": 0.4, "baseline": "per_turn", "scale": "std"}),
    Method("stepwise", {"aggregation": "sum", "gamma": 0.4, "baseline": "absorbing", "scale": "std"}),
    Method("stepwise", {"aggregation": "sum", "gamma": 1.0, "baseline": "absorbing", "scale": "std"}),
    Method("stepwise", {"aggregation": "sum", "gamma": 0.8, "baseline": "absorbing", "scale": "none"}),
    Method("stepwise", {"aggregation": "sum", "gamma": 1.0, "baseline": "absorbing", "scale": "none"}),
    Method("turn_credit", {"gamma": 0.9, "beta": 1.0}),
    Method("turn_credit", {"gamma": 0.9, "beta": 0.25}),
)
"""Trajectory-level GRPO; Kevin's pooled stepwise (the old default, sum γ 0.4, and max γ 0.8);
pooled over horizon-aware mean returns; the per_turn baseline; the absorbing baseline
std-scaled and mean-only (the new default: γ 1, scale "none"); turn_credit at β 1 (prime-rl's
default) and 0.25."""
