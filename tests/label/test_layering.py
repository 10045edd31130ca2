"""The labeller stays split by concern (src/ragdx/label/propose.py's docstring): each concern
module imports only the concerns below it (so never in a cycle) and never the Labeller class at
run time (issue 53)."""

from pathlib import Path

from tests.layering import runtime_imports

LABEL = Path(__file__).resolve().parents[2] / "src" / "ragdx" / "label"
#: the concern modules, lowest first: each may import only those before it
CONCERNS = ["claims", "proposal", "candidates", "ranking", "grouping"]
#: below every concern
BELOW = {"readers"}


def _runtime_imports(path: Path) -> set[str]:
    return runtime_imports(path, "ragdx.label")


def test_each_concern_imports_only_the_concerns_below_it():
    for rank, name in enumerate(CONCERNS):
        imported = _runtime_imports(LABEL / f"{name}.py") - BELOW
        allowed = set(CONCERNS[:rank])
        assert imported <= allowed, f"label/{name}.py imports {sorted(imported - allowed)}"


def test_the_labeller_ties_the_concerns_together():
    assert set(CONCERNS) <= _runtime_imports(LABEL / "propose.py")

