"""Version-specific questions on the PostgreSQL manual in two versions, asked as users ask them.

The manual of PostgreSQL 15 (Debian 12's ``postgresql-doc-15``, superseded) and of PostgreSQL 17
(Debian 13's ``postgresql-doc-17``, current): 2,312 pages, labelled ``15`` and ``17``. Its
questions (``bench/devset/pg-versions.jsonl``, 20, hand-labelled on the version they name) name a
version the way users do: "On version 15, ...", "After moving to 17, ...", "We're on 15. ...",
"In PostgreSQL 17, ...". Half ask about 15, whose pages retrieval returns only when the question
names it; half about 17. Most ask for a setting's default, which a reference page states in a
sentence that never names the setting ("The default is 200.") under the setting's own entry.

``--layout separate`` stores the two manuals the other common way, as a team indexes two doc
sites: each page twice under its own id (``postgresql-15/X.html`` and ``postgresql-17/X.html``),
labelled with its version, both current. The questions' labels are moved to those ids (written
beside the store); store and run go to ``--work``/separate.

``--queries bench/devset/pg-general.fit.jsonl`` (31) and ``.test.jsonl`` (29): questions that name
no version (answered from 17), asked in a user's words across the whole manual (SQL commands,
functions, limits, settings, pg_hba.conf, pg_dump, psql, replication), 23 of the 44 answerable ones
with two required groups (a rule and its exception, or two parts), and 16 about extensions, tools,
settings and operators that neither manual mentions (each name checked absent from both). Labelled
by a helper who never saw ragdx's answers; the fit half is for tuning, the test half is not.

Reproduce, from the repository root (needs Debian's archive; about 6 minutes to ingest here)::

    nice -n 10 .venv/bin/python bench/quality/pg_versions.py [--work bench/.cache/pg-versions]

It downloads both packages (``apt-get download``; the 17 package from the Debian 13 archive named
in its ``Packages`` index), unpacks them into ``--work``, ingests them with ``ragdx ingest`` and the
int8 encoder ``bench/quality/quality.py`` uses, checks every label with ``ragdx evidence --strict``, runs the
questions with ``ragdx run`` (defaults, result cache off) and prints each question's outcome and
first failure. Written to ``--out`` (default ``bench/results/pg_versions.json``). The code measured
is the ragdx on ``PYTHONPATH`` (a worktree's ``src`` for a "before").
"""

from __future__ import annotations

import argparse
import json
import lzma
import shutil
import subprocess
import sys
import urllib.request
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import INT8, REPO, code_version, label_table, machine, write_result
from quality import SUCCESS, Failed, ragdx, read_jsonl  # this folder's quality.py, not the area

QUESTIONS = REPO / "bench" / "devset" / "pg-versions.jsonl"
DEFAULT_WORK = REPO / "bench" / ".cache" / "pg-versions"
DEFAULT_OUT = REPO / "bench" / "results" / "pg_versions.json"
ARCHIVE = "http://deb.debian.org/debian"
#: each manual: its package, the Debian suite it comes from, its version label and status
MANUALS = (("postgresql-doc-15", "bookworm", "15", "superseded"), ("postgresql-doc-17", "trixie", "17", "current"))


def fetch(package: str, suite: str, work: Path) -> Path:
    """The package's HTML folder, downloaded and unpacked into ``work`` once."""
    html = work / package / "usr" / "share" / "doc" / package / "html"
    if html.is_dir():
        return html
    debs = work / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    with urllib.request.urlopen(f"{ARCHIVE}/dists/{suite}/main/binary-all/Packages.xz", timeout=120) as r:
        index = lzma.decompress(r.read()).decode()
    entry = next((block for block in index.split("\n\n") if block.startswith(f"Package: {package}\n")), None)
    if entry is None:
        raise Failed(f"{package} is not in Debian {suite}'s Packages index")
    filename = next(line.split(": ", 1)[1] for line in entry.splitlines() if line.startswith("Filename: "))
    deb = debs / Path(filename).name
    if not deb.is_file():
        with urllib.request.urlopen(f"{ARCHIVE}/{filename}", timeout=300) as r:
            deb.write_bytes(r.read())
    subprocess.run(["dpkg-deb", "-x", str(deb), str(work / package)], check=True)
    if not html.is_dir():
        raise Failed(f"{deb} holds no {html.relative_to(work / package)}")
    return html


def doc_id(page: str, version: str, layout: str) -> str:
    """A page's document id: one per page (``postgresql/X.html``), or one per version and page."""
    return f"postgresql/{page}" if layout == "one-id" else f"postgresql-{version}/{page}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=DEFAULT_WORK, help="where the packages, store and run go")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--queries", type=Path, default=QUESTIONS,
                    help="the labelled questions (default the version set; bench/devset/pg-general.fit.jsonl and .test.jsonl: "
                         "questions naming no version, a quarter of them out of the manual)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a ragdx setting for the run (repeatable), as bench/quality/quality.py's")
    ap.add_argument("--layout", default="one-id", choices=["one-id", "separate"],
                    help="one-id: a page's two versions under one id, 15 superseded (default); separate: "
                         "each version its own documents, both current")
    args = ap.parse_args()
    questions = args.queries.resolve()
    base = args.work.resolve()
    work = base if args.layout == "one-id" else base / "separate"
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for package, suite, label, status in MANUALS:
        html = fetch(package, suite, base)
        rows += [{"doc_id": doc_id(page.name, label, args.layout), "path": str(page), "version": label,
                  "status": status if args.layout == "one-id" else "current",
                  "acl": ["public"]} for page in sorted(html.glob("*.html"))]
    manifest = work / "manifest.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    if args.layout == "separate":  # the labels name the pages' own ids
        moved = []
        for q in read_jsonl(questions):
            q["required"] = [[{**span, "doc": doc_id(span["doc"].split("/", 1)[1], span["version"], args.layout)}
                              for span in group] for group in q["required"]]
            moved.append(q)
        questions = work / questions.name
        questions.write_text("".join(json.dumps(q) + "\n" for q in moved), encoding="utf-8")
    if not INT8.is_file():
        ragdx(["build-encoder", "--out", str(INT8.parent)], "ragdx build-encoder", capture=False)
    sets = ["--set", "retrieval.dense.backend=onnx", "--set", f"retrieval.dense.model={INT8}"]
    store = work / "store.db"
    print(f"ingesting {len(rows)} pages into {store} (a no-op when nothing changed) ...", file=sys.stderr, flush=True)
    _, ingest = ragdx(["ingest", "--json", "--allow-outside", "--store", str(store), str(manifest), *sets],
                      "ragdx ingest")
    ragdx(["evidence", "--store", str(store), "--queries", str(questions), "--strict", "--json"],
          "ragdx evidence --strict")
    run_dir = work / "run"
    if run_dir.exists():  # a run folder left is resumed, not run again
        shutil.rmtree(run_dir)
    _, run = ragdx(["run", "--store", str(store), "--queries", str(questions), "--out", str(run_dir), *sets,
                    "--set", "cache.enabled=false", *[a for kv in args.set for a in ("--set", kv)]], "ragdx run")
    diagnoses = {d["id"]: d for d in read_jsonl(run_dir / "diagnosis.jsonl")}
    per_query = [{"id": q["id"], "question": q["question"], "kind": q["tags"][-1],
                  "named": q["required"][0][0]["version"] if q["required"] else "none",
                  "outcome": diagnoses[q["id"]]["outcome"], "first_failure": diagnoses[q["id"]]["first_failure"]}
                 for q in read_jsonl(questions)]
    def tally(key: str) -> dict[str, Counter]:  # outcomes per value of a field, in first-seen order
        return {v: Counter(p["outcome"] for p in per_query if p[key] == v)
                for v in dict.fromkeys(p[key] for p in per_query)}
    by_version, by_kind = tally("named"), tally("kind")
    success = sum(p["outcome"] in SUCCESS for p in per_query)
    result = {"benchmark": "pg_versions", "command": " ".join([Path(sys.executable).name, *sys.argv]),
              "code": code_version(), "machine": machine(), "pages": len(rows), "ingest": ingest, "run": run,
              "success": success, "questions": len(per_query),
              "by_version": {v: dict(c) for v, c in by_version.items()},
              "by_kind": {k: dict(c) for k, c in by_kind.items()},
              "first_failure": dict(Counter(p["first_failure"] for p in per_query if p["first_failure"])),
              "per_query": per_query}
    table = label_table([(p["id"], f"{p['outcome']}" + (f" (lost at {p['first_failure']})" if p["first_failure"] else ""))
                         for p in per_query] + [
        ("supported or correctly abstained", f"{success} / {len(per_query)}"),
        *[(f"  naming {v}", f"{sum(c[o] for o in SUCCESS)} / {sum(c.values())}") for v, c in by_version.items()],
        *[(f"  {k}", f"{sum(c[o] for o in SUCCESS)} / {sum(c.values())}") for k, c in by_kind.items()],
        ("ingest", f"{ingest['wall_s']:.0f} s wall, peak RSS {ingest['peak_rss_mb']:.0f} MB"),
        ("run", f"{run['wall_s']:.1f} s wall for {len(per_query)} questions")])
    write_result(args.out, result, table)


if __name__ == "__main__":
    try:
        main()
    except Failed as exc:
        raise SystemExit(f"pg_versions: {exc}") from None
