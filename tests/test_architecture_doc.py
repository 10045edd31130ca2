"""docs/architecture.md names the files a newcomer looks for: every path it names exists, every
folder of src/ragdx is named, and every stage module is placed (issue 53)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")


def _named() -> tuple[set[str], dict[str, set[str]]]:
    """The full paths the page names, and the bare file names it places under each folder (a
    bullet's sentences name a folder, then its files)."""
    paths = set(re.findall(r"`((?:src|docs|tests|bench|examples)/[\w./-]+)`", DOC))
    files: dict[str, set[str]] = {}
    for para in re.split(r"\n(?=\d+\. |- )", DOC):
        folders = re.findall(r"`(src/ragdx/[\w/]+/)`", para)
        for name in re.findall(r"`(\w+\.py)`", para):
            for folder in folders:
                files.setdefault(folder, set()).add(name)
    return paths, files


def test_every_path_it_names_exists():
    paths, _ = _named()
    assert len(paths) >= 30
    missing = sorted(p for p in paths if not (ROOT / p.rstrip("/")).exists())
    assert missing == []


def test_every_package_and_every_stage_module_is_on_the_map():
    paths, files = _named()
    packages = {f"src/ragdx/{p.name}/" for p in (ROOT / "src" / "ragdx").iterdir()
                if p.is_dir() and (p / "__init__.py").exists() and p.name not in ("examples", "testing", "train")}
    assert sorted(packages - paths) == []
    stages = {p.name for p in (ROOT / "src" / "ragdx" / "stages").glob("*.py") if p.name != "__init__.py"}
    assert sorted(stages - files.get("src/ragdx/stages/", set())) == []


def test_no_source_file_is_over_800_lines():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines())
             for p in (ROOT / "src").rglob("*.py")}
    assert len(sizes) > 100
    assert {p: n for p, n in sizes.items() if n > 800} == {}


def test_the_command_line_modules_import_the_library_inside_their_commands():
    """Importing ragdx.cli stays cheap: at module level its files import only the standard
    library, ragdx.cli and ragdx.errors (each command imports what it uses when it runs)."""
    import ast
    import sys
    for path in sorted((ROOT / "src" / "ragdx" / "cli").glob("*.py")):
        top = [n for n in ast.parse(path.read_text()).body if isinstance(n, (ast.Import, ast.ImportFrom))]
        names = [a.name for n in top if isinstance(n, ast.Import) for a in n.names] + [
            n.module for n in top if isinstance(n, ast.ImportFrom) and n.module]
        bad = [m for m in names if m.split(".")[0] not in sys.stdlib_module_names and m != "__future__"
               and not m.startswith("ragdx.cli") and m != "ragdx.errors"]
        assert bad == [], f"cli/{path.name} imports {bad} at module level"
