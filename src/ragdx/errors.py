"""The one exception tree of ragdx.

Every error ragdx raises on purpose is a :class:`RagdxError`. Its children say who is at fault,
which decides the CLI's exit code:

- :class:`InputError` (exit 2): the user's data is wrong: a manifest line, a query set field, a
  file that cannot be read or decoded, a quote that cannot be found. The message names the file,
  the line, the field and the bad value.
- :class:`ConfigError` (exit 2): a setting is unknown or has a value outside its valid choices;
  the message lists the valid ones. :class:`PromptTooLong`, one of them: a prompt longer than a
  local model's window (``generation.context_tokens``).
- :class:`MissingExtraError` (exit 2): an optional backend is not installed; the message names
  the ``pip install 'ragdx[EXTRA]'`` to run.
- :class:`SpaceMismatchError` (exit 2): a query encoded in one embedding space was about to be
  searched against vectors of another (same dimension does not mean same space).
- :class:`StoreError` (exit 2): the store given cannot be used as it is: missing, not a ragdx
  store, a newer or damaged schema, a file failing its integrity check, or locked by another
  writer for longer than the wait.

- :class:`ChatError` (exit 1): the chat endpoint failed after every retry.
- :class:`BrowserError` (exit 1): the headless browser the report's test helper drives failed.

Anything else that escapes is a bug in ragdx: the CLI prints its traceback and exits 70
(:data:`EXIT_CRASH`), a code no verdict uses (``ragdx compare``'s 1 is a failed gate).

The CLI's exit codes, all of them (the constants below):

| code | meaning |
|---|---|
| 0 (:data:`EXIT_OK`) | done |
| 1 (:data:`EXIT_BUG`) | a bug in ragdx, a chat endpoint or browser that failed, or a check that found problems (``index verify``) |
| 2 (:data:`EXIT_INPUT`) | bad usage or bad input: the message on stderr names the file, line, field or setting |
| 3 (:data:`EXIT_RECHECK_CHANGED`) | ``ragdx recheck``: the answer's evidence changed or expired |
| 4 (:data:`EXIT_FAULT`) | ``ragdx run --fault``: the worker stopped on purpose, as a crash would; stderr says where |
| 5 (:data:`EXIT_ITEMS_FAILED`) | ``ragdx run``: the run is done or this worker's part is, and N items failed (``evidence_changed_or_expired``); stderr names each |
| 70 (:data:`EXIT_CRASH`) | an unexpected error, a bug in ragdx: its traceback on stderr (no verdict uses 70) |
| 130 | interrupted (Ctrl-C) |
"""

from __future__ import annotations

__all__ = ["RagdxError", "InputError", "ConfigError", "PromptTooLong", "MissingExtraError", "SpaceMismatchError",
           "StoreError", "ChatError", "BrowserError"]

# the exit codes of the table above (module constants; ``__all__`` is the exception tree)
EXIT_OK = 0
EXIT_BUG = 1
EXIT_INPUT = 2
EXIT_RECHECK_CHANGED = 3
EXIT_FAULT = 4
EXIT_ITEMS_FAILED = 5
EXIT_CRASH = 70  # EX_SOFTWARE of sysexits.h


class RagdxError(Exception):
    """Base of every error ragdx raises on purpose."""

    exit_code = EXIT_BUG


class InputError(RagdxError):
    """Bad user input. The message names where: file, line, field, value.

    Args:
        message: what is wrong, in words a user can act on.
        file: the file the bad input came from, if any.
        line: the 1-based line number in that file, if any.
        field: the field name, if any.
    """

    exit_code = EXIT_INPUT

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 field: str | None = None) -> None:
        self.file = file
        self.line = line
        self.field = field
        self.detail = message
        where = ""
        if file is not None:
            where = str(file) + (f":{line}" if line is not None else "")
        if field is not None:
            where = f"{where} field '{field}'" if where else f"field '{field}'"
        super().__init__(f"{where}: {message}" if where else message)

    def __reduce__(self) -> tuple:
        # file, line and field survive pickling (an error raised in a worker process)
        return (_input_error, (type(self), self.detail, self.file, self.line, self.field))


def _input_error(cls: type, message: str, file: str | None, line: int | None,
                 field: str | None) -> "InputError":
    return cls(message, file=file, line=line, field=field)


class ConfigError(RagdxError):
    """A setting is unknown or invalid; the message names the key and the valid values.

    Args:
        message: what is wrong.
        key: the dotted setting (``generation.min_coverage``), if one is at fault.
    """

    exit_code = EXIT_INPUT

    def __init__(self, message: str, *, key: str | None = None) -> None:
        self.key = key
        super().__init__(message)

    def __reduce__(self) -> tuple:
        return (_config_error, (type(self), str(self), self.key))


def _config_error(cls: type, message: str, key: str | None) -> "ConfigError":
    return cls(message, key=key)


class PromptTooLong(ConfigError):
    """A prompt longer than a local model's window: how many tokens it had, and the window."""

    def __init__(self, message: str, *, key: str | None = None, tokens: int = 0, window: int = 0) -> None:
        super().__init__(message, key=key)
        self.tokens, self.window = tokens, window

    def __reduce__(self) -> tuple:
        return (_prompt_too_long, (str(self), self.key, self.tokens, self.window))


def _prompt_too_long(message: str, key: str | None, tokens: int, window: int) -> "PromptTooLong":
    return PromptTooLong(message, key=key, tokens=tokens, window=window)


class MissingExtraError(RagdxError):
    """An optional dependency is missing.

    Args:
        extra: the name of the ``ragdx`` extra that provides it.
        what: the component that needs it.
    """

    exit_code = EXIT_INPUT

    def __init__(self, extra: str, what: str) -> None:
        self.extra = extra
        super().__init__(f"{what} needs the optional dependency group '{extra}': "
                         f"pip install 'ragdx[{extra}]'")


class SpaceMismatchError(RagdxError):
    """Vectors of two embedding spaces were about to be compared; refused."""

    exit_code = EXIT_INPUT


class StoreError(RagdxError):
    """The store cannot be used as it is (missing, foreign, newer or damaged, locked); the message
    names the file."""

    exit_code = EXIT_INPUT


class ChatError(RagdxError):
    """The chat endpoint failed after every retry (the message says how it failed)."""


class BrowserError(RagdxError):
    """The headless browser (:mod:`ragdx.testing.browser`) could not be started or driven."""
