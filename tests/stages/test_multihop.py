"""The multi-hop loop: evidence slots, entity verification, and every bound it stops at."""

import json
import time

import pytest

from ragdx.build import build_pipeline
from ragdx.config import load_settings
from ragdx.ingest.ingestor import Ingestor
from ragdx.queryset import load_queries
from ragdx.stages.bm25 import BM25Retriever
from ragdx.stages.dense import DenseRetriever
from ragdx.stages.multihop import MultiHop, elapsed_days
from ragdx.stages.routed import RoutedRewrite
from ragdx.store.sqlite import SQLiteStore
from ragdx.types import Query, SlotState
from tests.conftest import EXAMPLE, write

ORDER = "I reported a quality problem with order NW-1042. Can I still get a refund?"


class Loop:
    """A multi-hop loop over one BM25 channel."""

    def __init__(self, store, **bounds):
        self.hop, self.channels = MultiHop(store, **bounds), [BM25Retriever(store, top_k=20)]

    def run(self, query):
        return self.hop.run(query, self.channels)


def loop(store, **bounds):
    return Loop(store, **bounds)


def test_decomposition_declares_the_slots():
    hop = MultiHop(None)
    slots = hop.decompose(Query("q", ORDER))
    assert [(s.name, s.query, s.entity, s.state) for s in slots] == [
        ("order NW-1042", "I reported a quality problem with order NW-1042.", "NW-1042", SlotState.UNKNOWN),
        ("question", "Can I still get a refund?", "", SlotState.UNKNOWN)]
    person = hop.decompose(Query("q", "Can I still return my order for a refund?"))
    assert [(s.name, s.state) for s in person] == [("your order", SlotState.NEEDS_PERSON),
                                                   ("question", SlotState.UNKNOWN)]
    assert person[0].note == "the question names no order number: only a person can look it up"
    assert [s.name for s in hop.decompose(Query("q", "How long is the warranty?"))] == ["question"]
    assert [s.query for s in hop.decompose(Query("q", "How was order NW-1024 paid, and how long does a refund to "
                                                      "that payment method take?"))] == [
        "How was order NW-1024 paid?", "How long does a refund to that payment method take?"]
    assert [s.name for s in hop.decompose(Query("q", "I lost my receipt for the tent I ordered online. Can I "
                                                     "still make a warranty claim?"))] == ["question 1", "question 2"]


def test_elapsed_days_between_stated_dates():
    assert elapsed_days("delivered on 2 March 2026; reported on 6 April 2026") == [35.0]
    assert elapsed_days("from 2025-12-30 to 2026-01-02, not 30 February 2026") == [3.0]
    assert elapsed_days("delivered on 2 March 2026") == []


def test_the_order_facts_fill_their_slot_and_bridge_to_the_rule(example_store):
    result = loop(example_store).run(Query("q", ORDER))
    order = result.slots[0]
    assert order.state is SlotState.KNOWN and order.doc_id == "orders/records.md"
    assert order.value == ("Order NW-1042 contains one Ridgeline rain jacket. It was delivered on 2 March 2026. "
                           "On 6 April 2026 the customer reported a quality defect: a seam of the jacket leaks. "
                           "Order NW-1042 was paid by credit card.")
    assert result.hops[0].filled == order.chunk_id and result.hops[0].progress
    # the next hop carries what the facts bring: the days elapsed (and, to a slot that refers
    # back, the names the question lacks)
    assert result.hops[1].slot == "question" and result.hops[1].query == "Can I still get a refund? | 35 days"
    assert result.stopped == "every slot is settled"


@pytest.fixture
def wrong_record_store(tmp_path):
    """A corpus that holds order NW-1024 but not NW-1042, and the refund rule."""
    docs = {"orders.md": "# Order records\n\n## Order NW-1024\n\nOrder NW-1024 contains one Summit 2 tent. A quality "
                         "problem was reported. Order NW-1024 was paid with PayPal.",
            "refund.md": "# Refund policy\n\nRefunds are accepted within 30 days of delivery."}
    for name, text in docs.items():
        write(tmp_path / name, text)
    manifest = write(tmp_path / "manifest.jsonl", "".join(json.dumps({"doc_id": n, "path": n}) + "\n" for n in docs))
    store = SQLiteStore(tmp_path / "store.db")
    Ingestor(store).run(manifest)
    yield store
    store.close()


def test_a_wrong_first_hop_entity_is_caught_by_verification(wrong_record_store):
    result = loop(wrong_record_store).run(Query("q", ORDER))
    first = result.hops[0]
    chunk = next(c for c in wrong_record_store.chunks("orders.md") if "NW-1024 contains" in c.text)
    assert first.candidates[0] == chunk.id  # the best match is the other order
    assert first.rejected[0] == f"{chunk.id}: names NW-1024, not NW-1042" and first.filled is None
    assert not first.progress and first.reason == "no candidate passed verification"
    # it steers nothing: no later hop searches with its facts, and its slot stays unknown
    assert [h.slot for h in result.hops] == ["order NW-1042", "question", "order NW-1042"]
    assert not any("PayPal" in h.query or "Summit" in h.query for h in result.hops)
    assert result.hops[1].query == "Can I still get a refund?" and result.hops[1].filled is not None
    assert {s.name: s.state for s in result.slots} == {"order NW-1042": SlotState.UNKNOWN,
                                                       "question": SlotState.KNOWN}
    assert result.stopped == "every unknown slot was searched twice"


def test_the_loop_stops_at_each_bound_and_lists_what_is_unknown(example_store):
    query = Query("q", ORDER)
    hops = loop(example_store, max_hops=1).run(query)
    assert hops.stopped == "max hops (1)" and len(hops.hops) == 1
    assert [s.name for s in hops.slots if s.state is SlotState.UNKNOWN] == ["question"]
    queries = loop(example_store, max_queries=1).run(query)
    assert queries.stopped == "max queries (1)" and len(queries.hops) == 1
    tokens = loop(example_store, budget_tokens=1).run(query)
    assert len(tokens.hops) == 1 and tokens.stopped == f"token budget ({tokens.hops[0].tokens} of 1 tokens read)"
    assert tokens.hops[0].tokens == sum(c.token_count for c in example_store.chunks_by_id(
        list(tokens.hops[0].candidates)).values())
    latency = loop(example_store, budget_ms=1e-9).run(query)
    assert latency.hops == () and latency.stopped.startswith("latency budget (")
    assert [s.state for s in latency.slots] == [SlotState.UNKNOWN, SlotState.UNKNOWN]
    stuck = loop(example_store).run(Query("q", "How was order ZZ-9999 paid, and when was order ZZ-9998 delivered?"))
    assert stuck.stopped == "no progress in 2 hops" and [h.progress for h in stuck.hops] == [False, False]
    assert [(s.name, s.state) for s in stuck.slots] == [("order ZZ-9999", SlotState.UNKNOWN),
                                                        ("order ZZ-9998", SlotState.UNKNOWN)]


def test_the_multi_hop_path_answers_from_the_order_facts_the_rule_and_the_exception(example_store):
    pipeline = build_pipeline(example_store, load_settings(overrides=["retrieval.dense.enabled=false"]))
    query = next(q for q in load_queries(EXAMPLE / "queries.jsonl") if q.id == "q-order-quality-refund")
    trace = pipeline.run(query)
    rewritten = trace.rewritten
    assert rewritten.route == "multi-hop" and rewritten.slots_in(SlotState.UNKNOWN) == ()
    cited = {trace.context.unit(c).doc_id for c in trace.answer.citations}
    assert {"orders/records.md", "policies/quality.md"} <= cited and cited & {"policies/refund.md", "help/faq.html"}
    # a question that needs a person says so in the answer
    person = pipeline.run(Query("p", "Can I still return my order for a refund?"))
    assert person.rewritten.slots_in(SlotState.NEEDS_PERSON)[0].name == "your order"
    assert "your order: the question names no order number: only a person can look it up" in person.answer.missing


def test_a_multi_hop_trace_follows_the_trace_schema(example_store):
    jsonschema = pytest.importorskip("jsonschema")
    from pathlib import Path
    from ragdx.tracefile import trace_to_dict
    schema = json.loads((Path(__file__).resolve().parents[2] / "docs" / "schemas" / "trace.schema.json").read_text())
    pipeline = build_pipeline(example_store, load_settings(overrides=["retrieval.dense.enabled=false"]))
    trace = trace_to_dict(pipeline.run(Query("q", ORDER)))
    jsonschema.validate(trace, schema)
    rewrite = trace["stages"][0]
    assert rewrite["route"] == "multi-hop" and [h["hop"] for h in rewrite["hops"]] == [1, 2, 3]
    assert {"slot": "order NW-1042", "progress": True, "rejected": []}.items() <= rewrite["hops"][0].items()


def test_a_more_authoritative_source_replaces_a_fact_and_counts_as_progress(tmp_path):
    docs = {"crm.md": ("# Notes\n\nOrder NW-1042: a quality problem was reported by phone for order NW-1042.", 0),
            "ledger.md": ("# Ledger\n\nOrder NW-1042 was delivered on 2 March 2026; a refund is still open.", 2),
            "refund.md": ("# Refund policy\n\nCan I still get a refund? Refunds are accepted within 30 days of "
                          "delivery, and a refund is still possible for 30 days.", 0)}
    lines = []
    for name, (text, authority) in docs.items():
        write(tmp_path / name, text)
        lines.append(json.dumps({"doc_id": name, "path": name, "metadata": {"authority": authority}}))
    store = SQLiteStore(tmp_path / "store.db")
    Ingestor(store).run(write(tmp_path / "manifest.jsonl", "\n".join(lines) + "\n"))
    result = loop(store).run(Query("q", ORDER))
    store.close()
    assert [(h.slot, h.progress) for h in result.hops][:2] == [("order NW-1042", True), ("question", True)]
    assert result.hops[0].reason == "filled order NW-1042 from crm.md"
    assert result.hops[1].reason == ("filled question from refund.md; raised the source's authority for "
                                     "order NW-1042 (ledger.md)")
    order = next(s for s in result.slots if s.name == "order NW-1042")
    assert order.doc_id == "ledger.md" and order.value.startswith("Order NW-1042 was delivered on 2 March 2026")


class ColdStart:
    """An encoder whose first call takes ``seconds`` (a model's load), the later ones nothing."""

    def __init__(self, encoder, seconds):
        self.encoder, self.seconds, self.calls = encoder, seconds, 0

    def __getattr__(self, name):
        return getattr(self.encoder, name)

    def encode(self, texts, *, kind="passage"):
        self.calls += 1
        if self.calls == 1:
            time.sleep(self.seconds)
        return self.encoder.encode(texts, kind=kind)


def test_a_channels_cold_start_is_not_charged_to_the_latency_budget(small):
    store, encoder, _ = small
    cold = ColdStart(encoder, 0.5)
    hop = MultiHop(store, budget_ms=400)
    result = hop.run(Query("q", "How long do refunds take, and when are parcels delivered?"),
                     [DenseRetriever(store, cold, top_k=5)])
    # the 0.5 s load happened before the clock started: the 400 ms budget still allowed the hops
    assert cold.calls > 1 and len(result.hops) >= 1
    assert not result.stopped.startswith("latency budget")


def test_auto_routes_a_question_naming_an_order_down_the_multi_hop_path(example_store):
    stage = RoutedRewrite(multihop=MultiHop(example_store))
    # one slot, the record: only the loop checks that a chunk names NW-1042 and not NW-1024
    assert [s.name for s in stage.multihop.decompose(Query("q", "When was order NW-1042 delivered?"))] == [
        "order NW-1042"]
    assert stage.routes(Query("q", "When was order NW-1042 delivered?")) == "multi-hop"
    assert stage.routes(Query("q", "How long is the warranty?")) == "single"
    assert stage.routes(Query("q", "How was order NW-1024 paid, and how long does a refund take?")) == "multi-hop"


def test_slot_facts_answer_an_abstention_on_scores_but_never_one_on_a_name_no_source_mentions():
    """A compound question's parts may be answered by the facts its slots found when no single
    sentence answered it; but when the question names something no source mentions
    ("ST_DWithin"), the facts found for its parts are about something else: the abstention stands."""
    from ragdx.stages.answerable import ABSTAINED_BY_NAME
    from ragdx.stages.multihop import answer_with_slots
    from ragdx.types import Answer, Context, ContextUnit, Slot
    unit = ContextUnit("S1", "gist.html", "17", 0, 60, "GiST indexes support distance searches.", "GiST", (),
                       ("c1",), 1, 6)
    context = Context("context", (unit,), (), 1200, 6, "words")
    slot = Slot("index", "does the GiST index serve it", SlotState.KNOWN, chunk_id="c1", doc_id="gist.html",
                version="17", value="GiST indexes support distance searches.")
    on_scores = Answer("extractive", "I cannot answer this from the sources: ...", (), True, ("distance",))
    answered = answer_with_slots(on_scores, context, [slot])
    assert (answered.abstained, [c.text for c in answered.claims]) == \
        (False, ["GiST indexes support distance searches."])
    on_name = Answer("extractive", "I cannot answer this from the sources: no source the asker may read "
                     "mentions ST_DWithin.", (), True, ("ST_DWithin",), config={ABSTAINED_BY_NAME: True})
    assert answer_with_slots(on_name, context, [slot]) == on_name


def test_slot_facts_add_only_the_sentences_the_answer_does_not_state_yet():
    """The order's paragraph fills a slot; the answer already says how the order was paid: that
    sentence is not said twice, the others are added one claim each, citing the order's unit."""
    from ragdx.stages.multihop import answer_with_slots
    from ragdx.types import Answer, Claim, Context, ContextUnit, Slot
    paragraph = ("Order NW-1024 contains one Summit 2 tent. It was delivered on 10 February 2026. "
                 "Order NW-1024 was paid with PayPal.")
    unit = ContextUnit("S1", "orders.md", "v", 0, len(paragraph), paragraph, "Orders", (), ("c1",), 1, 20)
    context = Context("context", (unit,), (), 1200, 20, "words")
    slot = Slot("order", "how was the order paid", SlotState.KNOWN, chunk_id="c1", doc_id="orders.md",
                version="v", value=paragraph)
    said = Answer("extractive", "Order NW-1024 was paid with PayPal. [S1]",
                  (Claim("Order NW-1024 was paid with PayPal.", ("S1",)),), False, ())
    answered = answer_with_slots(said, context, [slot])
    assert [(c.text, c.citations) for c in answered.claims] == [
        ("Order NW-1024 was paid with PayPal.", ("S1",)), ("Order NW-1024 contains one Summit 2 tent.", ("S1",)),
        ("It was delivered on 10 February 2026.", ("S1",))]
    assert answered.text == ("Order NW-1024 was paid with PayPal. [S1] Order NW-1024 contains one Summit 2 tent. [S1] "
                             "It was delivered on 10 February 2026. [S1]")
    assert answered.config["slot_facts"] == 1
    # a slot the answer states whole adds nothing: the answer stands as it was
    whole = Answer("extractive", paragraph + " [S1]", (Claim(paragraph, ("S1",)),), False, ())
    assert answer_with_slots(whole, context, [slot]) == whole


def test_a_table_row_a_slot_found_replaces_another_row_of_that_table_the_answer_chose():
    """"How long does a refund to that payment method take?": the answer chose the cash-on-delivery
    row; the slot resolved the method (PayPal) and found its row: the other row goes, text and
    claim; a row of another unit stays."""
    from ragdx.stages.multihop import answer_with_slots
    from ragdx.types import Answer, Claim, Context, ContextUnit, Slot
    cod = "Payment method: Cash on delivery; Refund processing time: 10-14 business days; Fee: 2.50 EUR"
    paypal = "Payment method: PayPal; Refund processing time: 3-5 business days; Fee: none"
    other = "Payment method: Card; Fee: none"
    table = ContextUnit("S2", "timing.md", "v", 0, 200, f"{cod}\n{paypal}", "Timing", (), ("c2",), 2, 30)
    elsewhere = ContextUnit("S3", "fees.md", "v", 0, 40, other, "Fees", (), ("c3",), 3, 6)
    context = Context("context", (table, elsewhere), (), 1200, 36, "words")
    slot = Slot("time", "refund time for PayPal", SlotState.KNOWN, chunk_id="c2", doc_id="timing.md",
                version="v", value=paypal)
    chose = Answer("extractive", f"Order NW-1024 was paid with PayPal. [S1] {cod} [S2] {other} [S3]",
                   (Claim("Order NW-1024 was paid with PayPal.", ("S1",)), Claim(cod, ("S2",)), Claim(other, ("S3",))),
                   False, ())
    answered = answer_with_slots(chose, context, [slot])
    assert [c.text for c in answered.claims] == ["Order NW-1024 was paid with PayPal.", other, paypal]
    assert answered.text == f"Order NW-1024 was paid with PayPal. [S1] {other} [S3] {paypal} [S2]"
    # a fact names cash on delivery too: which row applies is not settled, both stay
    both = Answer("extractive", f"Paid with PayPal; cash on delivery was refused. [S1] {cod} [S2]",
                  (Claim("Paid with PayPal; cash on delivery was refused.", ("S1",)), Claim(cod, ("S2",))), False, ())
    assert [c.text for c in answer_with_slots(both, context, [slot]).claims] == [
        "Paid with PayPal; cash on delivery was refused.", cod, paypal]
    # no fact names PayPal: the slot's row is not the one the question is about either
    unkeyed = Answer("extractive", f"The order was paid. [S1] {cod} [S2]",
                     (Claim("The order was paid.", ("S1",)), Claim(cod, ("S2",))), False, ())
    assert [c.text for c in answer_with_slots(unkeyed, context, [slot]).claims] == ["The order was paid.", cod, paypal]
