"""``ragdx label`` and ``ragdx diagnose`` on a RAGAS-format dataset written by hand, end to end on
the bundled example's store: labels proposed from the reference answers, checked with ``ragdx
evidence --strict``, and the dataset's own retrieved contexts and responses diagnosed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragdx.cli import main
from tests.conftest import write

RAGAS = [
    # the quality exception never reached the retrieved contexts: lost at retrieval
    {"user_input": "Can I get a refund for a quality problem 35 days after delivery?",
     "reference": "Refunds are accepted within 30 days of delivery. Quality defects may be refunded within 90 days "
                  "of delivery.",
     "retrieved_contexts": ["Refunds are accepted within 30 days of delivery. The delivery date is the date shown in "
                            "the tracking history of your parcel."],
     "response": "No. Refunds are accepted within 30 days of delivery."},
    # the context holds the rule; the response does not use it: lost at generation
    {"user_input": "Can I get a refund for a gift card I bought?",
     "reference": "Gift cards are non-refundable.",
     "retrieved_contexts": ["Gift cards are non-refundable. Store credit never expires."],
     "response": "Please contact our support team by e-mail."},
    # found, used, and one claim of the reference that no page states
    {"user_input": "How long do I have to return an item for a refund?",
     "reference": "Refunds are accepted within 30 days of delivery. Refunds are always paid out in gold bars "
                  "by carrier pigeon.",
     "retrieved_contexts": ["Refunds are accepted within 30 days of delivery."],
     "response": "Refunds are accepted within 30 days of delivery."},
]


@pytest.fixture()
def labelled(example_store, tmp_path: Path) -> tuple[Path, Path, list[dict]]:
    data = write(tmp_path / "ragas.jsonl", "".join(json.dumps(r) + "\n" for r in RAGAS))
    out = tmp_path / "queries.jsonl"
    assert main(["label", "--store", str(example_store.path), "--tests", str(data), "--out", str(out),
                 "--scorer", "words", "-q"]) == 0
    return data, out, [json.loads(line) for line in out.read_text().splitlines()]


def test_labels_proposed_from_the_reference_answers(labelled) -> None:
    _, _, lines = labelled
    assert [line["id"] for line in lines] == ["q1", "q2", "q3"]
    q1, q2, q3 = lines
    # two claims, two pages: an AND of two groups; the 30-day rule only in the 2026-03 version
    assert q1["required"] == [
        [{"doc": "policies/refund.md", "version": "2026-03", "quote": "Refunds are accepted within 30 days of delivery."}],
        [{"doc": "policies/quality.md", "version": "2026-03",
          "quote": "Quality defects may be refunded within 90 days of delivery."}]]
    assert [g["reason"] for g in q1["metadata"]["label"]["groups"]] == ["the reference's words, verbatim"] * 2
    assert q2["required"][0][0]["quote"] == "Gift cards are non-refundable."
    assert q2["required"][0][0]["doc"] == "policies/gift-cards.md"
    # the made-up claim is listed, not labelled
    assert len(q3["required"]) == 1
    unsupported = q3["metadata"]["label"]["unsupported_reference"]
    assert [u["claim"] for u in unsupported] == ["Refunds are always paid out in gold bars by carrier pigeon."]
    assert q3["metadata"]["label"]["needs_review"] is True
    assert q1["metadata"]["label"]["needs_review"] is False


def test_proposed_labels_resolve_strictly(labelled, example_store, capsys) -> None:
    _, out, _ = labelled
    capsys.readouterr()
    assert main(["evidence", "--store", str(example_store.path), "--queries", str(out), "--strict", "--json"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["status"] for r in records] == ["resolved"] * 4


def test_ragas_dataset_diagnosed_directly(labelled, example_store, tmp_path: Path) -> None:
    data, out, _ = labelled
    folder = tmp_path / "diagnosis"
    assert main(["diagnose", "--traces", str(data), "--queries", str(out), "--store", str(example_store.path),
                 "--out", str(folder), "-q"]) == 0
    found = {d["id"]: d for d in map(json.loads, (folder / "diagnosis.jsonl").read_text().splitlines())}
    assert found["q1"]["first_failure"] == "retrieval"
    assert [(loss["group"], loss["stage"]) for loss in found["q1"]["lost"]] == [(1, "retrieval")]
    assert found["q2"]["first_failure"] == "generation"
    assert found["q3"]["first_failure"] is None
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["system"] == "ragas"


def test_ragas_report_draws_the_funnel_labels_whole_in_chromium(labelled, example_store, tmp_path: Path) -> None:
    from ragdx.testing.browser import Browser, find_chromium
    if find_chromium() is None:
        pytest.skip("no Chromium on PATH (apt-get install chromium)")
    data, out, _ = labelled
    folder = tmp_path / "diagnosis"
    assert main(["diagnose", "--traces", str(data), "--queries", str(out), "--store", str(example_store.path),
                 "--out", str(folder), "-q"]) == 0
    with Browser() as browser:  # the longest label, "channel retrieved_contexts", is not cut at the page's edge
        page = browser.open(folder / "report.html")
        labels = page.evaluate("Array.from(document.querySelectorAll('#funnel text')).filter(t => "
                               "t.getAttribute('text-anchor') === 'end').map(t => [t.textContent.trim(), "
                               "t.getBBox().x])")
        assert "channel retrieved_contexts" in [name for name, _ in labels]
        assert min(x for _, x in labels) >= 0, labels


def _review(store, proposed: Path, tmp_path: Path, clicks) -> Path:
    """Write the review page of ``proposed``, open it in headless Chromium, run ``clicks(page)``,
    press "Download decisions"; returns the decisions file downloaded."""
    import time

    from ragdx.testing.browser import Browser, find_chromium
    if find_chromium() is None:
        pytest.skip("no Chromium on PATH (apt-get install chromium)")
    page_path = tmp_path / "review.html"
    assert main(["label", "--review", "--store", str(store.path), "--queries", str(proposed),
                 "--out", str(page_path)]) == 0
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    with Browser() as browser:
        browser.call("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
        page = browser.open(page_path)
        clicks(page)
        page.evaluate("document.getElementById('download').click()")
        deadline = time.monotonic() + 15
        while not (downloads / "decisions.json").is_file() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not page.errors
    return downloads / "decisions.json"


def test_review_round_trip_in_chromium(labelled, example_store, tmp_path: Path, capsys) -> None:
    """Accept, reject and download the decisions in headless Chromium, then apply them."""
    _, proposed, _ = labelled

    def clicks(page) -> None:
        assert page.evaluate("document.querySelectorAll('.grp').length") == 4
        page.evaluate("document.querySelector(\"button[data-q='q1'][data-g='1'][data-act='reject']\").click()")
        page.evaluate("document.querySelector(\"button[data-q='q2'][data-g='0'][data-act='accept']\").click()")
        assert page.evaluate("document.getElementById('g-q1-1').dataset.status") == "reject"

    downloaded = _review(example_store, proposed, tmp_path, clicks)
    decisions = json.loads(downloaded.read_text())
    assert decisions["decisions"] == {"q1": {"1": {"status": "reject"}}, "q2": {"0": {"status": "accept"}}}
    final = tmp_path / "final.jsonl"
    assert main(["label", "--apply", str(downloaded), "--queries", str(proposed),
                 "--out", str(final)]) == 0
    # the rejected group's alternatives are counted (once reported as "0 alternatives rejected")
    rejected = {q["id"]: q for q in map(json.loads, proposed.read_text().splitlines())}["q1"]["required"][1]
    assert capsys.readouterr().out.endswith(f"3 questions written (1 group rejected, {len(rejected)} alternative"
                                            f"{'s' if len(rejected) != 1 else ''} dropped)\n")
    lines = {q["id"]: q for q in map(json.loads, final.read_text().splitlines())}
    assert lines["q1"]["required"] == [[{"doc": "policies/refund.md", "version": "2026-03",
                                         "quote": "Refunds are accepted within 30 days of delivery."}]]
    assert len(lines["q2"]["required"]) == 1 and len(lines["q3"]["required"]) == 1
    from ragdx.queryset import load_queries
    assert [q.id for q in load_queries(final)] == ["q1", "q2", "q3"]


#: one claim quoted, one loose paraphrase of a sentence on another page: words 4 of 5 claim words
#: ("keep" missing) and none of the question's: 0.75 * 4/5 = 0.6, below 0.7 beside the quoted 1.0
WEAK_ROW = {"user_input": "What if I lose my gift card?",
            "reference": "A lost gift card can only be replaced if you still have the purchase receipt. "
                         "Exchanges keep the refund time limit."}


def test_review_brings_back_a_weak_group_in_chromium(example_store, tmp_path: Path) -> None:
    """A group left out for scoring low is listed with its score, and accepting it with a click
    puts it back into the applied query set."""
    data = write(tmp_path / "ragas.jsonl", json.dumps(WEAK_ROW) + "\n")
    proposed = tmp_path / "queries.jsonl"
    assert main(["label", "--store", str(example_store.path), "--tests", str(data), "--out", str(proposed),
                 "--scorer", "words", "-q"]) == 0
    line = json.loads(proposed.read_text())
    gift = {"doc": "policies/gift-cards.md", "version": "e3e7e4c730b8",
            "quote": "A lost gift card can only be replaced if you still have the purchase receipt."}
    exchange = {"doc": "policies/exchange.md", "version": "5fa75a140283",
                "quote": "Exchanges follow the same time limit and conditions as refunds."}
    assert line["required"] == [[gift]]
    assert [(g["score"], g["alternatives"]) for g in line["metadata"]["label"]["weak_groups"]] == [(0.6, [exchange])]

    def clicks(page) -> None:
        assert page.evaluate("document.querySelectorAll('.grp.weak').length") == 1
        shown = page.evaluate("document.getElementById('g-q1-w0').innerText")
        assert "score 0.60" in shown and exchange["quote"] in shown
        page.evaluate("document.querySelector(\"button[data-q='q1'][data-g='w0'][data-act='accept']\").click()")
        assert page.evaluate("document.getElementById('g-q1-w0').dataset.status") == "accept"

    downloaded = _review(example_store, proposed, tmp_path, clicks)
    decisions = json.loads(downloaded.read_text())
    assert decisions["decisions"] == {"q1": {"w0": {"status": "accept"}}}
    final = tmp_path / "final.jsonl"
    assert main(["label", "--apply", str(downloaded), "--queries", str(proposed),
                 "--out", str(final)]) == 0
    applied = json.loads(final.read_text())
    assert applied["required"] == [[gift], [exchange]]
    assert applied["answerable"] is True


def test_apply_refuses_a_decision_for_an_unknown_group(labelled, tmp_path: Path) -> None:
    from ragdx.errors import InputError
    from ragdx.report.review import apply_decisions
    _, proposed, _ = labelled
    bad = write(tmp_path / "d.json", json.dumps({"format": "ragdx-label-decisions",
                                                 "decisions": {"q2": {"3": {"status": "reject"}}}}))
    with pytest.raises(InputError) as err:
        apply_decisions(proposed, bad, tmp_path / "final.jsonl")
    assert err.value.field == "decisions.q2.3"
    assert not (tmp_path / "final.jsonl").exists()
    bad = write(tmp_path / "w.json", json.dumps({"format": "ragdx-label-decisions",
                                                 "decisions": {"q1": {"w0": {"status": "accept"}}}}))
    with pytest.raises(InputError) as err:  # q1 has no weak group
        apply_decisions(proposed, bad, tmp_path / "final.jsonl")
    assert err.value.field == "decisions.q1.w0"
    assert not (tmp_path / "final.jsonl").exists()


RULE = {"doc": "policies/refund.md", "version": "2026-03", "quote": "Refunds are accepted within 30 days of delivery."}
FAQ = {"doc": "help/faq.html", "version": "48333cd21df3",
       "quote": "You can return most items for a refund up to 30 days after your order was delivered."}
WRONG = {"doc": "policies/gift-cards.md", "version": "e3e7e4c730b8",
         "quote": "A lost gift card can only be replaced if you still have the purchase receipt."}


def _proposed(tmp_path: Path) -> Path:
    """A proposed question whose one group has three places, the last a wrong one."""
    group = [RULE, FAQ, WRONG]
    label = {"groups": [{"claims": ["Refunds within 30 days."], "score": 0.9, "reason": "quoted",
                         "alternatives": group}]}
    return write(tmp_path / "proposed.jsonl", json.dumps({
        "id": "q1", "question": "How long do I have to ask for a refund?", "answer": "30 days.",
        "required": [group], "metadata": {"label": label}}) + "\n")


def test_review_drops_one_wrong_place_of_a_group_in_chromium(example_store, tmp_path: Path, capsys) -> None:
    """Each place of a group has its own drop button (the page could only reject the whole
    group, issue 51): dropping the wrong one keeps the group's other two."""
    proposed = _proposed(tmp_path)

    def clicks(page) -> None:
        assert page.evaluate("document.querySelectorAll(\"button[data-act='drop']\").length") == 3
        page.evaluate("document.querySelector(\"button[data-q='q1'][data-g='0'][data-a='2']\").click()")
        page.evaluate("document.querySelector(\"button[data-q='q1'][data-g='0'][data-a='1']\").click()")
        page.evaluate("document.querySelector(\"button[data-q='q1'][data-g='0'][data-a='1']\").click()")  # kept again
        assert page.evaluate("document.querySelectorAll('.alt.dropped').length") == 1
        page.evaluate("document.querySelector(\"button[data-q='q1'][data-g='0'][data-act='accept']\").click()")

    downloaded = _review(example_store, proposed, tmp_path, clicks)
    assert json.loads(downloaded.read_text())["decisions"] == {"q1": {"0": {"status": "accept", "drop": [2]}}}
    final = tmp_path / "final.jsonl"
    assert main(["label", "--apply", str(downloaded), "--queries", str(proposed), "--out", str(final)]) == 0
    assert capsys.readouterr().out.endswith("final.jsonl: 1 question written (0 groups rejected, 1 alternative "
                                            "dropped)\n")
    assert json.loads(final.read_text())["required"] == [[RULE, FAQ]]


def test_apply_drops_places_and_a_group_left_without_one_is_rejected(tmp_path: Path) -> None:
    from ragdx.errors import InputError
    from ragdx.report.review import apply_decisions
    proposed = _proposed(tmp_path)

    def apply(decision) -> tuple:
        d = write(tmp_path / "d.json", json.dumps({"format": "ragdx-label-decisions", "decisions": {"q1": {"0": decision}}}))
        counts = apply_decisions(proposed, d, tmp_path / "final.jsonl")
        return counts, json.loads((tmp_path / "final.jsonl").read_text())

    (counts, line) = apply({"status": "accept", "drop": [0, 2]})
    assert counts == (1, 0, 2) and line["required"] == [[FAQ]] and line["answerable"] is True
    (counts, line) = apply({"status": "accept", "drop": [0, 1, 2]})
    assert counts == (1, 1, 3) and line["required"] == [] and line["answerable"] is False
    for bad in ([3], "1", [True]):
        with pytest.raises(InputError) as err:
            apply({"status": "accept", "drop": bad})
        assert err.value.field == "decisions.q1.0.drop"
        assert f"'drop' must list alternatives 0 to 2, not {json.dumps(bad)}" in str(err.value)
