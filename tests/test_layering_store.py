"""The stores stay split by concern (docs/api.md, "Where each store's code lives"): each concern
module holds its SQL for both dialects, imports only the concerns below it (so never in a cycle)
and never a store class, and the store classes hold no SQL of the concerns' tables."""

import ast
import re
from pathlib import Path

from tests.layering import runtime_imports

STORE = Path(__file__).resolve().parents[1] / "src" / "ragdx" / "store"
#: the concern modules, lowest first: each may import only those before it
CONCERNS = ["shards", "documents", "acl", "lexical", "staging", "schema", "embeddings", "checks"]
#: helpers below every concern
BELOW = {"_common", "_attributes", "tokens", "keyword"}
#: the most lines the two store classes' modules may have
BUDGET = {"sqlite.py": 330, "postgres.py": 580}
#: a statement reading or writing a table one concern owns
CONCERN_SQL = re.compile(r"\b(FROM|INTO|UPDATE|JOIN|TABLE)\s+(\{s\}\.|\{\{s\}\}\.)?(documents|acl|sections|chunks|"
                         r"chunks_fts|spaces|vectors|vec_\w*|index_versions|staged_\w+|tombstones|term_df|term_delta|"
                         r"postings|corpus)\b", re.IGNORECASE)


def _runtime_imports(path: Path) -> set[str]:
    return runtime_imports(path, "ragdx.store")


def _strings(path: Path) -> list[str]:
    """Every string in a file; an f-string with ``{s}`` for each value it formats."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.JoinedStr):
            found.append("".join(v.value if isinstance(v, ast.Constant) else "{s}" for v in node.values))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.append(node.value)
    return found


def test_each_concern_imports_only_the_concerns_below_it():
    for rank, name in enumerate(CONCERNS):
        imported = _runtime_imports(STORE / f"{name}.py") - BELOW
        allowed = set(CONCERNS[:rank])
        assert imported <= allowed, f"store/{name}.py imports {sorted(imported - allowed)}"


def test_the_concern_modules_do_not_import_a_store_class():
    for name in CONCERNS:
        assert not _runtime_imports(STORE / f"{name}.py") & {"sqlite", "postgres"}, name


def test_the_store_classes_hold_no_sql_of_a_concerns_tables():
    for name in BUDGET:
        found = [s for s in _strings(STORE / name) if CONCERN_SQL.search(s)]
        assert found == [], f"store/{name} holds a concern's SQL: {found[:3]}"


def test_the_concern_sql_lives_in_the_concern_modules():
    # the check above finds SQL where it is: each concern module holds some of its own
    for name in CONCERNS:
        assert any(CONCERN_SQL.search(s) for s in _strings(STORE / f"{name}.py")), name


def test_the_store_classes_stay_small():
    for name, most in BUDGET.items():
        lines = len((STORE / name).read_text().splitlines())
        assert lines <= most, f"store/{name} has {lines} lines (budget {most}): put a concern's code in its module"
