"""``verifiers_stepwise.hosts`` itself imports no trainer: each host module imports its own."""

import json
import subprocess
import sys

HOSTS = ("prime_rl", "torchtitan", "tinker_cookbook", "tinker", "numpy", "torch", "verifiers")


def test_hosts_package_imports_no_trainer():
    code = f"import sys, json, verifiers_stepwise.hosts; print(json.dumps([m for m in {HOSTS!r} if m in sys.modules]))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []
