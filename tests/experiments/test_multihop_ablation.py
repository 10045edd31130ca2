"""The bundled example's multi-hop questions: the single pass fails them, the routed multi-hop
path answers them, and the ablation report shows it."""

import json

from ragdx.build import build_ingestor
from ragdx.config import load_settings
from ragdx.experiments.ablate import ablate
from ragdx.queryset import load_queries
from ragdx.store.sqlite import SQLiteStore
from ragdx.testing.encoders import HashingEncoder
from tests.conftest import EXAMPLE


def test_the_routed_multi_hop_path_answers_what_the_single_pass_fails(tmp_path):
    # hashing vectors carry no meaning: the generator scores by words alone with them
    settings = load_settings(overrides=["generation.semantic_weight=0", "rewrite.route=single"])
    encoder = HashingEncoder(dim=256)
    store = SQLiteStore(tmp_path / "store.db")
    build_ingestor(store, settings, encoder).run(EXAMPLE / "manifest.jsonl")
    queries = load_queries(EXAMPLE / "queries.jsonl")
    result = ablate(store, settings, queries, ["routed:rewrite.route=auto"], tmp_path / "ab", progress=False,
                    encoder=encoder)
    routed = result.variants[0]
    # both are answered now, from every slot's evidence; with words alone the generator states
    # neither "Warranty claims require proof of purchase." nor the 90-day exception (it says
    # "After 90 days a defect can no longer be refunded ..."), and a cited unit holding the
    # sentence is not enough (issue 25): incomplete, at generation
    assert routed.changed == (("q-warranty-no-receipt", "wrong_abstention", "incomplete"),
                              ("q-order-quality-refund", "wrong_abstention", "incomplete"))
    # only the questions that need it take the multi-hop path, and every hop is in the trace
    rewrites = {t["query_id"]: t["stages"][0] for t in map(json.loads, (tmp_path / "ab" / "routed" / "traces.jsonl")
                                                             .read_text().splitlines())}
    multi = sorted(q for q, r in rewrites.items() if r["route"] == "multi-hop")
    assert multi == ["q-changed-mind-60d", "q-exchange-then-refund", "q-order-paypal-refund-time",
                     "q-order-quality-refund", "q-warranty-no-receipt"]
    assert all(r["searches"] == [r["original"]] and r["hops"] == [] for q, r in rewrites.items() if q not in multi)
    report = (tmp_path / "ab" / "report.html").read_text()
    assert "2 queries changed outcome" in report and 'href="#q-q-order-quality-refund"' in report
    # the 35-day quality refund: the order facts, the general rule and the quality exception
    quality = rewrites["q-order-quality-refund"]
    assert [(s["name"], s["doc"], s["state"]) for s in quality["slots"]] == [
        ("order NW-1042", "orders/records.md", "known"), ("question", "help/faq.html", "known"),
        ("exception to question", "policies/quality.md", "known")]
    assert [h["slot"] for h in quality["hops"]] == ["order NW-1042", "question", "exception to question"]
    diagnosis = next(d for d in map(json.loads, (tmp_path / "ab" / "routed" / "diagnosis.jsonl").read_text()
                                    .splitlines()) if d["id"] == "q-order-quality-refund")
    assert (diagnosis["outcome"], diagnosis["first_failure"]) == ("incomplete", "generation")
    assert diagnosis["lost"] == [{"group": 2, "stage": "generation",
                                  "reason": "in the context and in a cited unit, but no claim states it"}]
    # the variant's report shows the route, the slots and every hop of the multi-hop questions
    page = (tmp_path / "ab" / "routed" / "report.html").read_text()
    assert page.count("route multi-hop") == 5 and page.count("Evidence slots:") == 5
    assert "its limit is exceeded, so &#x27;exception to question&#x27; is opened" in page
