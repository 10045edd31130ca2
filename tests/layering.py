"""What the layering tests read: the modules of one package a file imports when it runs."""

from __future__ import annotations

import ast
from pathlib import Path


def runtime_imports(path: Path, package: str) -> set[str]:
    """The modules of ``package`` (``ragdx.store``) a file imports when it runs (not those under
    TYPE_CHECKING), by their names in the package."""
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and ast.unparse(node.test) == "TYPE_CHECKING" for n in ast.walk(node)}
    depth = package.count(".") + 1
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == package:
                found.update(a.name for a in node.names)
            elif node.module.startswith(package + "."):
                found.add(node.module.split(".")[depth])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[depth] for a in node.names if a.name.startswith(package + "."))
    return found
