"""Env id ``stepwise-sums``: a sum per task, a too-high/too-low hint after each wrong answer.

The task the TRL host trains its default model on (``docs/trl.md``). The prompt is a document
to continue, not a chat: a few solved sums, some fixed after a hint, then the task's sum, so
a base model that never saw a chat format answers on-format. Measured on the untrained Gemma
3 270M (temperature 1.0, 200 episodes): 21 % of first turns right, 36 % solved within four.
"""

from stepwise_sums.sums import SumsEnv, SumsTaskset

__all__ = ["SumsEnv", "SumsTaskset"]
