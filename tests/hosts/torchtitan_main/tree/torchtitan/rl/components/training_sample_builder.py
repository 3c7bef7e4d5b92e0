"""Stand-in: torchtitan main's ``torchtitan.rl.components.training_sample_builder``
is torchtitan 0.3.0's ``torchtitan.experiments.rl.components.training_sample_builder`` (the same module object)."""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("torchtitan.experiments.rl.components.training_sample_builder")
