"""Your own stages in ragdx's pipeline: a retriever written as a function and a generator
written as a small class replace ragdx's, and the trace, the diagnosis, an ablation and the
report work as they do for ragdx's own stages.

    .venv/bin/python examples/custom_stages.py [OUT_FOLDER]

It ingests the bundled refund example (keyword channel only, so no model is needed), runs every
question through the custom pipeline, then ablates it against ragdx's extractive generator.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from ragdx import (
    Answer, Claim, Context, Pipeline, Query, SQLiteStore, StageKind, Usage, Variant, ablate_pipelines,
    build_ingestor, default_stages, example_dir, load_queries, load_settings, run_pipeline,
)
from ragdx.stages.bm25 import query_terms
from ragdx.stages.custom import FunctionRetriever


def keyword_search(store: SQLiteStore):
    """A plain term-overlap search over the store's chunks, as a stand-in for your own search
    service: ``(query, top_k) -> [(chunk_id, score), ...]``, best first, among the chunks the
    asker may read (ragdx checks access again on what it returns)."""
    chunks = store.chunks()

    def search(query: Query, top_k: int) -> list[tuple[str, float]]:
        terms = set(query_terms(query.question))
        readable = [c for c in chunks if store.readable(query.principal.groups, c.doc_id, c.version)]
        scored = [(c.id, float(len(terms & set(query_terms(c.text))))) for c in readable]
        return sorted((s for s in scored if s[1] > 0), key=lambda s: -s[1])[:top_k]
    return search


class FirstSentenceGenerator:
    """Answers with the first sentence of the top context unit, citing it; abstains on an empty
    context. Any class with ``name``, ``kind`` and ``run(query, context) -> Answer`` works."""

    name = "first-sentence"
    kind = StageKind.GENERATION
    config = {"method": "first sentence of the top unit"}

    def run(self, query: Query, context: Context) -> Answer:
        started = time.perf_counter()
        if not context.units:
            return Answer(self.name, "No source found.", (), True, ("any source",), self.name, Usage(),
                          self.config, time.perf_counter() - started)
        unit = context.units[0]
        sentence = unit.text.split(". ")[0].strip().rstrip(".") + "."
        return Answer(self.name, f"{sentence} [{unit.id}]", (Claim(sentence, (unit.id,)),), False, (),
                      self.name, Usage(), self.config, time.perf_counter() - started)


def main(out: Path) -> Pipeline:
    settings = load_settings(overrides=["retrieval.dense.enabled=false"])
    example = example_dir()
    out.mkdir(parents=True, exist_ok=True)
    store = SQLiteStore(out / "store.db", "create")
    build_ingestor(store, settings).run(example / "manifest.jsonl")
    queries = load_queries(example / "queries.jsonl")

    # ragdx's stages with the keyword channel and the generator replaced by yours
    stages = default_stages(store, settings)
    bm25 = next(n for n, s in enumerate(stages) if s.name == "bm25")
    stages[bm25] = FunctionRetriever(store, keyword_search(store), name="overlap", top_k=50)
    builtin_generator = next(s for s in stages if s.kind is StageKind.GENERATION)
    stages[stages.index(builtin_generator)] = FirstSentenceGenerator()
    pipeline = Pipeline(stages, store=store, settings=settings)
    print(pipeline)

    result = run_pipeline(pipeline, queries, out / "run", progress=False)
    outcomes = ", ".join(f"{o} {n}" for o, n in result.metrics.overall.outcomes.items())
    print(f"{len(result.diagnoses)} questions: {outcomes}; report: {out / 'run' / 'report.html'}")

    # an ablation: the same pipeline with ragdx's extractive generator back in its place
    variant = Variant("extractive", ("generation: ragdx's extractive generator",), (StageKind.GENERATION,))
    with_extractive = Pipeline([builtin_generator if s.kind is StageKind.GENERATION else s for s in stages],
                               store=store, settings=settings)
    ablation = ablate_pipelines(pipeline, [(variant, with_extractive)], queries, out / "ablation", progress=False)
    for reading in ablation.variants[0].readings:
        print(f"  {variant.name}: {reading}")
    store.close()
    return pipeline


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="ragdx-custom-")))
