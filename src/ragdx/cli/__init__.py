"""The ``ragdx`` command line: a thin layer over the library.

Data goes to stdout (or files); logs and progress go to stderr. The exit codes are listed in
one place, :mod:`ragdx.errors`: 0 success, 1 an internal failure, 2 bad usage or bad input (the
message names what is wrong), 3 ``ragdx recheck``'s changed evidence, 4 ``ragdx run --fault``,
5 ``ragdx run`` finished with failed items.

One module per command group, each command's handler (``cmd_NAME``) beside its arguments
(``_args_NAME``): :mod:`~ragdx.cli.corpus` (ingest, delete, docs, evidence), :mod:`~ragdx.cli.index`
(build-encoder, index), :mod:`~ragdx.cli.run` (ask, run, recheck, ablate, fit, demo),
:mod:`~ragdx.cli.diagnose` (compare, diagnose, serve, export, eval) and :mod:`~ragdx.cli.label`
(label); what they share is in :mod:`~ragdx.cli._common`. Each imports the library inside its
handlers, so that ``ragdx --help`` stays fast.
"""

from __future__ import annotations

import argparse
import logging
import sqlite3
import sys
from typing import Sequence

from ragdx.cli._common import _UsageError, log
from ragdx.cli.corpus import _args_delete, _args_docs, _args_evidence, _args_ingest, cmd_delete, cmd_docs, \
    cmd_evidence, cmd_ingest
from ragdx.cli.diagnose import _args_compare, _args_diagnose, _args_eval, _args_export, _args_serve, cmd_compare, \
    cmd_diagnose, cmd_eval, cmd_export, cmd_serve
from ragdx.cli.index import _args_build_encoder, _args_index, cmd_build_encoder, cmd_index
from ragdx.cli.label import _args_label, cmd_label
# the exit codes of ragdx recheck and ragdx run --fault stay importable from here (tests do)
from ragdx.cli.run import _FAULT_EXIT, RECHECK_CHANGED, _args_ablate, _args_ask, _args_demo, _args_fit, _args_recheck, \
    _args_run, cmd_ablate, cmd_ask, cmd_demo, cmd_fit, cmd_recheck, cmd_run, print_answer

__all__ = ["RECHECK_CHANGED", "build_parser", "cmd_ablate", "cmd_ask", "cmd_build_encoder", "cmd_compare", "cmd_delete",
           "cmd_demo", "cmd_diagnose", "cmd_docs", "cmd_eval", "cmd_evidence", "cmd_export", "cmd_fit", "cmd_index",
           "cmd_ingest", "cmd_label", "cmd_recheck", "cmd_run", "cmd_serve", "log", "main", "print_answer"]


def build_parser() -> argparse.ArgumentParser:
    """The CLI's parser: each command's arguments are declared beside its handler (``_args_NAME``
    after ``cmd_NAME``, in its group's module); the help lists them in this order."""
    parser = argparse.ArgumentParser(prog="ragdx", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log more to stderr")
    parser.add_argument("--version", action="version", version=f"ragdx {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (_args_ingest, _args_ask, _args_build_encoder, _args_index, _args_delete, _args_docs, _args_evidence,
                _args_run, _args_recheck, _args_ablate, _args_compare, _args_diagnose, _args_label, _args_serve,
                _args_export, _args_eval, _args_fit, _args_demo):
        add(sub)
    return parser


def _version() -> str:
    from ragdx import __version__
    return __version__


class _Stderr(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record is logged: the CLI's handler outlives a
    ``main()`` called from Python (a notebook, a test) whose ``sys.stderr`` was replaced and closed."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    from ragdx._jsonl import bad_unicode
    for value in sys.argv[1:] if argv is None else argv:  # bytes that are not UTF-8 on the command line
        if bad_unicode(value):
            print(f"ragdx {args.command}: error: argument {value!r} is {bad_unicode(value)}", file=sys.stderr)
            return 2
    handler = _Stderr()  # logs to stderr, data to stdout
    handler.setFormatter(logging.Formatter("ragdx: %(message)s"))
    log.handlers[:] = [handler]
    log.setLevel(logging.DEBUG if args.verbose else logging.INFO)
    log.propagate = False
    from ragdx.errors import RagdxError
    from ragdx.progress import quiet
    try:
        with quiet(getattr(args, "quiet", False)):
            return args.func(args)
    except RagdxError as exc:
        print(f"ragdx {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except _UsageError as exc:
        print(f"ragdx {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except sqlite3.IntegrityError as exc:  # a constraint refused a write: the store is not damaged
        print(f"ragdx {args.command}: error: SQLite refused a write ({exc}): another process changed the "
              "store while this command ran, or this is a bug in ragdx; the refused write was not made "
              "and the store is intact: run the command again", file=sys.stderr)
        return 2
    except sqlite3.DatabaseError as exc:  # a lock another process held too long, or a page found damaged
        store = getattr(args, "store", None) or "the store"
        from ragdx.store._common import is_lock
        if is_lock(exc):
            print(f"ragdx {args.command}: error: {exc}: another process held a lock on {store} (or on a "
                  "file beside it: its result cache, a run folder's run.db) for longer than this command "
                  "waits; nothing is damaged and nothing was half-written: run the command again when "
                  "the other process has finished", file=sys.stderr)
            return 2
        print(f"ragdx {args.command}: error: {store}: cannot read the store: {exc} (it fails "
              "SQLite's integrity check; restore a copy or ingest into a new store)", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        print(f"ragdx {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception:  # a bug: its own exit code, never one a verdict uses (compare's 1 is a failed gate)
        import traceback
        from ragdx.errors import EXIT_CRASH
        traceback.print_exc()
        print(f"ragdx {args.command}: internal error: this is a bug in ragdx (the traceback is above); "
              f"exit {EXIT_CRASH}, a code no verdict uses", file=sys.stderr)
        return EXIT_CRASH
