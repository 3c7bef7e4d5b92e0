"""Stand-in: torchtitan main's ``torchtitan.rl.observability.metrics``
is torchtitan 0.3.0's ``torchtitan.experiments.rl.observability.metrics`` (the same module object)."""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("torchtitan.experiments.rl.observability.metrics")
