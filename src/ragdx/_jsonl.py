"""Reading JSONL input files with errors that name the file, the line and the field.

Every input is strict JSON that ragdx can store and print: ``NaN`` and ``Infinity`` are refused,
an integer must fit SQLite's 64 bits, a number too large for a float (``1e999``) is refused,
nesting stops at :data:`MAX_DEPTH` levels, and a string with a lone surrogate (an escape such as
``"\\ud800"`` that is no character) is refused, each naming the file, the line and the field.
JSON carried inside a string field (an OpenInference attribute) is held to the same rules
(:func:`loads_embedded`).
"""

from __future__ import annotations

import json
import math
import unicodedata
from pathlib import Path
from typing import Any, Iterator

from ragdx.errors import InputError

_MISSING = object()

#: The deepest nesting of arrays and objects an input line may have.
MAX_DEPTH = 64
#: the most characters one line of a JSONL file (a query set, a trace file, a manifest) may have:
#: a ragdx trace of 200 candidates with their texts is well under a megabyte
MAX_LINE_CHARS = 32 * 1024 * 1024
_INT_LIMIT = 2 ** 63  # SQLite's integers are signed 64-bit


def _parse_int(text: str) -> int:
    # checked before converting: int() of a 5,000-digit string is itself an error
    if len(text.lstrip("-")) > 19 or not -_INT_LIMIT <= int(text) < _INT_LIMIT:
        raise ValueError(f"the integer {text[:24]}{'...' if len(text) > 24 else ''} is out of range "
                         f"(at most {_INT_LIMIT - 1})")
    return int(text)


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number (use a number or null)")


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999 is a valid JSON number that no float holds
        raise ValueError(f"the number {text[:24]}{'...' if len(text) > 24 else ''} is out of range")
    return value


_DECODER = json.JSONDecoder(parse_int=_parse_int, parse_float=_parse_float, parse_constant=_refuse_constant)


def _strict(text: str) -> Any:
    return _DECODER.decode(text)  # one decoder for every line (json.loads with hooks builds one each time)


def loads(text: str, *, file: str, line: int | None = None) -> Any:
    """Strict JSON (see the module's docstring), its problems reported as :class:`InputError`."""
    try:
        value = _strict(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"malformed JSON at column {exc.colno}: {exc.msg}", file=file, line=line) from None
    except RecursionError:
        raise InputError(f"JSON nested deeper than {MAX_DEPTH} levels", file=file, line=line) from None
    except ValueError as exc:
        raise InputError(f"unreadable JSON: {exc}", file=file, line=line) from None
    check_strings(value, file=file, line=line)
    return value


def loads_embedded(text: str, *, file: str, line: int | None, field: str) -> Any:
    """The JSON value a string field carries (an OpenInference attribute such as ``output.value``),
    or the text itself when it is not JSON. The value is held to a line's rules (nesting, numbers,
    Unicode); its problems name the field and the place inside it. ``text`` is valid Unicode (a
    string of a line :func:`loads` read), so only a ``\\u`` escape in it can make a lone surrogate,
    and only as many brackets as the limit can nest that deep: the walk is skipped otherwise.

    Raises:
        InputError: naming the file, the line and the field.
    """
    try:
        value = _strict(text)
    except json.JSONDecodeError:
        return text  # plain text, not JSON
    except RecursionError:
        raise InputError(f"the JSON in this field is nested deeper than {MAX_DEPTH} levels", file=file,
                         line=line, field=field) from None
    except ValueError as exc:
        raise InputError(f"unreadable JSON in this field: {exc}", file=file, line=line, field=field) from None
    escapes = "\\u" in text
    if escapes or text.count("[") + text.count("{") > MAX_DEPTH:
        check_strings(value, file=file, line=line, field=field, strings=escapes)
    return value


def bad_unicode(text: str) -> str | None:
    """What makes ``text`` invalid Unicode (a lone surrogate, where), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"not valid Unicode: a lone surrogate {text[exc.start]!r} at character {exc.start}"
    return None


def check_strings(value: Any, *, file: str, line: int | None = None, field: str = "",
                  strings: bool = True) -> None:
    """Refuse nesting deeper than :data:`MAX_DEPTH` and strings (keys too) that are not valid
    Unicode, naming the field (walked without recursion; ``field`` names where ``value`` is;
    ``strings=False`` checks the nesting only)."""
    stack: list[tuple[Any, str, int]] = [(value, field, 0)]
    while stack:
        node, where, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise InputError(f"JSON nested deeper than {MAX_DEPTH} levels", file=file, line=line,
                             field=where or None)
        if isinstance(node, str) and strings:
            problem = bad_unicode(node)
            if problem:
                raise InputError(problem, file=file, line=line, field=where or None)
        elif isinstance(node, dict):
            for key, item in node.items():
                problem = bad_unicode(key) if strings else None
                if problem:
                    raise InputError(f"a field name is {problem}", file=file, line=line,
                                     field=where or None)
                stack.append((item, f"{where}.{key}" if where else key, depth + 1))
        elif isinstance(node, list):
            stack += [(item, f"{where}[{i}]", depth + 1) for i, item in enumerate(node)]


def control_character(text: str) -> str | None:
    """Where an id holds a control character (NUL, ESC, DEL, ...) or a lone surrogate, in words;
    None when it holds neither. Such ids cannot be typed, printed or deleted safely."""
    for i, ch in enumerate(text):
        if unicodedata.category(ch) in ("Cc", "Cs"):
            return f"holds the control character {ch!r} at position {i}"
    return None


def read_text(path: Path, *, what: str = "file") -> str:
    """Read a UTF-8 text file (a BOM is allowed).

    Raises:
        InputError: the file is missing, unreadable or not valid UTF-8 (naming the byte offset).
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{what} not found", file=str(path)) from None
    except IsADirectoryError:
        raise InputError(f"{what} is a directory, expected a file", file=str(path)) from None
    except OSError as exc:
        raise InputError(f"cannot read {what}: {exc.strerror}", file=str(path)) from None
    return decode_utf8(data, str(path))


def decode_utf8(data: bytes, name: str) -> str:
    """Decode UTF-8 bytes, naming the file and the first undecodable byte on failure."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(f"not valid UTF-8: byte 0x{data[exc.start]:02x} at offset {exc.start} "
                         f"cannot be decoded ({exc.reason})", file=name, line=line) from None


def iter_jsonl(path: Path, *, what: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-blank line of a JSONL file.

    Raises:
        InputError: a line is not JSON or not a JSON object, naming the line and the column.
    """
    text = read_text(path, what=what)
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if len(line) > MAX_LINE_CHARS:  # reading it would take minutes and saying nothing
            raise InputError(f"the line has {len(line):,} characters, more than the {MAX_LINE_CHARS:,} a {what} line "
                             "may have", file=str(path), line=number)
        obj = loads(line, file=str(path), line=number)
        if not isinstance(obj, dict):
            raise InputError(f"expected a JSON object, got {type(obj).__name__}",
                             file=str(path), line=number)
        yield number, obj


class Fields:
    """Typed access to one JSON object's fields, with errors that name file, line and field."""

    def __init__(self, obj: dict[str, Any], file: str, line: int | None, prefix: str = "") -> None:
        self.obj = obj
        self.file = file
        self.line = line
        self.prefix = prefix

    def error(self, name: str, message: str) -> InputError:
        return InputError(message, file=self.file, line=self.line, field=self.prefix + name)

    def check_known(self, known: set[str], hint: str = "") -> None:
        unknown = sorted(set(self.obj) - known)
        if unknown:
            raise self.error(unknown[0], f"unknown field; valid fields are {', '.join(sorted(known))}"
                             + (f" ({hint})" if hint else ""))

    def get(self, name: str, kind: type | tuple[type, ...], default: Any = _MISSING) -> Any:
        value = self.obj.get(name, _MISSING)
        if value is _MISSING or value is None and default is not _MISSING:
            if default is _MISSING:
                raise self.error(name, "required field is missing")
            return default
        # bool is an int in Python; a field typed int must not accept true/false
        if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _as_tuple(kind)):
            names = " or ".join(k.__name__ for k in _as_tuple(kind))
            raise self.error(name, f"expected {_json_name(names)}, got {json.dumps(value)}")
        if isinstance(value, str) and not value.strip() and default is _MISSING:
            raise self.error(name, "must not be empty")
        return value

    def ident(self, name: str, default: Any = _MISSING) -> Any:
        """A string naming something (a document, a version, a query): no control characters."""
        value = self.get(name, str, default)
        if isinstance(value, str):
            self._check_ident(name, value)
        return value

    def _check_ident(self, name: str, value: str) -> None:
        problem = control_character(value)
        if problem:
            raise self.error(name, f"{json.dumps(value)} {problem}; an id may not hold one")

    def str_list(self, name: str, default: tuple[str, ...], *, ident: bool = False) -> tuple[str, ...]:
        """A list of non-empty strings; with ``ident``, each is an id (no control characters)."""
        value = self.get(name, list, default=None)
        if value is None:
            return default
        if not all(isinstance(v, str) and v for v in value):
            raise self.error(name, f"expected a list of non-empty strings, got {json.dumps(value)}")
        if ident:
            for i, v in enumerate(value):
                self._check_ident(f"{name}[{i}]", v)
        return tuple(value)


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _json_name(names: str) -> str:
    return (names.replace("str", "a string").replace("list", "a list").replace("dict", "an object")
            .replace("bool", "true or false").replace("int", "an integer").replace("float", "a number"))
