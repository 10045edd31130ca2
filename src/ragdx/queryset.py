"""Reading a query set (JSONL, docs/formats.md) into :class:`~ragdx.types.Query` values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ragdx._jsonl import Fields, iter_jsonl
from ragdx.errors import InputError
from ragdx.types import Alternative, Principal, Query

_FIELDS = {"id", "question", "principal", "answerable", "required", "restricted_required", "answer",
           "tags", "metadata"}
_ALT_FIELDS = {"doc", "quote", "start", "end", "id", "version"}


def parse_principal(value: Any, f: Fields, name: str = "principal") -> Principal:
    """A principal object ``{"user", "groups"}``; both fields optional."""
    if value is None:
        return Principal()
    if not isinstance(value, dict):
        raise f.error(name, f"expected an object with 'user' and 'groups', got {value!r}")
    p = Fields(value, f.file, f.line, prefix=f"{name}.")
    p.check_known({"user", "groups"})
    groups = p.str_list("groups", ("public",), ident=True)
    return Principal(p.ident("user", default="anonymous"), groups)


def _groups(f: Fields, name: str) -> tuple[tuple[Alternative, ...], ...]:
    value = f.get(name, list, default=[])
    groups = []
    for g, group in enumerate(value):
        if not isinstance(group, list) or not group:
            raise f.error(f"{name}[{g}]", "each required group must be a non-empty list of "
                          "alternatives (the group is an OR of them)")
        alternatives = []
        for a, alt in enumerate(group):
            where = f"{name}[{g}][{a}]"
            if not isinstance(alt, dict):
                raise f.error(where, f"expected an object, got {alt!r}")
            af = Fields(alt, f.file, f.line, prefix=f"{where}.")
            af.check_known(_ALT_FIELDS)
            version = af.ident("version", default=None)
            if "id" in alt:
                if set(alt) - {"id", "version"}:
                    raise f.error(where, "an alternative with 'id' takes no 'doc', 'quote' or offsets")
                alternatives.append(Alternative(id=af.ident("id"), version=version))
                continue
            doc = af.ident("doc")
            if "quote" in alt:
                if "start" in alt or "end" in alt:
                    raise f.error(where, "give either 'quote' or 'start'/'end', not both")
                alternatives.append(Alternative(doc=doc, quote=af.get("quote", str), version=version))
                continue
            if "start" not in alt and "end" not in alt:
                raise f.error(where, "an alternative needs 'quote', 'start' and 'end', or 'id'")
            start, end = af.get("start", int), af.get("end", int)
            if not 0 <= start < end:
                raise f.error(where, f"offsets must satisfy 0 <= start < end, got {start}..{end}")
            alternatives.append(Alternative(doc=doc, start=start, end=end, version=version))
        groups.append(tuple(alternatives))
    return tuple(groups)


#: the most characters a question may have (as ``ragdx label``'s readers bound it)
MAX_QUESTION_CHARS = 4_000


def parse_query(obj: dict[str, Any], file: str, line: int | None) -> Query:
    """Validate one query object.

    Raises:
        InputError: naming the file, line and field of what is wrong.
    """
    f = Fields(obj, file, line)
    f.check_known(_FIELDS)
    question = f.get("question", str)
    if len(question) > MAX_QUESTION_CHARS:
        raise f.error("question", f"{len(question):,} characters, more than the {MAX_QUESTION_CHARS:,} a question "
                                  "may have")
    return Query(
        id=f.ident("id"), question=question,
        principal=parse_principal(obj.get("principal"), f),
        answerable=f.get("answerable", bool, default=True), required=_groups(f, "required"),
        restricted_required=_groups(f, "restricted_required"),
        answer=f.get("answer", str, default=None), tags=f.str_list("tags", ()))


def load_queries(path: Path) -> list[Query]:
    """Read and validate a whole query set.

    Raises:
        InputError: a malformed line, a bad field, or a duplicate query id.
    """
    queries: list[Query] = []
    lines: dict[str, int] = {}
    for line, obj in iter_jsonl(Path(path), what="query set"):
        query = parse_query(obj, str(path), line)
        if query.id in lines:
            raise InputError(f"duplicate query id {query.id!r} (first on line {lines[query.id]})",
                             file=str(path), line=line, field="id")
        lines[query.id] = line
        queries.append(query)
    if not queries:
        raise InputError("the query set has no queries", file=str(path))
    return queries


def query_to_dict(query: Query) -> dict[str, Any]:
    """A query as its query-set line (the inverse of :func:`parse_query`; unset fields left out)."""
    def groups(gs: tuple[tuple[Alternative, ...], ...]) -> list[list[dict[str, Any]]]:
        return [[{k: v for k, v in (("doc", a.doc), ("quote", a.quote), ("start", a.start), ("end", a.end),
                                    ("id", a.id), ("version", a.version)) if v is not None} for a in g] for g in gs]
    out: dict[str, Any] = {"id": query.id, "question": query.question,
                           "principal": {"user": query.principal.user, "groups": list(query.principal.groups)},
                           "answerable": query.answerable, "required": groups(query.required)}
    if query.restricted_required:
        out["restricted_required"] = groups(query.restricted_required)
    if query.answer is not None:
        out["answer"] = query.answer
    if query.tags:
        out["tags"] = list(query.tags)
    return out

