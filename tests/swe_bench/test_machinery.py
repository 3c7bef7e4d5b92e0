"""The test-machinery rule on paths from real SWE-bench layouts (no sandbox needed)."""

from __future__ import annotations

import pytest
from stepwise_swe_bench.machinery import Change, check_change, hidden_test_dirs

DJANGO = {"tests/model_fields/tests.py"}
ASTROPY = {"astropy/modeling/tests/test_separable.py"}
SPHINX = {"tests/test_ext_autodoc.py"}


def modified(path: str) -> Change:
    return Change(path, "M", "100644", "100644")


@pytest.mark.parametrize(
    ("hidden", "path"),
    [
        (DJANGO, "django/test/testcases.py"),  # library code that happens to be called test
        (DJANGO, "django/db/models/fields/__init__.py"),
        (ASTROPY, "astropy/modeling/separable.py"),
        (ASTROPY, "astropy/tests/helper.py"),
        (SPHINX, "sphinx/testing/util.py"),
        ({"test_root_module.py"}, "pkg/module.py"),  # a root test module protects only itself
    ],
)
def test_code_under_test_may_change(hidden, path):
    assert check_change(modified(path), hidden) is None


@pytest.mark.parametrize(
    ("hidden", "path", "reason"),
    [
        (DJANGO, "tests/runtests.py", "is in the tests"),  # Django's test runner
        (DJANGO, "tests/model_fields/models.py", "is in the tests"),
        (ASTROPY, "astropy/modeling/tests/data/expected.txt", "is in the tests"),
        (ASTROPY, "astropy/modeling/tests/test_separable.py", "a file the hidden tests change"),
        (SPHINX, "tests/roots/test-ext/conf.py", "is in the tests"),
        (SPHINX, "sphinx/test_helpers_test.py", "is in the tests"),  # pytest's default pattern
        (DJANGO, "django/conftest.py", "is a pytest conftest.py"),
    ],
)
def test_the_test_machinery_may_not(hidden, path, reason):
    assert reason in check_change(modified(path), hidden)


def test_hidden_test_dirs_are_the_nearest_named_ancestor():
    assert {str(d) for d in hidden_test_dirs(DJANGO | ASTROPY | {"setup_test.py"})} == {
        "tests",
        "astropy/modeling/tests",
    }
