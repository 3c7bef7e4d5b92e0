"""Stand-in: torchtitan main's ``torchtitan.rl.types``
is torchtitan 0.3.0's ``torchtitan.experiments.rl.types`` (the same module object)."""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("torchtitan.experiments.rl.types")
