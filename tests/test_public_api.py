import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

import ragdx

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "ragdx"


def documented_names() -> list[str]:
    """The names the API doc's "Names" table lists."""
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    table = text.split("## Names", 1)[1].split("\n## ", 1)[0]
    names = []
    for line in table.splitlines():
        if line.startswith("|") and not line.startswith(("| group", "|---")):
            names += re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", line.split("|")[2])
    return names


def test_every_documented_name_is_public_and_nothing_else_is():
    documented = documented_names()
    assert len(documented) > 80  # the table was read
    assert sorted(set(documented)) == sorted(ragdx.__all__)
    for name in documented:
        assert getattr(ragdx, name) is not None, name
    assert len(set(ragdx.__all__)) == len(ragdx.__all__)


def test_every_error_ragdx_defines_is_in_the_one_tree():
    """Every exception class defined anywhere in the package subclasses RagdxError and lives in
    ragdx.errors (so one `except RagdxError` catches what ragdx raises on purpose)."""
    outside = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and any(
                    getattr(b, "id", getattr(b, "attr", "")).endswith(("Error", "Exception")) for b in node.bases):
                if path.name != "errors.py" and not node.name.startswith("_"):
                    outside.append(f"{path.relative_to(SRC)}:{node.name}")
    assert outside == []
    errors = [getattr(ragdx.errors, n) for n in ragdx.errors.__all__]
    assert len(errors) == 9
    for error in errors:
        assert issubclass(error, ragdx.RagdxError), error


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def test_stages_import_protocols_not_the_sqlite_store():
    stage_files = sorted((SRC / "stages").glob("*.py"))
    assert len(stage_files) >= 9
    for path in stage_files + [SRC / "pipeline.py", SRC / "store" / "vectors.py",
                               *sorted((SRC / "diagnosis").glob("*.py"))]:
        assert "ragdx.store.sqlite" not in _imports(path), path.name
    uses_store = [p.name for p in stage_files if "ragdx.protocols" in _imports(p)]
    assert {"bm25.py", "dense.py", "govern.py", "assemble.py", "verify.py", "rerank.py"} <= set(uses_store)


def test_the_index_versions_name_no_concrete_store_class(tmp_path):
    """index/ works on the IndexBuildStore protocol; the SQLite store is one."""
    from ragdx.protocols import IndexBuildStore
    from ragdx.store.sqlite import SQLiteStore
    files = sorted((SRC / "index").glob("*.py"))
    assert {p.name for p in files} >= {"versions.py", "checks.py", "spaces.py"}
    for path in files:
        assert not {"ragdx.store.sqlite", "ragdx.store.postgres"} & _imports(path), path.name
        assert "SQLiteStore" not in path.read_text() and "PostgresStore" not in path.read_text(), path.name
    with SQLiteStore(tmp_path / "s.db") as store:
        assert isinstance(store, IndexBuildStore)


def test_lower_layers_never_import_upper_ones():
    upper = {"ragdx.diagnosis", "ragdx.traces", "ragdx.evaluation", "ragdx.experiments", "ragdx.report", "ragdx.cli",
             "ragdx.runfolder", "ragdx.build"}
    checked = 0
    for folder in ("stages", "store", "ingest"):
        for path in (SRC / folder).glob("*.py"):
            checked += 1
            bad = [m for m in _imports(path) if any(m == u or m.startswith(u + ".") for u in upper)]
            assert bad == [], f"{path.relative_to(SRC)} imports {bad}"
    for path in (SRC / "diagnosis").glob("*.py"):  # the diagnosis: below the trace formats that feed it
        checked += 1
        bad = [m for m in _imports(path) if any(m == u or m.startswith(u + ".") for u in upper - {"ragdx.diagnosis"})]
        assert bad == [], f"{path.relative_to(SRC)} imports {bad}"
    for path in (SRC / "index").glob("*.py"):  # the index use cases: above diagnosis, below the rest
        checked += 1
        bad = [m for m in _imports(path) if any(m == u or m.startswith(u + ".") for u in upper - {"ragdx.diagnosis"})]
        assert bad == [], f"{path.relative_to(SRC)} imports {bad}"
    for path in sorted((SRC / "types").glob("*.py")):  # the artifacts: each layer's, below every other
        checked += 1
        bad = [m for m in _imports(path) if m.startswith("ragdx.") and m != "ragdx.errors"
               and not m.startswith("ragdx.types.")]
        assert bad == [], f"types/{path.name} imports {bad}"
    for module in ("protocols.py", "errors.py", "pipeline.py", "binding.py"):
        checked += 1
        allowed = {"ragdx.types", "ragdx.errors", "ragdx.protocols"}
        if module == "pipeline.py":  # the settings tree, for its annotation (it sits as low: below)
            allowed.add("ragdx.config")
        bad = [m for m in _imports(SRC / module) if m.startswith("ragdx.") and m not in allowed]
        assert bad == [], f"{module} imports {bad}"
    checked += 1
    bad = [m for m in _imports(SRC / "config.py") if m.startswith("ragdx.") and m not in ("ragdx.errors", "ragdx._jsonl")]
    assert bad == [], f"config.py imports {bad}"
    assert checked > 38


def test_import_has_no_heavy_side_effects():
    code = ("import sys, ragdx; heavy = [m for m in ('torch', 'sentence_transformers', 'pypdf', "
            "'onnxruntime', 'psycopg') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_choice_compared_with_a_string_none_of_its_values_raises():
    from ragdx.types import DocStatus, StageKind
    assert DocStatus.CURRENT == "current"          # its own value: JSON files hold plain values
    assert DocStatus.CURRENT != "superseded"        # another valid value: an ordinary inequality
    assert DocStatus.CURRENT in {"current"}          # hashed as its value
    assert StageKind.RETRIEVAL != DocStatus.CURRENT  # members of two sets compare as before
    with pytest.raises(TypeError, match=r"DocStatus.CURRENT compared with 'curent', which is none of its values"):
        DocStatus.CURRENT == "curent"  # noqa: B015 (a typo once failed silently)
    with pytest.raises(TypeError, match="StageKind.RETRIEVAL compared with 'builder'"):
        "builder" != StageKind.RETRIEVAL  # noqa: B015 (the reflected comparison is checked too)
