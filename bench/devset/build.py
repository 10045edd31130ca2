"""Build ragdx's labelled dev set from real documentation shipped in Debian packages.

Reproduce, from the repository root::

    apt-get install python3-doc sqlite3-doc        # Python 3.11.2 and SQLite 3.40.1 docs (bookworm)
    .venv/bin/python bench/devset/build.py          # writes bench/.cache/devset/, prints its counts

It writes, into ``--out`` (default ``bench/.cache/devset/``; nothing of it is committed: it is
rebuilt in well under a minute):

- ``manifest.jsonl``: the corpus manifest (docs/formats.md): every document version with its
  ``doc_id``, ``path``, ``version``, ``acl``, ``status`` and ``title``;
- ``queries.jsonl`` (all), ``queries.fit.jsonl`` and ``queries.test.jsonl``: query sets
  (docs/formats.md), split in two halves, seeded and stratified by kind;
- ``build.json``: the sources, the seed and every count printed;
- ``docs/``: the FAQ pages as they are indexed (question headings removed).

**The corpus.**

- Python 3.11.2 (``python3-doc``, bookworm, installed): every HTML page except Sphinx's
  folders and its navigation pages (``genindex*``, ``py-modindex``, ``search``, ``contents``).
- SQLite 3.40.1 (``sqlite3-doc``, bookworm, installed): the top-level pages, the C interface
  (``c3ref/``), the release log (``releaselog/``) and the session extension (``session/``); the
  ``syntax/`` pages are left out (railroad diagrams: images with a caption, no text), and so are
  its generated navigation pages (``keyword_index``, ``doc_*_crossref``, ``sitemap``), as
  Python's are.
- Older versions of the same documents, from bullseye: Python 3.9.2's ``library/`` pages
  (``python3.9-doc``) and SQLite 3.34.1's top-level pages (``sqlite3-doc``), where the newer
  release has the same page. They are the same ``doc_id`` with status ``superseded``: the store
  holds both versions, as a documentation site that keeps its history does. They are fetched
  with a private apt configuration under ``OUT/apt`` (its own sources.list, lists and cache; the
  machine's apt is untouched) and unpacked with ``dpkg-deb -x``; ``--no-fetch`` refuses to.
- Restricted: SQLite's session extension (``sessionintro.html``, ``session.html``, ``session/``)
  and four Python library pages (:data:`RESTRICTED`) carry ``acl: ["staff"]``; everything else is
  public. ``--check-restricted`` parses every public page (a minute or more) and fails when
  one holds the quote of a restricted question: that question would be answerable after all.
  ``--suggest-alternatives`` lists the current public pages that hold a hand-written quote word for
  word without being an alternative of its group yet (they are added to labels.jsonl as OR
  alternatives: the same words on another page answer the question as well).

**The questions.**

- ``faq``: generated from the FAQ pages of both manuals (Python's ``faq/*.html``, SQLite's
  ``faq.html``). Each leaf heading of a Python FAQ page, and each ``(N) ...`` question of
  SQLite's, is a question; its answer's leading text (:func:`answer_quotes`: whole sentences, 20
  to 70 words; a code block announced by a colon is a second group) is the required evidence, as
  quotes pinned to the page. The copy that is indexed has no question headings, no table of
  contents, no sidebar or menu listing them, no ``id`` slugs made from them, and links naming
  another question read "another answer on this page", so keyword search cannot win by matching
  the question to its heading (checked: no question's words run through the indexed page).
- Hand-written (``bench/devset/labels.jsonl``, committed; 153): ``single-fact`` (19),
  ``rule-exception`` (14: a rule and its exception, usually two required groups),
  ``version-specific`` (49: the answer differs between the two versions of a page; the quote
  pins the version asked about), ``multi-hop`` (15: two groups, mostly from different pages),
  ``unanswerable`` (41: close to what the docs say, but not answered by them: the right
  behaviour is to abstain) and ``restricted`` (15: answered only by a restricted document,
  asked by a public principal: ``answerable: false`` with ``restricted_required``). Issue 26's
  batch (``metadata.batch: "issue-26"``, 55 of them) adds 26 out-of-corpus ``unanswerable``
  questions (tag ``out-of-corpus``: tools, extensions, pragmas and releases neither manual
  mentions, asked in the manuals' words; ``metadata.checked_absent`` names what was checked to
  be absent from every document version) and 29 ``version-specific`` ones phrased as a user
  would ("We're still on SQLite 3.34 ...", "After upgrading to Python 3.11, ...", or no version
  at all: then the current page answers). Every quote was copied from the parsed text of the
  real page; the builder finds each one in the version it names (or the current one) with
  ragdx's own quote matching and stops, naming the label id and the quote, when one is missing.

**The split.** Within each stratum (:func:`stratum`: the kind, the first tag;
``kind:batch:manual`` for a label with ``metadata.batch``), ids are sorted, shuffled with
``random.Random(f"{seed}:{stratum}")`` and alternately dealt to ``test`` and ``fit`` (an odd
count gives ``test`` the extra one). A batch of labels added later is dealt on its own, so the
questions already there keep their half and earlier comparisons stay valid.
"""

from __future__ import annotations

import argparse
import html
import json
import random
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ragdx.errors import InputError
from ragdx.ingest.parsers import parse
from ragdx.ingest.quotes import find_quote
from ragdx.queryset import parse_query
from ragdx.types import BlockKind, ParsedDocument

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
DEFAULT_OUT = REPO / "bench" / ".cache" / "devset"
LABELS = HERE / "labels.jsonl"
PUBLIC = {"user": "devset-public", "groups": ["public"]}
STAFF = ["staff"]
KINDS = ("faq", "single-fact", "rule-exception", "version-specific", "multi-hop", "unanswerable",
         "restricted")

# documents only the staff group may read (every stored version of them)
RESTRICTED_PREFIXES = ("sqlite/session/",)
RESTRICTED = {"sqlite/sessionintro.html", "sqlite/session.html", "python/library/zipapp.html", "python/library/graphlib.html",
              "python/library/tomllib.html", "python/library/wsgiref.html"}

# generated navigation pages (indexes of keywords, links and pages), left out of both manuals
_NAV_PAGES = re.compile(r"^(genindex.*|py-modindex|search|contents|keyword_index|doc_\w+_crossref|sitemap)\.html$")


@dataclass
class Source:
    """One release of one manual: where its HTML is, which pages count, and how it is stored."""

    corpus: str          # the doc_id prefix
    version: str
    release: str         # the Debian release it ships in
    package: str         # the Debian package (with its exact version when fetched)
    status: str          # current or superseded
    html: Path | None    # an installed folder; None: fetched into OUT/debian
    subdir: str = ""     # the HTML folder inside the unpacked package
    folders: tuple[str, ...] | None = None   # top-level folders kept ("" = the top level); None = all
    skip_folders: tuple[str, ...] = ()
    only_if_in: str | None = None   # keep a page only when this source has the same page
    version_marker: str = ""        # a regex that must match the index page (checks the release)
    pages: list[Path] = field(default_factory=list)


def sources() -> list[Source]:
    return [
        Source("python", "3.11.2", "bookworm", "python3-doc", "current",
               Path("/usr/share/doc/python3-doc/html"),
               skip_folders=("_sources", "_static", "_images", "_downloads"),
               version_marker=r"Python 3\.11\.2 documentation"),
        Source("sqlite", "3.40.1", "bookworm", "sqlite3-doc", "current", Path("/usr/share/doc/sqlite3"),
               folders=("", "c3ref", "releaselog", "session"),
               version_marker=r"3\.40\.1"),
        Source("python", "3.9.2", "bullseye", "python3.9-doc=3.9.2-1", "superseded", None,
               subdir="python3.9-doc/usr/share/doc/python3.9/html", folders=("library",),
               only_if_in="python-3.11.2", version_marker=r"Python 3\.9\.2 documentation"),
        Source("sqlite", "3.34.1", "bullseye", "sqlite3-doc=3.34.1-3", "superseded", None,
               subdir="sqlite3-doc/usr/share/doc/sqlite3", folders=("",), only_if_in="sqlite-3.40.1",
               version_marker=r"3\.34\.1"),
    ]


class BuildError(Exception):
    """A dev set that cannot be built as labelled: the message names what and where."""


# -- fetching the older releases ----------------------------------------------------------------

def fetch(src: Source, out: Path) -> Path:
    """The unpacked HTML folder of a package from another Debian release, downloaded with a
    private apt configuration (the machine's own apt state is never read or written)."""
    name = src.package.split("=")[0]
    root = out / "debian" / src.release
    folder = root / src.subdir
    if folder.is_dir():
        return folder
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        raise BuildError(f"{src.package} ({src.release}) is not unpacked under {root} and apt-get/dpkg-deb "
                         "are missing to fetch it")
    apt = out / "apt" / src.release
    for sub in ("lists/partial", "cache/archives/partial"):
        (apt / sub).mkdir(parents=True, exist_ok=True)
    (apt / "sources.list").write_text(f"deb http://deb.debian.org/debian {src.release} main\n")
    (apt / "status").touch()
    opts = [f"-o=Dir::Etc::sourcelist={apt / 'sources.list'}", "-o=Dir::Etc::sourceparts=/nonexistent",
            f"-o=Dir::State::Lists={apt / 'lists'}", f"-o=Dir::State::status={apt / 'status'}",
            f"-o=Dir::Cache={apt / 'cache'}", "-o=APT::Sandbox::User=root", "-q"]
    if not any((apt / "lists").glob(f"*{src.release}*Packages*")):
        print(f"fetching the {src.release} package lists (private apt state in {apt}) ...", file=sys.stderr)
        _run(["apt-get", *opts, "update"], "apt-get update")
    debs = apt / "debs"
    debs.mkdir(exist_ok=True)
    print(f"downloading {src.package} from {src.release} ...", file=sys.stderr)
    _run(["apt-get", *opts, "download", src.package], f"apt-get download {src.package}", cwd=debs)
    found = sorted(debs.glob(f"{name}_*.deb"))
    if not found:
        raise BuildError(f"apt-get download {src.package} wrote no .deb into {debs}")
    (root / name).mkdir(parents=True, exist_ok=True)
    _run(["dpkg-deb", "-x", str(found[-1]), str(root / name)], "dpkg-deb -x")
    if not folder.is_dir():
        raise BuildError(f"{found[-1].name} has no {src.subdir}")
    return folder


def _run(cmd: list[str], what: str, cwd: Path | None = None) -> None:
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BuildError(f"{what} failed (exit {done.returncode}): {done.stderr.strip()[-800:]}")


# -- the corpus ---------------------------------------------------------------------------------

def list_pages(src: Source) -> list[Path]:
    assert src.html is not None
    pages = []
    for page in sorted(src.html.rglob("*.html")):
        rel = page.relative_to(src.html)
        top = rel.parts[0] if len(rel.parts) > 1 else ""
        if top in src.skip_folders or (src.folders is not None and top not in src.folders):
            continue
        if len(rel.parts) == 1 and _NAV_PAGES.match(rel.name):
            continue
        pages.append(page)
    return pages


def check_release(src: Source) -> None:
    assert src.html is not None
    index = src.html / "index.html"
    text = index.read_text(encoding="utf-8", errors="replace") if index.is_file() else ""
    if not re.search(src.version_marker, text):
        raise BuildError(f"{index} is not the {src.corpus} {src.version} documentation the labels were "
                         f"written against (install {src.package} from Debian {src.release})")


def acl_of(doc_id: str) -> list[str]:
    return STAFF if doc_id in RESTRICTED or doc_id.startswith(RESTRICTED_PREFIXES) else ["public"]


_TITLE = re.compile(r"<title>(.*?)</title>", re.DOTALL | re.IGNORECASE)


def page_title(path: Path) -> str:
    found = _TITLE.search(path.read_text(encoding="utf-8", errors="replace")[:20000])
    return " ".join(html.unescape(found.group(1)).split()) if found else path.stem


# -- FAQ pages: questions out of the indexed copy ------------------------------------------------

_HEADING = re.compile(r"<h([1-6])\b[^>]*>(.*?)</h\1>", re.DOTALL | re.IGNORECASE)
_TAGS = re.compile(r"<[^>]+>")
_SENTENCE_END = re.compile(r"(?<=[.!?:])\s+(?=[A-Z(\"“'])")


def text_of(fragment: str) -> str:
    return " ".join(html.unescape(_TAGS.sub("", fragment)).replace("\u00b6", "").split())


def cut_element(source: str, start: int, tag: str) -> tuple[int, int]:
    """The ``[start, end)`` of the element opening at ``start``, counting nested same tags."""
    opener = re.compile(rf"<{tag}\b|</{tag}\s*>", re.IGNORECASE)
    depth, pos = 0, start
    for m in opener.finditer(source, start):
        depth += -1 if m.group(0).startswith("</") else 1
        if depth == 0:
            return start, m.end()
        pos = m.end()
    raise BuildError(f"unbalanced <{tag}> from offset {start} (scanned to {pos})")


@dataclass(frozen=True)
class FaqItem:
    doc_id: str
    number: int
    question: str
    answer_html: str


def strip_python_faq(doc_id: str, source: str) -> tuple[str, list[FaqItem]]:
    """The page without its question headings, TOC, sidebar or heading slugs; the questions
    (leaf headings below the page title) with their answers' HTML."""
    def leaf_headings(source: str) -> tuple[int, int, list, list[int]]:
        body = source.find('<div class="body"')
        side = source.find('<div class="sphinxsidebar"')
        if body < 0 or side < 0:
            raise BuildError(f"{doc_id}: no Sphinx body or sidebar; is this a Sphinx FAQ page?")
        heads = [m for m in _HEADING.finditer(source) if body < m.start() < side]
        leaves = [i for i, m in enumerate(heads) if int(m.group(1)) > 1
                  and (i + 1 == len(heads) or int(heads[i + 1].group(1)) <= int(m.group(1)))]
        return body, side, heads, leaves

    body, side, heads, leaves = leaf_headings(source)
    questions = {text_of(heads[i].group(2)) for i in leaves}
    # an answer that links to another question names it: the link keeps its place, not its words
    head_spans = [(m.start(), m.end()) for m in heads]
    xref = re.compile(r'(<a class="reference internal"[^>]*>)(.*?)(</a>)', re.DOTALL)
    source = xref.sub(lambda m: m.group(0) if text_of(m.group(2)) not in questions
                      or any(a <= m.start() < b for a, b in head_spans)
                      else m.group(1) + "another answer on this page" + m.group(3), source)
    body, side, heads, leaves = leaf_headings(source)
    items, cuts = [], []
    for n, i in enumerate(leaves, start=1):
        m = heads[i]
        end = heads[i + 1].start() if i + 1 < len(heads) else side
        items.append(FaqItem(doc_id, n, text_of(m.group(2)), source[m.end():end]))
        cuts.append((m.start(), m.end()))
    nav = source.find('<nav class="contents"', body)
    if nav >= 0:
        cuts.append(cut_element(source, nav, "nav"))
    cuts.append(cut_element(source, side, "div"))
    menu = source.find('<div class="menu-wrapper">')  # the mobile menu repeats the sidebar's TOC
    if 0 <= menu < body:
        cuts.append(cut_element(source, menu, "div"))
    out = _cut(source, cuts)
    # section ids and toc back-references are slugs of the questions
    counter = iter(range(1, 10_000))
    out = re.sub(r'<section id="[^"]*">', lambda _: f'<section id="s{next(counter)}">', out)
    return out, items


def strip_sqlite_faq(doc_id: str, source: str) -> tuple[str, list[FaqItem]]:
    """SQLite's faq.html without its numbered list of questions or the ``(N) question`` lines."""
    toc = source.find("<ol class=nounderline>")
    if toc < 0:
        raise BuildError(f"{doc_id}: no question list (<ol class=nounderline>)")
    cuts = [cut_element(source, toc, "ol")]
    marks = list(re.finditer(r'<a name="q(\d+)"></a>\s*<p><b>\((\d+)\)(.*?)</b></p>', source, re.DOTALL))
    items = []
    for k, m in enumerate(marks):
        end = marks[k + 1].start() if k + 1 < len(marks) else source.find("<p align=\"center\"><small>", m.end())
        items.append(FaqItem(doc_id, int(m.group(2)), text_of(m.group(3)), source[m.end():end]))
        cuts.append((m.start(), m.end()))
    return _cut(source, cuts), items


def _cut(source: str, cuts: list[tuple[int, int]]) -> str:
    out, pos = [], 0
    for start, end in sorted(cuts):
        if start < pos:
            raise BuildError(f"overlapping cuts at offset {start}")
        out.append(source[pos:start])
        pos = end
    return "".join(out) + source[pos:]


def answer_quotes(answer_html: str) -> list[str]:
    """The required evidence of an answer, as one quote per required group: its leading text,
    whole sentences (of paragraphs or list items) from its first text or list block, 20 to 70
    words, running into the next block when the first is shorter than 12 words or ends with a
    colon. When that text ends with a colon and a code block follows ("The syntax is as
    follows:"), the code's first lines (up to 40 words and 300 characters) are a second group: ragdx's chunker puts
    code in chunks of its own, so one quote across both could never sit in one chunk. Empty when
    the answer has under 8 words of text before its first code block."""
    _, parsed = parse(answer_html.encode("utf-8"), "html", "answer")
    taken: list[str] = []
    words = 0

    def enough() -> bool:
        return bool(taken) and not taken[-1].rstrip().endswith(":")

    blocks = list(parsed.blocks)
    next_block = len(blocks)
    for b, block in enumerate(blocks):
        if block.kind in (BlockKind.CODE, BlockKind.TABLE, BlockKind.HEADING):
            if taken:
                next_block = b
                break
            continue
        text = parsed.text[block.start:block.end]
        units = [u for line in text.split("\n") for u in _SENTENCE_END.split(line)]
        full = False
        for unit in units:
            n = len(unit.split())
            if (words >= 20 and enough()) or (words and words + n > 70):
                full = True
                break
            taken.append(unit)
            words += n
        if full or (words >= 12 and enough()):
            next_block = b + 1
            break
    if words < 8:
        return []
    quotes = [" ".join(taken)]
    if not enough() and next_block < len(blocks) and blocks[next_block].kind is BlockKind.CODE:
        code = parsed.text[blocks[next_block].start:blocks[next_block].end]
        lines, n = [], 0
        for line in code.split("\n"):
            if n and (n + len(line.split()) > 40 or len("\n".join(lines + [line])) > 300):
                break
            lines.append(line)
            n += len(line.split())
        if "".join(lines).strip():
            quotes.append("\n".join(lines))
    return quotes


def faq_queries(items: list[FaqItem], parsed: ParsedDocument, indexed_raw: str, corpus: str) -> list[dict]:
    queries = []
    plain = text_of(indexed_raw)
    for item in items:
        if find_quote(plain, item.question):
            raise BuildError(f"{item.doc_id}: the question {item.question!r} is still in the indexed copy")
        quotes = answer_quotes(item.answer_html)
        if not quotes:
            continue
        for quote in quotes:
            if not find_quote(parsed.text, quote):
                raise BuildError(f"{item.doc_id} question {item.number}: the answer quote {quote[:80]!r} is "
                                 "not in the parsed text of the indexed copy")
        page = item.doc_id.rsplit("/", 1)[-1].removesuffix(".html")
        queries.append({
            "id": f"faq-{corpus}-{page}-{item.number:02d}", "question": item.question,
            "principal": PUBLIC, "answerable": True,
            "required": [[{"doc": item.doc_id, "quote": quote}] for quote in quotes],
            "answer": "\n".join(quotes), "tags": ["faq", corpus],
            "metadata": {"source": "faq", "page": item.doc_id}})
    return queries


# -- hand-written labels --------------------------------------------------------------------------

class Corpus:
    """The parsed text of each document version, parsed on first use."""

    def __init__(self, entries: list[dict], base: Path) -> None:
        self.entries = {(e["doc_id"], e["version"]): e for e in entries}
        self.current = {e["doc_id"]: e["version"] for e in entries if e["status"] == "current"}
        self.base = base
        self._parsed: dict[tuple[str, str], str] = {}

    def text(self, doc_id: str, version: str) -> str:
        key = (doc_id, version)
        if key not in self._parsed:
            path = Path(self.entries[key]["path"])
            path = path if path.is_absolute() else self.base / path
            self._parsed[key] = parse(path.read_bytes(), "html", str(path))[1].text
        return self._parsed[key]

    def versions(self, doc_id: str) -> list[str]:
        return [v for (d, v) in self.entries if d == doc_id]


def check_label(query: dict, corpus: Corpus) -> None:
    """Every alternative's quote in its document (the version it pins, else the current one).

    Raises:
        BuildError: naming the label id, the document and the quote.
    """
    qid = query["id"]
    for field_name in ("required", "restricted_required"):
        for group in query.get(field_name, []):
            for alt in group:
                doc, quote, version = alt["doc"], alt.get("quote"), alt.get("version")
                if not corpus.versions(doc):
                    raise BuildError(f"label {qid!r}: document {doc!r} is not in the corpus")
                if version is None:
                    version = corpus.current.get(doc)
                if version not in corpus.versions(doc):
                    raise BuildError(f"label {qid!r}: {doc!r} has no version {version!r} "
                                     f"(stored: {', '.join(corpus.versions(doc))})")
                if quote is None:
                    raise BuildError(f"label {qid!r}: {field_name} alternatives must be quotes")
                if not find_quote(corpus.text(doc, version), quote):
                    raise BuildError(f"label {qid!r}: quote {quote!r} not found in {doc}@{version}")
                restricted = acl_of(doc) == STAFF
                if field_name == "required" and restricted:
                    raise BuildError(f"label {qid!r}: required evidence {doc!r} is restricted; "
                                     "use restricted_required with answerable false")
                if field_name == "restricted_required" and not restricted:
                    raise BuildError(f"label {qid!r}: restricted_required names {doc!r}, which is public")


def load_labels(path: Path) -> list[dict]:
    labels = []
    with path.open(encoding="utf-8") as f:
        for line, text in enumerate(f, start=1):
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
                parse_query(obj, str(path), line)  # ragdx's own validation of the format
            except (json.JSONDecodeError, InputError) as exc:
                raise BuildError(f"{path}:{line}: {exc}") from None
            kind = (obj.get("tags") or [""])[0]
            if kind not in KINDS[1:]:
                raise BuildError(f"{path}:{line}: label {obj.get('id')!r}: the first tag must be one of "
                                 f"{', '.join(KINDS[1:])}, not {kind!r}")
            if (kind in ("unanswerable", "restricted")) == obj.get("answerable", True):
                raise BuildError(f"{path}:{line}: label {obj['id']!r}: {kind} questions are "
                                 f"{'not ' if kind in ('unanswerable', 'restricted') else ''}answerable")
            obj.setdefault("principal", PUBLIC)
            labels.append(obj)
    return labels


def restricted_leaks(labels: list[dict], entries: list[dict], corpus: Corpus) -> list[str]:
    """Restricted questions whose quote a public document also holds."""
    quotes = [(q["id"], alt["quote"]) for q in labels for group in q.get("restricted_required", [])
              for alt in group]
    leaks = []
    for e in entries:
        if e["acl"] == STAFF:
            continue
        text = corpus.text(e["doc_id"], e["version"])
        leaks += [f"label {qid!r}: {quote[:60]!r} is in public {e['doc_id']}@{e['version']}"
                  for qid, quote in quotes if find_quote(text, quote)]
    return leaks


def missing_alternatives(labels: list[dict], entries: list[dict], corpus: Corpus) -> list[str]:
    """Current public pages that hold a hand-written quote word for word but are not yet an
    alternative of its group (SQLite's capi3ref.html repeats every c3ref/ page, for one)."""
    out = []
    current = [e for e in entries if e["status"] == "current" and e["acl"] != STAFF]
    for q in labels:
        for g, group in enumerate(q.get("required", [])):
            named = {alt["doc"] for alt in group}
            for alt in group:
                if alt.get("version") not in (None, corpus.current.get(alt["doc"])):
                    continue
                out += [f"label {q['id']!r} group {g}: {e['doc_id']} also holds {alt['quote'][:60]!r}"
                        for e in current if e["doc_id"] not in named
                        and find_quote(corpus.text(e["doc_id"], e["version"]), alt["quote"])]
    return out


# -- the split -------------------------------------------------------------------------------------

CORPUS_TAGS = ("python", "sqlite", "cross")


def stratum(query: dict) -> str:
    """The kind (first tag); for a label with ``metadata.batch``, the kind, the batch and the
    manual (``python``, ``sqlite`` or ``cross``): a batch of questions added later is dealt on its
    own, each manual's half and half, so the questions already there keep their half."""
    batch = (query.get("metadata") or {}).get("batch")
    if not batch:
        return query["tags"][0]
    corpus = next((t for t in query["tags"] if t in CORPUS_TAGS), "")
    return f"{query['tags'][0]}:{batch}:{corpus}"


def split(queries: list[dict], seed: int) -> dict[str, str]:
    """Query id -> ``fit`` or ``test``: within each stratum (:func:`stratum`), a seeded shuffle
    dealt alternately."""
    halves = {}
    for name in sorted({stratum(q) for q in queries}):
        ids = sorted(q["id"] for q in queries if stratum(q) == name)
        random.Random(f"{seed}:{name}").shuffle(ids)
        for n, qid in enumerate(ids):
            halves[qid] = "test" if n % 2 == 0 else "fit"
    return halves


# -- the build -----------------------------------------------------------------------------------

def build(out: Path, labels_path: Path, seed: int, allow_fetch: bool, check_restricted: bool = False,
          suggest: bool = False) -> dict:
    started = time.perf_counter()
    srcs = sources()
    for src in srcs:
        if src.html is None:
            if not (out / "debian" / src.release / src.subdir).is_dir() and not allow_fetch:
                raise BuildError(f"{src.package} ({src.release}) is not under {out / 'debian'}; "
                                 "run without --no-fetch to download it")
            src.html = fetch(src, out)
        elif not src.html.is_dir():
            raise BuildError(f"{src.html} is missing: apt-get install {src.package}")
        check_release(src)
        src.pages = list_pages(src)
    by_key = {f"{s.corpus}-{s.version}": s for s in srcs}
    docs_dir = out / "docs"
    if docs_dir.exists():
        shutil.rmtree(docs_dir)
    entries, queries = [], []
    faq_pages = {"python": lambda rel: rel.startswith("faq/") and rel != "faq/index.html",
                 "sqlite": lambda rel: rel == "faq.html"}
    for src in srcs:
        assert src.html is not None
        keep = None
        if src.only_if_in:
            other = by_key[src.only_if_in]
            assert other.html is not None
            keep = {p.relative_to(other.html).as_posix() for p in other.pages}
        for page in src.pages:
            rel = page.relative_to(src.html).as_posix()
            if keep is not None and rel not in keep:
                continue
            doc_id = f"{src.corpus}/{rel}"
            path = page
            if src.status == "current" and faq_pages[src.corpus](rel):
                raw = page.read_text(encoding="utf-8")
                strip = strip_python_faq if src.corpus == "python" else strip_sqlite_faq
                indexed, items = strip(doc_id, raw)
                path = docs_dir / src.corpus / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(indexed, encoding="utf-8")
                _, parsed = parse(indexed.encode("utf-8"), "html", str(path))
                queries += faq_queries(items, parsed, indexed, src.corpus)
            entries.append({"doc_id": doc_id, "path": str(path), "version": src.version,
                            "acl": acl_of(doc_id), "status": src.status, "title": page_title(page),
                            "metadata": {"corpus": src.corpus, "debian": f"{src.package} ({src.release})",
                                         "faq_questions_removed": path != page}})
    # the superseded version first, so the manifest reads as the document's history
    entries.sort(key=lambda e: (e["doc_id"], e["status"] == "current"))
    corpus = Corpus(entries, out)
    labels = load_labels(labels_path)
    problems = []
    for label in labels:
        try:
            check_label(label, corpus)
        except BuildError as exc:
            problems.append(str(exc))
    if problems:
        raise BuildError(f"{len(problems)} label(s) do not match the corpus:\n  " + "\n  ".join(problems))
    if suggest:
        for line in missing_alternatives(labels, entries, corpus):
            print(f"suggestion: {line}", file=sys.stderr)
    if check_restricted:
        leaks = restricted_leaks(labels, entries, corpus)
        if leaks:
            raise BuildError(f"{len(leaks)} restricted quote(s) are also in public documents:\n  " + "\n  ".join(leaks))
    queries += labels
    ids = Counter(q["id"] for q in queries)
    if dupes := [i for i, n in ids.items() if n > 1]:
        raise BuildError(f"duplicate query ids: {', '.join(dupes)}")
    halves = split(queries, seed)
    out.mkdir(parents=True, exist_ok=True)
    _write_jsonl(out / "manifest.jsonl", entries)
    _write_jsonl(out / "queries.jsonl", queries)
    for half in ("fit", "test"):
        _write_jsonl(out / f"queries.{half}.jsonl", [q for q in queries if halves[q["id"]] == half])
    counts = {
        "documents": len({e["doc_id"] for e in entries}), "versions": len(entries),
        "versions_by_source": {f"{s.corpus} {s.version} ({s.status})": sum(
            1 for e in entries if e["doc_id"].startswith(s.corpus + "/") and e["version"] == s.version)
            for s in srcs},
        "restricted_versions": sum(1 for e in entries if e["acl"] == STAFF),
        "queries": len(queries),
        "by_kind": {k: {h: sum(1 for q in queries if q["tags"][0] == k and halves[q["id"]] == h)
                        for h in ("fit", "test")} for k in KINDS},
        "by_tag": {t: {h: sum(1 for q in queries if t in q["tags"] and halves[q["id"]] == h)
                       for h in ("fit", "test")}
                   for t in sorted({t for q in queries for t in q["tags"]})},
    }
    info = {"out": str(out), "seed": seed, "labels": str(labels_path.relative_to(REPO)
                                                         if labels_path.is_relative_to(REPO) else labels_path),
            "sources": [{"corpus": s.corpus, "version": s.version, "status": s.status,
                         "package": s.package, "release": s.release, "html": str(s.html),
                         "pages": len(s.pages)} for s in srcs],
            "restricted": sorted(RESTRICTED) + [p + "*" for p in RESTRICTED_PREFIXES],
            "counts": counts, "seconds": round(time.perf_counter() - started, 2)}
    (out / "build.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return info


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    tmp.replace(path)


def table(info: dict) -> str:
    c = info["counts"]
    lines = [(f"corpus: {c['documents']} documents, {c['versions']} versions "
              f"({c['restricted_versions']} restricted to staff)")]
    lines += [f"  {name}: {n}" for name, n in c["versions_by_source"].items()]
    lines += ["", f"{'kind / tag':<18} {'fit':>5} {'test':>5} {'all':>5}"]
    for k, halves in c["by_kind"].items():
        lines.append(f"{k:<18} {halves['fit']:>5} {halves['test']:>5} {halves['fit'] + halves['test']:>5}")
    fit = sum(h["fit"] for h in c["by_kind"].values())
    test = sum(h["test"] for h in c["by_kind"].values())
    lines.append(f"{'all':<18} {fit:>5} {test:>5} {fit + test:>5}")
    lines.append("")
    for t, halves in c["by_tag"].items():
        if t not in KINDS:
            lines.append(f"{'tag ' + t:<18} {halves['fit']:>5} {halves['test']:>5} "
                         f"{halves['fit'] + halves['test']:>5}")
    lines.append(f"\nwritten to {info['out']} in {info['seconds']:.1f} s (seed {info['seed']})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    ap.add_argument("--labels", type=Path, default=LABELS, help="the hand-written labels (JSONL)")
    ap.add_argument("--seed", type=int, default=0, help="the split's seed (default 0)")
    ap.add_argument("--check-restricted", action="store_true",
                    help="also parse every public page and fail when it holds a restricted question's quote")
    ap.add_argument("--suggest-alternatives", action="store_true",
                    help="also list current public pages holding a hand-written quote that are not yet an alternative")
    ap.add_argument("--no-fetch", action="store_true",
                    help="never download the bullseye packages (fail when they are not unpacked yet)")
    args = ap.parse_args(argv)
    try:
        info = build(args.out.resolve(), args.labels, args.seed, not args.no_fetch, args.check_restricted,
                     args.suggest_alternatives)
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(table(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
