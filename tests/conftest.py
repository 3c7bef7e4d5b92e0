"""Test-wide settings: everything runs offline."""

import os

from hypothesis import settings

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# Property tests are CPU-bound and deterministic; no deadline on this shared 2-core machine.
settings.register_profile("default", deadline=None, max_examples=100)
settings.load_profile("default")
