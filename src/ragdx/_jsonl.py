"""Reading JSONL input files with errors that name the file, the line and the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

from ragdx.errors import InputError

_MISSING = object()


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
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"malformed JSON at column {exc.colno}: {exc.msg}",
                             file=str(path), line=number) from None
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

    def str_list(self, name: str, default: tuple[str, ...]) -> tuple[str, ...]:
        value = self.get(name, list, default=None)
        if value is None:
            return default
        if not all(isinstance(v, str) and v for v in value):
            raise self.error(name, f"expected a list of non-empty strings, got {json.dumps(value)}")
        return tuple(value)


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _json_name(names: str) -> str:
    return (names.replace("str", "a string").replace("list", "a list").replace("dict", "an object")
            .replace("bool", "true or false").replace("int", "an integer").replace("float", "a number"))
