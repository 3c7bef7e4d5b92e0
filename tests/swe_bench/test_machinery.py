"""The test-machinery rule on paths from real SWE-bench layouts (no sandbox needed)."""

from __future__ import annotations

import pytest
from stepwise_swe_bench.machinery import Change, check_change, hidden_test_dirs, top_level_names

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


def added(path: str) -> Change:
    return Change(path, "A", "000000", "100644")


BASE = top_level_names(
    "040000 tree 1\tslugs\n100644 blob 2\tREADME.md\n100644 blob 3\tsetup.py\n040000 tree 4\tsrc/core\n"
    '100644 blob 5\t"na\\303\\257ve.py"\n'
)


def test_the_base_commits_importable_names():
    assert BASE == frozenset({"slugs", "setup", "src/core"})  # README.md imports as nothing


@pytest.mark.parametrize(
    "path",
    ["slugs/extra.py", "slugs/sub/__init__.py", "src/core/new.py", "README.rst", ".github/ci.yml", "my-docs/a.md"],
)
def test_a_diff_may_add_inside_the_base_names_or_where_no_import_reaches(path):
    assert check_change(added(path), set(), base_names=BASE) is None


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("helpers/__init__.py", "adds the top-level importable name 'helpers'"),
        ("docs/index.md", "adds the top-level importable name 'docs'"),  # a namespace package
        ("pytest.py", "adds the top-level importable name 'pytest'"),
        ("src/other/__init__.py", "adds the top-level importable name 'other'"),
        ("fnmatch.cpython-311-x86_64-linux-gnu.so", "is a compiled module"),
        ("slugs/slugify.abi3.so", "is a compiled module"),
        ("slugs/native.PYD", "is a compiled module"),
        ("codecs.pyw", "adds the top-level importable name 'codecs'"),
        ("Passall-1.0.Dist-Info/entry_points.txt", "is package metadata"),
        ("x.EGG-INFO/PKG-INFO", "is package metadata"),
    ],
)
def test_a_diff_may_not_add_a_new_importable_name_compiled_code_or_metadata(path, reason):
    assert reason in check_change(added(path), set(), base_names=BASE)
