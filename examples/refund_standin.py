"""What the Haystack and LangChain examples share: the bundled refund corpus as plain documents,
and a stand-in generator that needs no model.

The corpus is parsed once by ragdx (as a framework's own converter would), so a framework's
chunk offsets line up with the text ``ragdx diagnose --store`` resolves quotes in. The stand-in
generator answers like a careful LLM: for each required evidence group it states the first
labelled quote it finds whole in its context, citing the document that holds it, and abstains
when it finds none. Its faults make it answer wrongly on purpose:

- ``invent``: every claim gains a clause its evidence does not state (``within 73 days``);
- ``drop``: it states only the first group it found (an incomplete answer);
- ``distract``: it states a sentence of a context document that holds no required quote;
- ``miscite``: each claim cites another document of its context than the one that says it.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from ragdx import SQLiteStore, build_ingestor, example_dir, load_settings

ABSTAIN = "I don't know: no source in my context answers this."
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Source:
    """One stored document version as plain text with its metadata."""

    text: str
    meta: dict


def refund_sources(folder: Path) -> list[Source]:
    """Every version of the bundled refund example, parsed by ragdx into ``folder/store.db``."""
    folder.mkdir(parents=True, exist_ok=True)
    store = SQLiteStore(folder / "store.db")
    build_ingestor(store, load_settings(overrides=["retrieval.dense.enabled=false"])).run(
        example_dir() / "manifest.jsonl")
    out = []
    for stored in store.versions():
        doc = stored.document
        out.append(Source(store.texts(doc.doc_id, doc.version)[1], {
            "doc": doc.doc_id, "version": doc.version, "status": doc.status.value, "acl": list(doc.acl)}))
    store.close()
    return out


def queries() -> list[dict]:
    """The bundled query set, as JSON objects."""
    return [json.loads(line) for line in (example_dir() / "queries.jsonl").read_text().splitlines() if line]


def query_for(question: str) -> dict:
    """The query a question asks (one that needs evidence, when two principals ask it)."""
    asked = [q for q in queries() if q["question"] == question]
    return next((q for q in asked if q.get("required")), asked[0] if asked else {})


def _compact(text: str) -> str:
    return _SPACE.sub("", text)


def stand_in_answer(query: dict, context: Sequence[tuple[str, str]], fault: str | None = None) -> dict:
    """The stand-in generator's answer to ``query`` from ``context`` (``(id, text)`` pairs, in
    order): ``{"text", "abstained", "claims": [{"text", "citations"}]}``."""
    claims = []
    for group in query.get("required", []):
        for alt in group:
            quote = alt.get("quote")
            holder = next((cid for cid, text in context if quote and _compact(quote) in _compact(text)), None)
            if holder is not None:
                claims.append({"text": quote.rstrip(".") + ".", "citations": [holder]})
                break
    if not claims:
        return {"text": ABSTAIN, "abstained": True, "claims": []}
    if fault == "invent":
        claims = [dict(c, text=c["text"].rstrip(".") + ", within 73 days.") for c in claims]
    elif fault == "drop":
        claims = claims[:1]
    elif fault == "distract":
        used = {cid for c in claims for cid in c["citations"]}
        other = next(((cid, text) for cid, text in context if cid not in used and text.strip()), None)
        if other is not None:
            sentence = re.split(r"(?<=[.!?])\s", other[1].strip())[0]
            claims = [{"text": sentence, "citations": [other[0]]}]
    elif fault == "miscite":
        ids = [cid for cid, _ in context]
        claims = [dict(c, citations=[next((i for i in ids if i not in c["citations"]), c["citations"][0])])
                  for c in claims]
    return {"text": " ".join(c["text"] for c in claims), "abstained": False, "claims": claims}


def abstained(text: str) -> bool:
    """Whether a stand-in answer is an abstention."""
    return text == ABSTAIN


def example_main(argv: list[str], faults: dict[str, str], run: Callable[..., Path], system: str) -> int:
    """An example's command line: ``OUT_FOLDER`` (default a new temporary folder) and ``--fault
    NAME``; run the example, then ``ragdx diagnose`` its traces against the bundled questions."""
    from ragdx.cli import main as ragdx
    fault = argv[argv.index("--fault") + 1] if "--fault" in argv else None
    if fault is not None and fault not in faults:
        print(f"--fault must be one of {', '.join(faults)}", file=sys.stderr)
        return 2
    args = [a for a in argv if a not in ("--fault", fault)]
    out = Path(args[0]) if args else Path(tempfile.mkdtemp(prefix=f"ragdx-{system}-"))
    traces = run(out, fault)
    return ragdx(["diagnose", "--traces", str(traces), "--queries", str(example_dir() / "queries.jsonl"),
                  "--store", str(out / "store.db"), "--out", str(out / "diagnosis")])
