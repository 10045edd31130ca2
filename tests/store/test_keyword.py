"""The keyword channel's posting matrix (store/keyword.py): FTS5's bm25() exactly, with an edit, a
deletion and an access revocation visible to the next query, in this process and another."""

import dataclasses
import math
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from ragdx.store.sqlite import SQLiteStore
from ragdx.types import Chunk, ChunkKind, Document, DocStatus, ParsedDocument, Section, VersionFilter

K1, B = 1.2, 0.75
PUBLIC = ("public",)
CURRENT = VersionFilter()


def add(store: SQLiteStore, doc_id: str, text: str, version: str = "v1", acl=PUBLIC) -> Document:
    """A one-chunk document whose chunk is exactly ``text`` (no retrieval prefix)."""
    doc = Document(doc_id, version, f"hash-{doc_id}-{version}", f"{doc_id}.txt", acl=acl)
    section = Section(f"{doc_id}@{version}#s", doc_id, version, 0, len(text), (), 0, None)
    chunk = Chunk(f"{doc_id}@{version}#0", doc_id, version, 0, len(text), text, ChunkKind.TEXT, (),
                  section.id)
    parsed = ParsedDocument(text, (), "", "text", "test")
    with store.transaction():
        store.insert_version(doc, text, parsed, (section,), (chunk,), "test-chunker")
    return doc


def bm25(idf: float, f: float, length: int, avgdl: float) -> float:
    """One phrase's share of FTS5's bm25(), as fts5_aux.c computes it."""
    return idf * ((f * (K1 + 1)) / (f + K1 * (1 - B + B * length / avgdl)))


def idf(n: int, hits: int) -> float:
    value = math.log((n - hits + 0.5) / (hits + 0.5))
    return value if value > 0 else 1e-6


def search(store: SQLiteStore, terms: list[str], groups=PUBLIC, limit: int = 10):
    return [(c.doc_id, c.version, s) for c, s in store.bm25(terms, groups, limit, (1.0, 1.0), CURRENT)]


def reference(store: SQLiteStore, terms: list[str], groups=PUBLIC, limit: int = 10):
    return [(c.doc_id, c.version, s) for c, s in store.fts5_bm25(terms, groups, limit, (1.0, 1.0), CURRENT)]


@pytest.fixture
def fruit(tmp_path):
    """Five one-chunk documents: N = 5, 14 tokens, avgdl 2.8."""
    store = SQLiteStore(tmp_path / "store.db")
    add(store, "a", "apple banana")
    add(store, "b", "apple cherry cherry")
    add(store, "c", "date")
    add(store, "d", "elder fig grape")
    add(store, "e", "kiwi lime mango papaya quince")
    yield store
    store.close()


def test_scores_are_fts5s_bm25_by_hand(fruit):
    assert search(fruit, ["cherry", "apple"]) == [
        ("b", "v1", bm25(idf(5, 1), 2, 3, 14 / 5) + bm25(idf(5, 2), 1, 3, 14 / 5)),
        ("a", "v1", bm25(idf(5, 2), 1, 2, 14 / 5))]
    assert search(fruit, ["cherry", "apple"]) == reference(fruit, ["cherry", "apple"])


def test_an_edit_is_in_the_next_querys_statistics(fruit, tmp_path):
    reader = SQLiteStore(tmp_path / "store.db", mode="read")  # another connection, its own mirror
    assert search(reader, ["date"]) == [("c", "v1", bm25(idf(5, 1), 1, 1, 14 / 5))]
    add(fruit, "c", "date date plum", version="v2")
    with fruit.transaction():
        fruit.set_status("c", "v1", DocStatus.SUPERSEDED, "edited")
    # v1 is superseded, not gone: FTS5 still counts it (N = 6, 17 tokens, "date" in 2 rows)
    expected = [("c", "v2", bm25(idf(6, 2), 2, 3, 17 / 6))]
    assert search(fruit, ["date"]) == search(reader, ["date"]) == expected
    assert search(reader, ["date"]) == reference(reader, ["date"])
    reader.close()


def test_a_deletion_is_in_the_next_querys_statistics(fruit, tmp_path):
    reader = SQLiteStore(tmp_path / "store.db", mode="read")
    assert [d for d, _, _ in search(reader, ["apple"])] == ["a", "b"]
    with fruit.transaction():
        fruit.delete_document("b")
    expected = [("a", "v1", bm25(idf(4, 1), 1, 2, 11 / 4))]  # N = 4, 11 tokens
    assert search(reader, ["apple", "cherry"]) == search(fruit, ["apple", "cherry"]) == expected
    reader.close()


def test_a_revoked_chunk_is_gone_from_the_next_query_and_still_counted(fruit, tmp_path):
    reader = SQLiteStore(tmp_path / "store.db", mode="read")
    assert [d for d, _, _ in search(reader, ["apple"])] == ["a", "b"]
    revoked = dataclasses.replace(fruit.version("b", "v1").document, acl=("staff",))
    with fruit.transaction():
        assert fruit.update_attributes(revoked) == ["acl"]
    # the row is still in N and in the df of "apple": only who may read it changed
    assert search(reader, ["apple"]) == [("a", "v1", bm25(idf(5, 2), 1, 2, 14 / 5))]
    assert [d for d, _, _ in search(reader, ["apple"], groups=("staff",))] == ["b"]
    assert search(reader, ["apple"], groups=("public", "staff")) == [
        ("a", "v1", bm25(idf(5, 2), 1, 2, 14 / 5)), ("b", "v1", bm25(idf(5, 2), 1, 3, 14 / 5))]
    reader.close()


def test_floored_terms_still_rank_like_fts5(fruit):
    # "apple" ends up in 4 of 8 rows: its idf, log(4.5 / 4.5) = 0, is floored to 1e-6, and a row
    # holding only floored terms is still a match, below every row with a real term
    add(fruit, "f", "apple apple apple")
    add(fruit, "g", "date fig")
    add(fruit, "h", "apple kiwi")
    found = search(fruit, ["apple", "date", "fig"], limit=10)
    assert found == reference(fruit, ["apple", "date", "fig"], limit=10)
    avgdl = 21 / 8
    assert found[:3] == [("g", "v1", bm25(idf(8, 2), 1, 2, avgdl) + bm25(idf(8, 2), 1, 2, avgdl)),
                         ("c", "v1", bm25(idf(8, 2), 1, 1, avgdl)),
                         ("d", "v1", bm25(idf(8, 2), 1, 3, avgdl))]
    assert found[3:] == [("f", "v1", bm25(1e-6, 3, 3, avgdl)), ("a", "v1", bm25(1e-6, 1, 2, avgdl)),
                         ("h", "v1", bm25(1e-6, 1, 2, avgdl)), ("b", "v1", bm25(1e-6, 1, 3, avgdl))]
    # the top 2 come from the real terms' first pass, the floored term added to the candidates
    assert search(fruit, ["apple", "date", "fig"], limit=2) == found[:2]
    # the floored terms decide the top 2 of a search for "apple" alone: every holder is scored
    assert search(fruit, ["apple"], limit=2) == [("f", "v1", bm25(1e-6, 3, 3, avgdl)),
                                                 ("a", "v1", bm25(1e-6, 1, 2, avgdl))]


def test_a_change_the_log_does_not_name_is_found_by_the_totals_check(fruit, tmp_path):
    assert [d for d, _, _ in search(fruit, ["apple"])] == ["a", "b"]
    db = sqlite3.connect(tmp_path / "store.db")  # behind the store's back: no log entry
    db.execute("DELETE FROM chunks WHERE doc_id = 'b'")
    db.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'index_version'")
    db.commit()
    db.close()
    assert search(fruit, ["apple"]) == [("a", "v1", bm25(idf(4, 1), 1, 2, 11 / 4))]


def test_versions_named_by_the_question_are_searched_with_the_current_ones(fruit):
    add(fruit, "c", "date plum", version="2.0")
    with fruit.transaction():
        fruit.set_status("c", "v1", DocStatus.SUPERSEDED, "edited")
    current = [v for _, v, _ in search(fruit, ["date"])]
    named = fruit.bm25(["date"], PUBLIC, 10, (1.0, 1.0), VersionFilter(True, ("v1",)))
    assert current == ["2.0"]
    assert sorted(c.version for c, _ in named) == ["2.0", "v1"]


KILLED_WRITER = textwrap.dedent("""
    import sys, time
    from ragdx.store.sqlite import SQLiteStore
    store = SQLiteStore(sys.argv[1], mode="write")
    with store.transaction():
        store.delete_document("b")
        print("deleted", flush=True)
        time.sleep(60)
""")


@pytest.mark.slow
def test_a_writer_killed_mid_write_leaves_keyword_search_consistent(fruit, tmp_path):
    reader = SQLiteStore(tmp_path / "store.db", mode="read")
    before = search(reader, ["apple", "cherry"])
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(tmp_path / "store.db")],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "deleted"
    assert search(reader, ["apple", "cherry"]) == before  # not committed: not seen
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert search(reader, ["apple", "cherry"]) == before == reference(reader, ["apple", "cherry"])
    assert [d for d, _, _ in before] == ["b", "a"]
    # a writer killed right after its commit: the deletion is what the next query sees
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER.replace("time.sleep(60)", "pass")
                             + "print('committed', flush=True)\ntime.sleep(60)\n",
                             str(tmp_path / "store.db")], stdout=subprocess.PIPE, text=True)
    assert [proc.stdout.readline().strip() for _ in range(2)] == ["deleted", "committed"]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert search(reader, ["apple", "cherry"]) == [("a", "v1", bm25(idf(4, 1), 1, 2, 11 / 4))]
    assert search(reader, ["apple", "cherry"]) == reference(reader, ["apple", "cherry"])
    reader.close()


def test_a_deletion_below_an_eighth_of_the_rows_is_buried_with_exact_statistics(fruit, tmp_path):
    for i in range(5):
        add(fruit, f"more{i}", "banana split")  # N = 10, 24 tokens
    reader = SQLiteStore(tmp_path / "store.db", mode="read")
    assert [d for d, _, _ in search(reader, ["banana", "cherry"])][:2] == ["b", "a"]
    with fruit.transaction():
        fruit.delete_document("b")
    found = search(reader, ["banana", "cherry"])
    assert reader._keyword.buried == 1  # the row is out of N and df, its postings still there
    avgdl = 21 / 9
    assert found[0] == ("a", "v1", bm25(idf(9, 6), 1, 2, avgdl))
    assert found == reference(reader, ["banana", "cherry"])
    assert [d for d, _, _ in found] == ["a", "more0", "more1", "more2", "more3", "more4"]
    reader.close()


def test_max_score_ranks_as_fts5_and_as_the_full_pass(tmp_path, monkeypatch):
    """480 rows of words drawn with Zipf's law (rare words decide, common words only add): the
    rows MaxScore leaves unscored cannot reach the top 10, so the top 10 and their scores are
    FTS5's and the full pass's, ties ordered by row alike, whatever the groups."""
    import random

    from ragdx.store import keyword
    monkeypatch.setattr(keyword, "MAX_SCORE_POSTINGS", 0)  # (482 rows: the dense pass would decide alone)
    rng = random.Random(7)
    vocab = [f"w{i}" for i in range(300)]
    weights = [1 / (i + 1) for i in range(300)]
    store = SQLiteStore(tmp_path / "store.db")
    for n in range(480):
        words = rng.choices(vocab, weights, k=rng.randrange(3, 15))
        add(store, f"d{n}", " ".join(words), acl=("staff",) if n % 7 == 0 else PUBLIC)
    add(store, "twin", "w150 w151 w3")  # a tie with its twin on every score
    add(store, "twin2", "w150 w151 w3")
    queries = [rng.sample(vocab[:40], 2) + rng.sample(vocab[100:], 4) for _ in range(60)] + [["w150", "w151", "w3"]]
    decided = []
    real = keyword.KeywordIndex._max_score

    def spy(self, *args):
        found, floor = real(self, *args)
        decided.append("pruned" if found is not None else "floor" if floor > 0 else "full")
        return found, floor
    monkeypatch.setattr(keyword.KeywordIndex, "_max_score", spy)
    everyone = ("public", "staff")
    for groups in (PUBLIC, everyone):
        for limit in (3, 10):
            got = [search(store, q, groups, limit) for q in queries]
            assert got == [reference(store, q, groups, limit) for q in queries]
            assert got[-1][:2] == [("twin", "v1", got[-1][0][2]), ("twin2", "v1", got[-1][0][2])]
    # each way was taken: MaxScore alone, the full pass above its floor, the full pass alone
    assert min(decided.count("pruned"), decided.count("floor"), decided.count("full")) >= 10
    monkeypatch.setattr(keyword.KeywordIndex, "_max_score", lambda self, *args: (None, 0.0))
    assert [search(store, q, everyone) for q in queries] == got  # the full pass alone
    store.close()


def test_a_count_beyond_sixteen_bits_is_kept_exact(tmp_path):
    """The build keeps counts in 16 bits while they fit: a word said 70,000 times in one chunk
    must still score as FTS5 scores it (N = 2, avgdl 35,001)."""
    store = SQLiteStore(tmp_path / "store.db")
    add(store, "a", " ".join(["cherry"] * 70_000) + " apple")
    add(store, "b", "cherry")
    n, avgdl = 2, (70_001 + 1) / 2
    got = search(store, ["cherry"])
    assert got == reference(store, ["cherry"])
    by_doc = {doc: score for doc, _, score in got}
    assert by_doc["a"] == pytest.approx(bm25(idf(n, 2), 70_000, 70_001, avgdl), rel=1e-9)
    assert by_doc["b"] == pytest.approx(bm25(idf(n, 2), 1, 1, avgdl), rel=1e-9)


@pytest.mark.parametrize("share", [1e9, 0.05])
def test_edits_in_the_delta_segment_rank_as_fts5(tmp_path, monkeypatch, share):
    """Rows added by a patch go to a delta segment (merged into the main one when it has grown
    past DELTA_SHARE of it): with the delta never merged (1e9) and merged now and then (0.05),
    each query after an edit, a new version or a deletion ranks and scores as FTS5 does."""
    import random

    from ragdx.store import keyword
    monkeypatch.setattr(keyword, "DELTA_SHARE", share)
    monkeypatch.setattr(keyword, "MAX_SCORE_POSTINGS", 0)  # MaxScore's paths read the delta too
    rng = random.Random(11)
    vocab = [f"w{i}" for i in range(120)]
    weights = [1 / (i + 1) for i in range(120)]
    store = SQLiteStore(tmp_path / "store.db")
    for n in range(150):
        add(store, f"d{n}", " ".join(rng.choices(vocab, weights, k=rng.randrange(3, 12))))
    reader = SQLiteStore(tmp_path / "store.db", mode="read")
    queries = [rng.sample(vocab[:20], 1) + rng.sample(vocab[20:], 3) for _ in range(12)]
    assert [search(reader, q) for q in queries] == [reference(reader, q) for q in queries]
    delta_sizes, merged = [], 0
    for step in range(24):
        with store.transaction():
            if step % 4 == 3:
                store.delete_document(f"d{step}")
        if step % 4 != 3:  # a new document, or a new version of an old one (with new words)
            words = rng.choices(vocab, weights, k=rng.randrange(3, 12)) + [f"new{step}"]
            if step % 2:
                add(store, f"d{step}", " ".join(words), version="v2")
            else:
                add(store, f"n{step}", " ".join(words))
        got = [search(reader, q + [f"new{step}"]) for q in queries]
        assert got == [reference(reader, q + [f"new{step}"]) for q in queries], step
        if step % 4 != 3:  # the new word is in the new row alone
            assert [(d, v) for d, v, _ in search(reader, [f"new{step}"])] == [
                (f"d{step}", "v2") if step % 2 else (f"n{step}", "v1")]
        delta_sizes.append(int(reader._keyword.d_pos.size))
        merged += delta_sizes[-1] < max(delta_sizes[:-1], default=0)
    if share > 1:
        assert delta_sizes == sorted(delta_sizes) and delta_sizes[-1] > 0  # never merged
    else:
        assert merged >= 2  # measured: 3 merges, the delta at most 45 postings
    reader.close()
    store.close()
