"""Injection flags on legitimate documentation: how much real text the instruction detector bars
from answers (issue 25, item 5).

Reproduce, from the repository root::

    .venv/bin/python bench/quality/injection_false_positives.py

Every page of the Python HTML docs (Debian's ``python3-doc``) is parsed and chunked as the
Ingestor does by default (``bench/_common.py``); none of it is an injection, so every flag is a
false positive. A flagged passage is never quoted as an answer and supports no claim, so the cost
of a false positive is the statements it bars (``ragdx.text.statements``: what the extractive
generator may quote). Counted three ways:

- ``sentence``: each instruction-like sentence alone (what ragdx did before issue 25: the
  sentence was barred, the rest of its paragraph was not);
- ``passage``: ``ragdx.stages.injection.flagged_passages``, the block holding the instruction,
  run on to the next heading when it opens what follows (what ragdx does now);
- ``unit``: every chunk meeting a flagged passage, whole (the alternative of barring the whole
  context unit).

With the ragdx of before issue 25 (no ``flagged_passages``) only the sentence count is made. The
flagged text is listed, so each false positive can be read. A table goes to stdout and everything
to the JSON file named by ``--out``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ragdx.ingest.parsers import parse
from ragdx.stages import injection
from ragdx.text import sentence_spans, statements

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import (  # noqa: E402
    DEFAULT_HTML, REPO, Stopwatch, chunk_pages, code_version, html_pages, label_table, machine, missing_pages,
    write_result,
)

DEFAULT_OUT = REPO / "bench" / "results" / "injection_false_positives.json"


def measure(html_dir: Path, examples: int) -> dict:
    pages = html_pages(html_dir)
    chunks, _ = chunk_pages(html_dir, pages)
    texts = {page.relative_to(html_dir).as_posix(): parse(page.read_bytes(), "html", str(page))[1].text
             for page in pages}
    by_doc: dict[str, list[tuple[int, int]]] = {}
    for chunk in chunks:
        by_doc.setdefault(chunk.doc_id, []).append((chunk.start, chunk.end))
    total = sum(len(statements(text)) for text in texts.values())
    result: dict = {"pages": len(pages), "chunks": len(chunks), "statements": total,
                    "characters": sum(len(text) for text in texts.values())}

    sentences = [(doc, text[s:e]) for doc, text in texts.items() for s, e in sentence_spans(text)
                 if injection.INSTRUCTION_LIKE.search(text[s:e])]
    result["sentence"] = {
        "sentences": len(sentences),
        "chunks": sum(1 for doc, spans in by_doc.items() for s, e in spans
                      if injection.instruction_like(texts[doc][s:e])),
        "statements_barred": sum(1 for text in texts.values() for st in statements(text)
                                 if injection.INSTRUCTION_LIKE.search(st)),
        "examples": [{"doc": doc, "text": sentence[:200]} for doc, sentence in sentences[:examples]]}
    if not hasattr(injection, "flagged_passages"):
        return result

    with Stopwatch() as clock:
        flagged = {doc: injection.flagged_passages(text) for doc, text in texts.items()}
    met = {doc: [(s, e) for s, e in by_doc.get(doc, []) if any(f.start < e and s < f.end for f in found)]
           for doc, found in flagged.items()}
    passages = [(doc, f) for doc, found in flagged.items() for f in found]
    result["passage"] = {
        "passages": len(passages), "chunks": sum(map(len, met.values())),
        "characters": sum(f.end - f.start for _, f in passages),
        "statements_barred": sum(len(statements(texts[doc][f.start:f.end])) for doc, f in passages),
        "seconds": clock.times(),
        "examples": [{"doc": doc, "kind": f.kind.value, "match": f.match, "text": texts[doc][f.start:f.end][:200]}
                     for doc, f in passages[:examples]]}
    result["unit"] = {"statements_barred": sum(len(statements(texts[doc][s:e]))
                                               for doc, spans in met.items() for s, e in spans)}
    return result


def table(result: dict) -> str:
    rows = [("pages, chunks, statements", f"{result['pages']}, {result['chunks']}, {result['statements']}"),
            ("sentence: sentences flagged", str(result["sentence"]["sentences"])),
            ("sentence: chunks holding one", f"{result['sentence']['chunks']} of {result['chunks']}"),
            ("sentence: statements barred", f"{result['sentence']['statements_barred']} of {result['statements']}")]
    if "passage" in result:
        p = result["passage"]
        rows += [("passage: passages flagged", f"{p['passages']} ({p['characters']} characters)"),
                 ("passage: chunks meeting one", f"{p['chunks']} of {result['chunks']}"),
                 ("passage: statements barred", f"{p['statements_barred']} of {result['statements']}"),
                 ("unit: statements barred", f"{result['unit']['statements_barred']} of {result['statements']}"),
                 ("passage detection, CPU s", f"{p['seconds']['cpu']:.1f}")]
        rows += [(f"  {e['doc']}", f"{e['kind']}: {e['match']!r}") for e in p["examples"]]
    return label_table(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--html-dir", type=Path, default=DEFAULT_HTML)
    ap.add_argument("--examples", type=int, default=30, help="flagged texts listed in the result")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args()
    problem = missing_pages(args.html_dir)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    result = measure(args.html_dir, args.examples)
    result |= {"code": code_version(), "machine": machine(),
               "command": " ".join(["bench/quality/injection_false_positives.py"] + sys.argv[1:])}
    write_result(args.out, result, table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
