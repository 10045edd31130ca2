"""Evaluation sets in the formats RAG teams already keep, read into :class:`EvalCase` values.

Formats (docs/label.md), each a mapping of its fields onto ragdx's:

| ragdx | RAGAS | DeepEval | plain |
|---|---|---|---|
| question | ``user_input`` | ``input`` | ``question`` |
| reference answer | ``reference`` | ``expected_output`` | ``answer`` or ``reference`` |
| reference contexts | ``reference_contexts`` | ``context`` | ``reference_contexts`` |
| the system's retrieved contexts | ``retrieved_contexts`` | ``retrieval_context`` | - |
| the system's response | ``response`` | ``actual_output`` | - |

Every format may also carry ragdx's own ``id``, ``principal`` and ``tags``. Containers: JSONL
(one object a line), JSON (an array of objects), CSV (a header row; a list column holds a JSON
array, or one string), and a Hugging Face dataset saved with ``save_to_disk`` (a folder; the
``datasets`` package, extra ``datasets``). A column no format knows is an error naming the
file, the line and the column, unless it is listed in ``ignore``; the format's other columns
(RAGAS's ``rubrics``, DeepEval's ``additional_metadata``, ...) are read and left alone.
"""

from __future__ import annotations

import ast
import csv
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

from ragdx._jsonl import Fields, iter_jsonl, loads, read_text
from ragdx.errors import InputError, MissingExtraError
from ragdx.queryset import MAX_QUESTION_CHARS, parse_principal
from ragdx.text import is_abstention
from ragdx.types import ChoiceEnum, Principal

__all__ = ["DatasetFormat", "EvalCase", "EvalSet", "read_eval_set", "case_trace"]


class DatasetFormat(ChoiceEnum):
    """Which tool's field names a dataset uses."""

    RAGAS = "ragas"
    DEEPEVAL = "deepeval"
    PLAIN = "plain"


# each format: ragdx's field -> the format's column (or columns, the first present wins)
_MAPS: dict[DatasetFormat, dict[str, tuple[str, ...]]] = {
    DatasetFormat.RAGAS: {"question": ("user_input",), "reference": ("reference",),
                          "reference_contexts": ("reference_contexts",),
                          "retrieved_contexts": ("retrieved_contexts",), "response": ("response",)},
    DatasetFormat.DEEPEVAL: {"question": ("input",), "reference": ("expected_output",),
                             "reference_contexts": ("context",), "retrieved_contexts": ("retrieval_context",),
                             "response": ("actual_output",)},
    DatasetFormat.PLAIN: {"question": ("question",), "reference": ("answer", "reference"),
                          "reference_contexts": ("reference_contexts",)},
}
# columns a format defines that ragdx reads past (a testset generator's or a tool's bookkeeping)
_OTHER: dict[DatasetFormat, frozenset[str]] = {
    DatasetFormat.RAGAS: frozenset({"multi_responses", "rubrics", "retrieved_context_ids", "reference_context_ids",
                                    "persona_name", "query_style", "query_length", "synthesizer_name"}),
    DatasetFormat.DEEPEVAL: frozenset({"name", "additional_metadata", "comments", "tools_called", "expected_tools",
                                       "token_cost", "completion_time", "source_file"}),
    DatasetFormat.PLAIN: frozenset(),
}
_OURS = frozenset({"id", "principal", "tags"})
_LISTS = ("reference_contexts", "retrieved_contexts")


@dataclass(frozen=True, slots=True)
class EvalCase:
    """One question of an evaluation set, in ragdx's words.

    ``retrieved_contexts`` and ``response`` are a system's output (None when the set has none);
    ``file`` and ``line`` say where the case was read (a row number for JSON arrays and
    datasets)."""

    id: str
    question: str
    reference: str | None
    reference_contexts: tuple[str, ...] = ()
    retrieved_contexts: tuple[str, ...] | None = None
    response: str | None = None
    principal: Principal | None = None
    tags: tuple[str, ...] = ()
    file: str = ""
    line: int = 0


@dataclass(frozen=True, slots=True)
class EvalSet:
    """An evaluation set read: its format, its cases, and which of ragdx's fields no case has
    (``missing``: the fields the format maps that its columns lack)."""

    path: str
    format: DatasetFormat
    cases: tuple[EvalCase, ...]
    missing: tuple[str, ...] = field(default_factory=tuple)

    def describe(self) -> str:
        """The mapping in words, with the fields missing."""
        mapped = ", ".join(f"{cols[0]} -> {ours}" for ours, cols in _MAPS[self.format].items()
                           if ours not in self.missing)
        lacks = f"; missing: {', '.join(self._named(m) for m in self.missing)}" if self.missing else ""
        return f"{self.path}: {self.format.value} format, {len(self.cases)} questions ({mapped}){lacks}"

    def _named(self, ours: str) -> str:
        return f"{' or '.join(_MAPS[self.format][ours])} ({ours.replace('_', ' ')})"

    def require(self, *fields: str, purpose: str) -> None:
        """Raise when a field ``purpose`` needs is missing from every case.

        Raises:
            InputError: naming the file, the format's column and what it is needed for.
        """
        lacking = [f for f in fields if f in self.missing]
        if lacking:
            raise InputError(f"the {self.format.value} dataset has no {', '.join(self._named(f) for f in lacking)} "
                             f"column: {purpose} needs it", file=self.path)


def _rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each row of the file or folder with its line (or row) number."""
    if path.is_dir():
        yield from _dataset_rows(path)
        return
    suffix = path.suffix.lower()
    if suffix == ".csv":
        text = read_text(path, what="evaluation set")
        reader = csv.DictReader(text.splitlines(keepends=True))
        if not reader.fieldnames:
            raise InputError("the CSV file has no header row", file=str(path))
        header = len(reader.fieldnames)
        start = 1
        try:
            for row in reader:
                line, start = start + 1, reader.line_num
                cells = header + len(row[None]) if None in row else sum(v is not None for v in row.values())
                if cells != header:  # a quote left open takes every line after it into one cell
                    opened = " (a quote opened here and never closed takes the lines after it into one cell)" \
                        if reader.line_num > line else ""
                    raise InputError(f"the row has {cells} cell{'s' if cells != 1 else ''}, the header {header}"
                                     + opened, file=str(path), line=line)
                yield reader.line_num, {k: _csv_value(v, k, str(path), reader.line_num) for k, v in row.items()
                                        if v != ""}
        except csv.Error as exc:
            raise InputError(f"not a CSV file this reader can read ({exc})", file=str(path),
                             line=reader.line_num) from None
        return
    if suffix == ".json":
        value = loads(read_text(path, what="evaluation set"), file=str(path))
        if isinstance(value, dict):  # {"test_cases": [...]} or {"goldens": [...]} or {"data": [...]}
            value = next((value[k] for k in ("test_cases", "goldens", "samples", "data") if k in value), value)
        if not isinstance(value, list):
            raise InputError("expected a JSON array of objects (or JSONL, one object a line)", file=str(path))
        for n, obj in enumerate(value, start=1):
            if not isinstance(obj, dict):
                raise InputError(f"item {n} is not a JSON object", file=str(path), line=n)
            yield n, obj
        return
    yield from iter_jsonl(path, what="evaluation set")


def _csv_value(value: str, column: str, file: str, line: int) -> Any:
    """A CSV cell: a list column's JSON array (or the Python list of strings RAGAS's
    ``EvaluationDataset.to_csv()`` writes, ``['a', "b's"]``), else the text."""
    if value.lstrip().startswith("[") and (column in ("reference_contexts", "retrieved_contexts", "context",
                                                      "retrieval_context", "tags")):
        try:
            return json.loads(value)
        except ValueError as exc:
            try:  # a literal, never evaluated: only a list of strings is taken
                listed = ast.literal_eval(value.strip())
            except (ValueError, SyntaxError):
                listed = None
            if isinstance(listed, list) and all(isinstance(x, str) for x in listed):
                return listed
            raise InputError(f"the cell starts with '[' but is neither a JSON array nor a Python list of "
                             f"strings: {exc}", file=file, line=line, field=column) from None
    if column == "principal":
        try:
            return json.loads(value)
        except ValueError:
            return {"groups": [g for g in re.split(r"[;,\s]+", value) if g]}
    return value


def _dataset_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """A Hugging Face dataset saved to disk (one split; a DatasetDict's folder names its split)."""
    try:
        import datasets
    except ImportError:
        raise MissingExtraError(f"{path} is a folder: reading a Hugging Face dataset saved to disk needs the "
                                "'datasets' package: pip install 'ragdx[datasets]'") from None
    if (path / "dataset_dict.json").is_file():
        splits = json.loads((path / "dataset_dict.json").read_text(encoding="utf-8")).get("splits", [])
        raise InputError(f"a dataset with several splits ({', '.join(splits)}): give one split's folder, "
                         f"e.g. {path / (splits[0] if splits else 'test')}", file=str(path))
    if not (path / "dataset_info.json").is_file():
        raise InputError("not a Hugging Face dataset saved to disk (no dataset_info.json)", file=str(path))
    dataset = datasets.load_from_disk(str(path))
    for n, row in enumerate(dataset, start=1):
        yield n, {k: v for k, v in dict(row).items() if v is not None}


def _detect(columns: Sequence[str], file: str, line: int) -> DatasetFormat:
    if "user_input" in columns:
        return DatasetFormat.RAGAS
    if "input" in columns:
        return DatasetFormat.DEEPEVAL
    if "question" in columns:
        return DatasetFormat.PLAIN
    raise InputError(f"cannot tell the dataset's format from its columns ({', '.join(columns)}): a RAGAS dataset "
                     "has 'user_input', a DeepEval one 'input', a plain one 'question'", file=file, line=line)


def _texts(f: Fields, name: str) -> tuple[str, ...]:
    value = f.get(name, (list, str), default=[])
    if isinstance(value, str):
        return (value,) if value.strip() else ()
    for n, item in enumerate(value):
        if not isinstance(item, str):
            raise f.error(name, f"item {n} is {type(item).__name__}, expected text")
    return tuple(value)


#: the most characters a row's field may have (a question, a reference answer, a response, each
#: context), and the most contexts in a row: bounds that keep a label or a diagnosis to seconds
MAX_CHARS = {"question": MAX_QUESTION_CHARS, "reference": 20_000, "response": 100_000, "context": 100_000}
MAX_CONTEXTS = 500


def _case(obj: dict[str, Any], fmt: DatasetFormat, file: str, line: int, ignore: frozenset[str]) -> EvalCase:
    obj = {k: v for k, v in obj.items() if v is not None}  # RAGAS and pandas write null for an empty field
    f = Fields(obj, file, line)
    mapping = _MAPS[fmt]
    known = {c for cols in mapping.values() for c in cols} | _OTHER[fmt] | _OURS | ignore
    for column in obj:
        if column not in known:
            raise InputError(f"unknown column for the {fmt.value} format (it has "
                             f"{', '.join(sorted(c for cols in mapping.values() for c in cols))}; and ragdx's id, "
                             "principal, tags); drop it, or name it in --ignore-column", file=file, line=line,
                             field=column)
    got: dict[str, Any] = {}
    for ours, cols in mapping.items():
        col = next((c for c in cols if c in obj), None)
        if col is None:
            continue
        if ours in _LISTS:
            got[ours] = _texts(f, col)
            if len(got[ours]) > MAX_CONTEXTS:
                raise InputError(f"{len(got[ours]):,} texts, more than the {MAX_CONTEXTS:,} a row may hold",
                                 file=file, line=line, field=col)
            sizes = [len(t) for t in got[ours]]
            if sizes and max(sizes) > MAX_CHARS["context"]:
                raise InputError(f"text {sizes.index(max(sizes))} has {max(sizes):,} characters, more than the "
                                 f"{MAX_CHARS['context']:,} a context may have", file=file, line=line, field=col)
        else:
            value = f.get(col, str)
            limit = MAX_CHARS[ours]
            if len(value) > limit:  # the claims of an 11 MB reference took minutes, with no word said
                raise InputError(f"{len(value):,} characters, more than the {limit:,} a {ours} may have",
                                 file=file, line=line, field=col)
            got[ours] = value if value.strip() or ours == "response" else None
    question = got.get("question")
    if question is None:
        raise InputError("the question is missing or empty", file=file, line=line,
                         field=mapping["question"][0])
    return EvalCase(id=str(f.get("id", (str, int), default=f"q{line}")), question=question,
                    reference=got.get("reference"), reference_contexts=got.get("reference_contexts", ()),
                    retrieved_contexts=got.get("retrieved_contexts"), response=got.get("response"),
                    principal=parse_principal(obj["principal"], f) if "principal" in obj else None,
                    tags=f.str_list("tags", ()), file=file, line=line)


def read_eval_set(path: Path, format: str = "auto", ignore: Sequence[str] = ()) -> EvalSet:
    """Read an evaluation set (JSONL, JSON, CSV, or a Hugging Face dataset folder).

    Args:
        path: the file or folder.
        format: ``auto`` (from the first row's columns), ``ragas``, ``deepeval`` or ``plain``.
        ignore: columns to read past.

    Raises:
        InputError: an unknown column, a missing question, a duplicate id, a bad value: each
            naming the file, the line (or row) and the column.
        MissingExtraError: a dataset folder without the ``datasets`` package.
    """
    path = Path(path)
    if not path.exists():
        raise InputError("no such file or folder", file=str(path))
    fmt: DatasetFormat | None = None if format == "auto" else DatasetFormat.parse(format, what="--format")
    cases: list[EvalCase] = []
    seen: dict[str, int] = {}
    columns: set[str] = set()
    for line, obj in _rows(path):
        if fmt is None:
            fmt = _detect(list(obj), str(path), line)
        case = _case(obj, fmt, str(path), line, frozenset(ignore))
        if case.id in seen:
            raise InputError(f"duplicate id {case.id!r} (first on line {seen[case.id]})", file=str(path),
                             line=line, field="id")
        seen[case.id] = line
        columns |= set(obj)
        cases.append(case)
    if fmt is None or not cases:
        raise InputError("the evaluation set has no rows", file=str(path))
    missing = tuple(ours for ours, cols in _MAPS[fmt].items() if not columns & set(cols))
    return EvalSet(str(path), fmt, tuple(cases), missing)


def case_trace(case: EvalCase, system: str | None = None) -> dict[str, Any] | None:
    """A case's system output as an imported trace line (docs/diagnosis.md): the retrieved
    contexts as the retrieval stage (in their order, ranks from 1) and as the context the
    generator read, then the response as the answer; None when the case has no output."""
    if case.retrieved_contexts is None and case.response is None:
        return None
    items = [{"id": f"{case.id}#ctx{n}", "text": text, "rank": n}
             for n, text in enumerate(case.retrieved_contexts or (), start=1)]
    trace: dict[str, Any] = {"query_id": case.id, "question": case.question,
                             "stages": [{"name": "retrieved_contexts", "kind": "retrieval", "items": items},
                                        {"name": "context", "kind": "context", "items": items}]}
    if case.response is not None:
        trace["answer"] = {"text": case.response, "abstained": is_abstention(case.response)}
    if system:
        trace["system"] = system
    return trace
