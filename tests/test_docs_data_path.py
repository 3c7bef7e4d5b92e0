"""docs/contributing.md draws each host's data path as hops ``file.py:name``; every hop names
code that exists. A hop written as a bare ``→ name`` is looked up in the last file named on its
line (defined or imported there, or a method of a class there), so renaming or deleting a
function the drawing names fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "verifiers_stepwise"
HOP = re.compile(r"([\w/]+\.py):([\w.]+)")
BARE = re.compile(r"→ ([A-Za-z_]\w*)\b(?![-'./:\w])")


def drawing() -> list[str]:
    text = (ROOT / "docs" / "contributing.md").read_text()
    start = text.index("Each host's path, every hop")
    (block,) = re.findall(r"```\n(.*?)```", text[start:], re.S)[:1]
    return block.splitlines()


def names(tree: ast.Module) -> dict[str, ast.AST]:
    """Module-level names: definitions, assignments and imports."""
    found: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found[node.name] = node
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                found[alias.asname or alias.name.split(".")[0]] = node
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, ast.Name):
                    found[target.id] = node
    return found


def resolves(path: Path, qualname: str) -> bool:
    tree = ast.parse(path.read_text())
    scope = names(tree)
    if "." not in qualname and qualname not in scope:  # a method, named as the drawing's hop
        classes = [node for node in tree.body if isinstance(node, ast.ClassDef)]
        return any(getattr(n, "name", None) == qualname for c in classes for n in c.body)
    head, *rest = qualname.split(".")
    node = scope.get(head)
    for attr in rest:
        if not isinstance(node, ast.ClassDef):
            return False
        node = next((n for n in node.body if getattr(n, "name", None) == attr), None)
    return node is not None


def test_every_hop_of_the_data_path_names_existing_code() -> None:
    hops: list[tuple[str, str]] = []
    for line in drawing():
        last = None
        for token in re.finditer(rf"{HOP.pattern}|{BARE.pattern}", line):
            if token.group(1):
                last = token.group(1)
                hops.append((last, token.group(2)))
            elif last is not None:
                hops.append((last, token.group(3)))
    assert len(hops) > 30, hops  # the drawing was found and read
    missing = [f"{file}:{name}" for file, name in hops if not resolves(PACKAGE / file, name)]
    assert not missing, f"docs/contributing.md's data path names code that does not exist: {missing}"
