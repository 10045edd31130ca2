"""The bundled example end to end (``ragdx demo``): ingest it into a fresh store, resolve its
required evidence, run and diagnose every question, and write the run folder with its report."""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from ragdx.build import build_ingestor
from ragdx.config import Settings, load_settings
from ragdx.diagnosis.evidence import evidence_records
from ragdx.errors import InputError
from ragdx.examples import example_dir
from ragdx.experiments.run import RunResult, run
from ragdx.ingest.ingestor import IngestReport
from ragdx.queryset import load_queries
from ragdx.store.sqlite import SQLiteStore

__all__ = ["Demo", "demo", "demo_settings"]

log = logging.getLogger("ragdx.demo")


@dataclass(frozen=True, slots=True)
class Demo:
    """What :func:`demo` did: the ingest, each required quote's resolution (written to
    ``evidence.jsonl``), and the run."""

    store: Path
    ingest: IngestReport
    evidence: tuple[dict[str, Any], ...]
    result: RunResult
    questions: int

    @property
    def evidence_file(self) -> Path:
        return self.store.parent / "evidence.jsonl"


def demo_settings() -> Settings:
    """Every channel the installed extras allow: without 'dense', the demo runs lexical only."""
    if find_spec("sentence_transformers") is None:
        log.warning("the 'dense' extra is not installed: the demo runs without the dense channel "
                    "(pip install 'ragdx[dense]' for both)")
        return load_settings(overrides=["retrieval.dense.enabled=false"])
    return load_settings()


def demo(out: Path) -> Demo:
    """Run the bundled example into ``out`` (a demo folder there is replaced).

    Raises:
        InputError: ``out`` exists and is not a demo folder (nothing in it is touched).
    """
    example = example_dir()
    if out.exists():
        if not (out / "store.db").exists() and any(out.iterdir()):
            raise InputError(f"--out {out} exists and is not a ragdx demo folder; choose another")
        shutil.rmtree(out)
    out.mkdir(parents=True)
    log.info("ingesting the bundled example %s", example)
    settings = demo_settings()
    with SQLiteStore(out / "store.db") as store:
        report = build_ingestor(store, settings).run(example / "manifest.jsonl")
        queries = load_queries(example / "queries.jsonl")
        records = evidence_records(store, queries, strict=False)
        result = run(store, settings, queries, out / "run", example / "queries.jsonl")
    with open(out / "evidence.jsonl", "w", encoding="utf-8") as fh:
        for record in records:
            fh.write(json.dumps(record) + "\n")
    return Demo(out / "store.db", report, tuple(records), result, len(queries))
