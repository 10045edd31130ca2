"""The framework tests: real Haystack and LangChain pipelines over the bundled example (the
examples in examples/), with faults injected at each stage. They skip when a framework is not
installed (the core environment), and fail instead when RAGDX_REQUIRE_FRAMEWORKS is set (CI)."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import json
import os
import sys
from pathlib import Path

import pytest

from ragdx.cli import main
from ragdx.examples import example_dir
from ragdx.types import StageKind

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
QUERIES = example_dir() / "queries.jsonl"
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")


def require(*modules: str) -> None:
    """Skip the test unless the modules import; with RAGDX_REQUIRE_FRAMEWORKS set, fail instead."""
    missing = [m for m in modules if importlib.util.find_spec(m.split(".")[0]) is None]
    if missing:
        if os.environ.get("RAGDX_REQUIRE_FRAMEWORKS"):
            pytest.fail(f"RAGDX_REQUIRE_FRAMEWORKS is set but {', '.join(missing)} is not installed "
                        "(make test installs the haystack and langchain extras into .venv)")
        pytest.skip(f"{', '.join(missing)} not installed (pip install 'ragdx[haystack,langchain]')")


def example(name: str):
    """An example script of examples/, imported as a module."""
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # instrumentations patch a component class through its module's name
    spec.loader.exec_module(module)
    return module


def diagnose(traces: Path, store: Path, out: Path, *extra: str) -> dict[str, dict]:
    """``ragdx diagnose`` of a traces file against the example's queries; each query's diagnosis."""
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(["diagnose", "--traces", str(traces), "--queries", str(QUERIES), "--store", str(store),
                     "--out", str(out), *extra])
    assert code == 0
    return {d["id"]: d for d in map(json.loads, (out / "diagnosis.jsonl").read_text().splitlines())}


def key(d: dict) -> tuple:
    """What two diagnoses of one query must agree on: the outcome, the first failure, and each
    lost group's stage (reasons name each system's own components, so they may differ)."""
    return d["outcome"], d["first_failure"], tuple((l["group"], l["stage"]) for l in d["lost"])


def expected_stage(baseline: dict, stage: str) -> str:
    """The first failure a fault at ``stage`` must give a query: that stage, unless the query
    already lost evidence earlier without the fault (an earlier loss stays the first; an answer's
    failure is judged anew)."""
    before = baseline["first_failure"]
    if before is not None and StageKind(before).order < min(StageKind(stage).order, StageKind.GENERATION.order):
        return before
    return stage


# fault -> the stage ragdx must name, and the outcome every changed query must have (None: any)
FAULT_STAGES = {
    "retrieval": ("retrieval", None), "fusion": ("fusion", None), "context": ("context", None),
    "stale": ("governance", "stale"), "leak": ("governance", "leak"), "invent": ("generation", "unsupported"),
    "drop": ("generation", "incomplete"), "distract": ("generation", None), "miscite": ("citation", "unsupported"),
}
