"""Stand-in: torchtitan main's ``torchtitan.rl.rubric``
is torchtitan 0.3.0's ``torchtitan.experiments.rl.rubrics`` (the same module object)."""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("torchtitan.experiments.rl.rubrics")
