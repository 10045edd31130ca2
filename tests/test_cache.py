"""The retrieval and answer caches (issue 15): a deleted document never resurfaces through them, a
revoked group cannot read at the next query, user B never gets user A's cached answer, and a
change invalidates exactly the entries that depend on it, both ways."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from ragdx.build import build_ingestor, build_pipeline
from ragdx.caching import CachedPipeline
from ragdx.cli import main
from ragdx.config import load_settings
from ragdx.ingest.ingestor import delete_documents
from ragdx.store.cache import SQLiteCache, fts5_terms
from ragdx.store.sqlite import SQLiteStore
from ragdx.testing.encoders import HashingEncoder
from ragdx.types import Principal, Query
from tests.conftest import write

SETTINGS = ["retrieval.dense.enabled=false", "chunking.tokenizer=regex", "rerank.method=none"]
QUESTION = "Are refunds accepted within 30 days of delivery?"
REFUND = "# Refund policy\n\nRefunds are accepted within 30 days of delivery.\n"
# shares no term with QUESTION, as FTS5 stems them
SHIPPING = "# Shipping\n\nParcels travel by courier.\n"
STAGES = ("rewrite", "bm25", "rrf", "governance", "context", "extractive", "verify")


def corpus(folder: Path, *, refund: str = REFUND, refund_acl=("public",), shipping: str = SHIPPING,
           extra: dict[str, str] | None = None) -> Path:
    """refund.md answers QUESTION; shipping.md (and each of ``extra``) is another document."""
    docs = {"refund.md": refund, "shipping.md": shipping, **(extra or {})}
    for name, text in docs.items():
        write(folder / name, text)
    return write(folder / "m.jsonl", "\n".join(json.dumps(
        {"doc_id": name, "path": name, "acl": list(refund_acl) if name == "refund.md" else ["public"]})
        for name in docs) + "\n")


def ingest(store, folder: Path, **kwargs) -> None:
    build_ingestor(store, load_settings(overrides=SETTINGS)).run(corpus(folder, **kwargs))


def cached(store, tmp_path: Path, overrides=SETTINGS, **kw) -> CachedPipeline:
    return CachedPipeline(build_pipeline(store, load_settings(overrides=overrides), **kw),
                          SQLiteCache(tmp_path / "s.db.cache"))


def ask(pipeline, groups=("public",), user="ann", question=QUESTION):
    return pipeline.run(Query("q", question, Principal(user, tuple(groups))))


def same_answer(served, computed) -> bool:
    """The same answer, whatever the time each took (a served one took none)."""
    a, b = served.answer, computed.answer
    return (a.text, a.claims, a.abstained, a.missing) == (b.text, b.claims, b.abstained, b.missing)


def docs_in(trace) -> set[str]:
    found = {c.doc_id for r in trace.ranked for c in (*r.items, *r.dropped)}
    return found | {u.doc_id for u in trace.context.units}


def test_question_terms_are_fts5s_stems():
    assert fts5_terms([QUESTION]) == {"ar", "refund", "accept", "within", "30", "dai", "of", "deliveri"}
    assert not fts5_terms([SHIPPING]) & fts5_terms([QUESTION])


def test_a_second_ask_is_served_from_the_answer_cache(tmp_path):
    with SQLiteStore(tmp_path / "s.db") as store:
        ingest(store, tmp_path)
        pipeline = cached(store, tmp_path)
        first, second = ask(pipeline), ask(pipeline)
    assert first.cached == () and second.cached == STAGES
    assert same_answer(second, first) and second.context.units == first.context.units
    assert second.context.seconds == second.answer.seconds == 0.0 < first.context.seconds  # not this run's time
    assert "refund.md" in {u.doc_id for u in second.context.units}
    assert (pipeline.stats.lookups, pipeline.stats.answer_hits, pipeline.stats.retrieval_hits) == (2, 1, 0)
    assert second.notes[0].startswith("answer cache: served (made at index version 1")
    [(kind1, q1, scope1, made1, docs1), (kind2, q2, scope2, made2, docs2)] = pipeline.cache.entries()
    assert (kind1, kind2, q1, scope1, made1) == ("retrieval", "answer", QUESTION, ("public",), 1)
    assert docs1 == docs2 == ("refund.md",)


def test_a_miss_computes_what_its_results_depend_on_once(tmp_path, monkeypatch):
    from ragdx import caching
    calls = []
    computed = caching.dependencies
    monkeypatch.setattr(caching, "dependencies", lambda p, q, outs: calls.append(len(outs)) or computed(p, q, outs))
    with SQLiteStore(tmp_path / "s.db") as store:
        ingest(store, tmp_path)
        pipeline = cached(store, tmp_path)
        trace = ask(pipeline)
        whole = computed(pipeline, trace.query, trace.stages)
        answer_docs = pipeline.cache.entries()[-1][4]
    assert len(calls) == 1 and calls[0] < len(trace.stages)  # the lists', extended by the answer's documents
    assert answer_docs == tuple(sorted(whole.docs)) and whole.docs


def test_a_changed_context_budget_reuses_the_cached_retrieval(tmp_path):
    with SQLiteStore(tmp_path / "s.db") as store:
        ingest(store, tmp_path)
        ask(cached(store, tmp_path))
        other = cached(store, tmp_path, [*SETTINGS, "context.budget_tokens=500"])
        trace = ask(other)
    assert trace.cached == ("rewrite", "bm25", "rrf", "governance")
    assert (other.stats.answer_hits, other.stats.retrieval_hits) == (0, 1)


def test_a_deleted_document_never_resurfaces_through_the_cache(tmp_path):
    with SQLiteStore(tmp_path / "s.db") as store:
        ingest(store, tmp_path)
        pipeline = cached(store, tmp_path)
        assert "refund.md" in docs_in(ask(pipeline))
        delete_documents(store, ["refund.md"])
        after = ask(pipeline)
    assert after.cached == () and "refund.md" not in docs_in(after)
    entries = pipeline.cache.entries()
    assert entries and all("refund.md" not in docs for *_, docs in entries)


def test_a_deletion_through_the_cli_purges_the_cache_at_once(tmp_path, capsys):
    store = str(tmp_path / "s.db")
    assert main(["ingest", "--store", store, str(corpus(tmp_path)), *sum((["--set", s] for s in SETTINGS), [])]) == 0
    ask_json = ["ask", "--store", store, "--json", *sum((["--set", s] for s in SETTINGS), []), QUESTION]
    capsys.readouterr()
    assert main(ask_json) == 0
    assert "cache" not in json.loads(capsys.readouterr().out)
    assert main(ask_json) == 0
    served = json.loads(capsys.readouterr().out)
    assert served["cache"]["stages"] == list(STAGES) and served["stages"][0]["cached"] is True
    assert {c["doc"] for c in served["evidence"]["cited"]} == {"refund.md"}
    assert main(["delete", "--store", store, "refund.md"]) == 0
    assert capsys.readouterr().out == "deleted refund.md (1 version)\nindex version 2\n"
    with SQLiteCache(store + ".cache") as cache:  # before any other ask: nothing of refund.md is kept
        assert len(cache) == 0
    assert main(ask_json) == 0
    again = json.loads(capsys.readouterr().out)
    assert "cache" not in again and "refund.md" not in json.dumps(again["stages"])


def test_a_revoked_group_cannot_read_at_the_next_query_cached_or_not(tmp_path):
    with SQLiteStore(tmp_path / "s.db") as store:
        ingest(store, tmp_path, refund_acl=("staff",))
        pipeline = cached(store, tmp_path)
        assert "refund.md" in docs_in(ask(pipeline, ("staff",)))
        assert ask(pipeline, ("staff",)).cached == STAGES
        ingest(store, tmp_path, refund_acl=("admin",))  # staff's access revoked
        after = ask(pipeline, ("staff",))
    assert after.cached == () and "refund.md" not in docs_in(after) and after.answer.abstained


def test_user_b_never_gets_user_as_cached_answer(tmp_path):
    with SQLiteStore(tmp_path / "s.db") as store:
        ingest(store, tmp_path, refund_acl=("staff",))
        pipeline = cached(store, tmp_path)
        a = ask(pipeline, ("staff",), "ann")
        b = ask(pipeline, ("public",), "bob")
        c = ask(pipeline, ("staff",), "cat")  # the same scope as ann's: served
    assert "refund.md" in docs_in(a) and not a.answer.abstained
    assert b.cached == () and "refund.md" not in docs_in(b) and b.answer.abstained
    assert c.cached == STAGES and same_answer(c, a) and c.query.principal.user == "cat"


@pytest.mark.parametrize("change, invalidated", [
    ("unrelated edit", False), ("unrelated new document", False), ("edit of the cited document", True),
    ("new document matching a term", True), ("unrelated deletion", False)])
def test_a_change_invalidates_exactly_the_entries_that_depend_on_it(tmp_path, change, invalidated):
    with SQLiteStore(tmp_path / "s.db") as store:
        ingest(store, tmp_path, extra={"weather.md": "# Weather\n\nSunny skies.\n"})
        pipeline = cached(store, tmp_path)
        ask(pipeline)
        before = store.index_version
        if change == "unrelated edit":
            ingest(store, tmp_path, shipping=SHIPPING.replace("courier", "van"),
                   extra={"weather.md": "# Weather\n\nSunny skies.\n"})
        elif change == "unrelated new document":
            ingest(store, tmp_path, extra={"weather.md": "# Weather\n\nSunny skies.\n", "tea.md": "Green tea."})
        elif change == "edit of the cited document":
            ingest(store, tmp_path, refund=REFUND.replace("30", "14"), extra={"weather.md": "# Weather\n\nSunny skies.\n"})
        elif change == "new document matching a term":
            ingest(store, tmp_path, extra={"weather.md": "# Weather\n\nSunny skies.\n", "late.md": "Late deliveries."})
        else:
            delete_documents(store, ["weather.md"])
        assert store.index_version == before + 1
        dropped = pipeline.cache.sync(store)
        trace = ask(pipeline)
    assert dropped == (2 if invalidated else 0)
    assert trace.cached == (() if invalidated else STAGES)


def test_a_cached_answer_whose_evidence_changed_is_never_served(tmp_path):
    """Even if invalidation had missed a change, the recheck before serving refuses the answer."""
    with SQLiteStore(tmp_path / "s.db") as store:
        ingest(store, tmp_path)
        pipeline = cached(store, tmp_path)
        ask(pipeline)
        delete_documents(store, ["refund.md"])
        last = store.log_entries(0)[-1]
        db = sqlite3.connect(tmp_path / "s.db.cache")  # pretend the cache was brought up to date
        with db:
            db.executemany("UPDATE meta SET value = ? WHERE key = ?", [
                (str(store.index_version), "version"), (str(last.seq), "seq"),
                (json.dumps([last.seq, last.at, last.index_version, last.op, last.doc_id, last.version]), "last")])
        db.close()
        after = ask(pipeline)
    assert (pipeline.stats.stale, pipeline.stats.answer_hits, pipeline.stats.retrieval_hits) == (2, 0, 0)
    assert after.cached == () and "refund.md" not in docs_in(after) and after.answer.abstained


def test_a_store_rebuilt_at_the_same_path_empties_the_cache(tmp_path):
    with SQLiteStore(tmp_path / "s.db") as store:
        ingest(store, tmp_path)
        ask(cached(store, tmp_path))
    for suffix in ("", "-wal", "-shm"):
        Path(f"{tmp_path / 's.db'}{suffix}").unlink(missing_ok=True)
    with SQLiteStore(tmp_path / "s.db") as store:
        ingest(store, tmp_path, refund=REFUND.replace("30", "60"))
        pipeline = cached(store, tmp_path)
        trace = ask(pipeline)
        assert store.index_version == 1 and trace.cached == ()
    assert "60 days" in trace.answer.text


DENSE = ["retrieval.bm25.enabled=false", "chunking.tokenizer=regex", "rerank.method=none",
         "generation.semantic_weight=0", "context.tokenizer=regex", "governance.withhold=false"]


@pytest.mark.parametrize("top_k, invalidated", [(1, False), (10, True)])
def test_a_dense_entry_is_invalidated_by_new_content_only_when_it_could_enter(tmp_path, top_k, invalidated):
    """A full dense list (top_k 1) is entered only by a chunk at least as near the question as its
    lowest score; a list that is not full (top_k 10 of 3 chunks) by any new chunk."""
    encoder = HashingEncoder()
    settings = [*DENSE, f"retrieval.dense.top_k={top_k}"]
    with SQLiteStore(tmp_path / "s.db") as store:
        build_ingestor(store, load_settings(overrides=settings), encoder=encoder).run(corpus(tmp_path))
        pipeline = cached(store, tmp_path, settings, encoder=encoder)
        ask(pipeline)
        build_ingestor(store, load_settings(overrides=settings), encoder=encoder).run(
            corpus(tmp_path, extra={"tea.md": "Green tea."}))
        trace = ask(pipeline)
        tea = encoder.encode(["Green tea."], kind="passage").vectors[0] @ \
            encoder.encode([QUESTION], kind="query").vectors[0]
        floor = min(c.score for c in trace.stage("dense").items)
    assert trace.cached == (() if invalidated else ("rewrite", "dense", "rrf", "governance", "context", "extractive", "verify"))
    if not invalidated:
        assert tea < floor


def test_the_caches_bm25_of_a_chunk_is_fts5s(tmp_path):
    """The score a cache gives a changed chunk, to compare with a full list's lowest score, is
    the store's own (FTS5's bm25()) for every chunk the question matches."""
    from ragdx.stages.bm25 import BM25Retriever, query_terms
    from ragdx.store.cache import _bm25, _chunk_tokens
    with SQLiteStore(tmp_path / "s.db") as store:
        ingest(store, tmp_path, extra={"late.md": "# Late refunds\n\nLate deliveries of refunds: days and days.\n"})
        ranked = BM25Retriever(store, top_k=10, prefix_weight=0.5).run(Query("q", QUESTION, Principal()))
        phrases = [t for raw in query_terms(QUESTION) for t in sorted(fts5_terms([raw]))]
        chunks = store.chunks_by_id([c.chunk_id for c in ranked.items])
        n_rows, avgdl, df = store.keyword_statistics(phrases)
        assert n_rows == len(store.chunks()) and df["refund"] == 2
        for item in ranked.items:
            [(counts, size)] = _chunk_tokens([chunks[item.chunk_id]])
            assert _bm25(phrases, counts, size, weights=(0.5, 1.0), n_rows=n_rows, avgdl=avgdl,
                         df=df) == pytest.approx(item.score, rel=1e-9)
    assert len(ranked.items) == 2


@pytest.mark.parametrize("new, invalidated", [
    ("Are refunds accepted within 30 days of delivery? Refunds are accepted within 30 days of delivery.", True),
    ("Delivery of tea.", False)])
def test_a_full_keyword_list_is_invalidated_only_by_a_chunk_scoring_at_least_its_lowest(tmp_path, new, invalidated):
    settings = [*SETTINGS, "retrieval.bm25.top_k=1", "governance.withhold=false"]
    fillers = {f"filler{n}.md": f"Garden note {n}: roses and tulips." for n in range(8)}  # idf needs a corpus
    with SQLiteStore(tmp_path / "s.db") as store:
        ingest(store, tmp_path, extra=fillers)
        pipeline = cached(store, tmp_path, settings)
        ask(pipeline)
        ingest(store, tmp_path, extra={**fillers, "new.md": new})
        dropped = pipeline.cache.sync(store)
        fresh = build_pipeline(store, load_settings(overrides=settings)).run(Query("q", QUESTION, Principal()))
    assert dropped == (2 if invalidated else 0)
    assert (fresh.stage("bm25").items[0].doc_id == "new.md") is invalidated


def test_ragdx_run_reports_the_hit_rate_and_the_time_saved(tmp_path, capsys):
    store = str(tmp_path / "s.db")
    sets = sum((["--set", s] for s in SETTINGS), [])
    assert main(["ingest", "--store", store, str(corpus(tmp_path)), *sets]) == 0
    queries = write(tmp_path / "q.jsonl", "".join(json.dumps(
        {"id": f"q{n}", "question": q, "required": [[{"doc": "refund.md", "quote": "Refunds are accepted"}]]}) + "\n"
        for n, q in enumerate([QUESTION, "Are refunds accepted?"])))
    run = ["run", "--store", store, "--queries", str(queries), *sets]
    assert main([*run, "--out", str(tmp_path / "r1")]) == 0
    assert "cache: 0 of 2 answers from the answer cache (0%)" in capsys.readouterr().out
    assert main([*run, "--out", str(tmp_path / "r2")]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("cache: "))
    assert line.startswith("cache: 2 of 2 answers from the answer cache (100%), 0 retrievals from the retrieval "
                           "cache, 0 cached results refused by their recheck; ")
    traces = [json.loads(x) for x in (tmp_path / "r2" / "traces.jsonl").read_text().splitlines()]
    assert [t["cache"]["stages"] for t in traces] == [list(STAGES)] * 2
    assert main([*run, "--out", str(tmp_path / "r3"), "--set", "cache.enabled=false"]) == 0
    assert "cache: " not in capsys.readouterr().out
    # the served run's latency is its own: every served stage took 0 s, and the report says so
    first = [json.loads(x) for x in (tmp_path / "r1" / "traces.jsonl").read_text().splitlines()]
    assert all(s["seconds"] == 0.0 for t in traces for s in t["stages"]) and len(traces[0]["stages"]) == len(STAGES)
    assert sum(s["seconds"] for s in first[0]["stages"]) > 0
    metrics = json.loads((tmp_path / "r2" / "metrics.json").read_text())["overall"]["metrics"]
    assert metrics["latency_ms total"]["p50"] == 0.0
    report = (tmp_path / "r2" / "report.html").read_text()
    assert "2 of 2 served in part or whole by the result cache" in report
    assert "From the result cache: " + ", ".join(STAGES) in report
    assert "served in part or whole" not in (tmp_path / "r1" / "report.html").read_text()



def test_a_durable_run_continues_with_the_cache_turned_off(tmp_path, capsys):
    """Whether results are cached is not part of a run's identity: a run started with the cache
    resumes without it."""
    store = str(tmp_path / "s.db")
    sets = sum((["--set", s] for s in SETTINGS), [])
    assert main(["ingest", "--store", store, str(corpus(tmp_path)), *sets]) == 0
    queries = write(tmp_path / "q.jsonl", json.dumps({"id": "q0", "question": QUESTION}) + "\n")
    run = ["run", "--store", store, "--queries", str(queries), "--out", str(tmp_path / "r"), *sets]
    assert main(run) == 0
    capsys.readouterr()
    assert main([*run, "--set", "cache.enabled=false"]) == 0
    assert "finished, nothing left to do (1 published, 0 failed)" in capsys.readouterr().out


def test_a_rewritten_question_depends_on_every_change(tmp_path):
    """A question searched with rewrites (or by the multi-hop path) read more than its trace's
    lists show: its entries are dropped by any change; one searched as asked is not."""
    from ragdx.caching import dependencies
    from ragdx.types import Rewrite, RewriteKind, Rewritten
    with SQLiteStore(tmp_path / "s.db") as store:
        ingest(store, tmp_path)
        pipeline = build_pipeline(store, load_settings(overrides=SETTINGS))
        trace = pipeline.run(Query("q", QUESTION, Principal()))
    rewritten = next(s for s in trace.stages if isinstance(s, Rewritten))
    assert rewritten.rewrites == () and not dependencies(pipeline, trace.query, trace.stages).any_change
    widened = Rewritten(rewritten.stage, QUESTION, (Rewrite("refund window", RewriteKind.parse(list(RewriteKind)[0].value)),),
                        "single")
    outputs = tuple(widened if s is rewritten else s for s in trace.stages)
    deps = dependencies(pipeline, trace.query, outputs)
    assert deps.any_change and deps.docs == frozenset({"refund.md"})


def test_a_changed_generator_is_not_served_the_former_ones_answer(tmp_path, monkeypatch):
    # a code change with the same config (a ragdx upgrade, an edited custom stage): the answer is
    # computed again, the retrieval (whose code did not change) is still served
    from ragdx import caching
    with SQLiteStore(tmp_path / "s.db") as store:
        ingest(store, tmp_path)
        ask(cached(store, tmp_path))
        digest = caching.code_digest
        monkeypatch.setattr(caching, "code_digest",
                            lambda module: "edited" if module == "ragdx.stages.generate" else digest(module))
        trace = ask(cached(store, tmp_path))
    assert trace.cached == ("rewrite", "bm25", "rrf", "governance")


def test_the_code_digest_follows_the_modules_source(tmp_path, monkeypatch):
    import importlib
    import sys
    from ragdx.caching import code_digest
    write(tmp_path / "my_stage.py", "VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_stage", raising=False)
    importlib.import_module("my_stage")
    before = code_digest("my_stage")
    write(tmp_path / "my_stage.py", "VALUE = 2  # edited\n")
    assert code_digest("my_stage") != before and len(before) == 16
    assert code_digest("no_such_module_here") == "no_such_module_here"


def test_every_ragdx_stage_is_keyed_by_all_of_ragdxs_source(tmp_path):
    # a helper module changes a stage's results too (ragdx.text's number rule, the generator's)
    from ragdx.caching import code_digest, tree_digest
    from pathlib import Path
    import ragdx
    package = tree_digest(str(Path(ragdx.__file__).resolve().parent))
    assert code_digest("ragdx.stages.generate") == code_digest("ragdx.text") == package
    assert package not in ("ragdx.stages.generate", "ragdx.text") and len(package) == 16
    write(tmp_path / "pkg" / "a.py", "A = 1\n")
    write(tmp_path / "pkg" / "sub" / "b.py", "B = 1\n")
    before = tree_digest(str(tmp_path / "pkg"))
    write(tmp_path / "pkg" / "sub" / "b.py", "B = 2\n")
    tree_digest.cache_clear()
    assert tree_digest(str(tmp_path / "pkg")) != before
