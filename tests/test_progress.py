"""The one progress line of long commands (ragdx.progress)."""

import io
import re

import pytest

from ragdx.progress import Progress, quiet


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_shows_counts_rate_and_time_left_on_a_terminal():
    out = Terminal()
    with Progress("parsing", 4, unit="documents", stream=out, every=0) as progress:
        assert list(progress.iterate(range(2))) == [0, 1]
        assert re.fullmatch(r"parsing: 2/4 documents \(50%\)  [\d,.]+/s, 0:00, 0:00 left", progress.line())
        progress.advance(2, "last.html")
    drawn = out.getvalue().split("\r")
    assert drawn[1].startswith("parsing: 0/4 documents (0%)")
    assert drawn[-1].rstrip().endswith("last.html") and out.getvalue().endswith("\n")
    assert "left" not in drawn[-1]  # done: nothing left


def test_progress_is_silent_off_a_terminal_and_when_quiet():
    piped = io.StringIO()
    with Progress("writing", 3, stream=piped) as progress:
        progress.advance(3)
    assert piped.getvalue() == ""
    out = Terminal()
    with quiet():
        with Progress("writing", 3, stream=out) as progress:
            progress.advance(3)
    assert out.getvalue() == ""
    with Progress("writing", 3, stream=out) as progress:  # quiet ends with its block
        progress.advance(3)
    assert out.getvalue().startswith("\rwriting: 0/3")


def test_progress_without_a_total_counts_only():
    progress = Progress("embedding", None, unit="chunks", stream=Terminal())
    progress.advance(1_500)
    assert re.fullmatch(r"embedding: 1,500 chunks  [\d,.]+/s, 0:00", progress.line())


def test_every_long_command_takes_quiet():
    from ragdx.cli import build_parser
    parser = build_parser()
    for argv in (["ingest", "--store", "s.db", "docs"], ["index", "build", "--store", "s.db"],
                 ["run", "--store", "s.db", "--queries", "q.jsonl", "--out", "o"],
                 ["ablate", "--store", "s.db", "--queries", "q.jsonl", "--out", "o"]):
        assert parser.parse_args(argv + ["--quiet"]).quiet is True
        assert parser.parse_args(argv).quiet is False


def test_progress_set_takes_a_count_shared_with_other_workers():
    progress = Progress("ragdx run", 10, unit="queries", stream=Terminal(), every=0)
    progress.advance(2)
    progress.set(7, "q7")  # other workers finished five meanwhile
    assert progress.done == 7 and progress.line().startswith("ragdx run: 7/10 queries (70%)")
    assert progress.line().endswith("q7")


def test_progress_writes_whole_lines_to_a_log_for_a_long_step():
    # off a terminal a long step is not silent: a whole line each log_every seconds (0 here: each
    # advance), and the step's last line at its end; a short step (the default 30 s) writes nothing
    piped = io.StringIO()
    with Progress("embedding", 4, unit="chunks", stream=piped, log_every=0) as progress:
        progress.advance(1)
        progress.advance(3, "done")
    lines = piped.getvalue().split("\n")
    assert "\r" not in piped.getvalue() and lines[-1] == ""
    assert [re.sub(r"  [\d,.]+/s.*", "", line) for line in lines[:-1]] == [
        "embedding: 0/4 chunks (0%)", "embedding: 1/4 chunks (25%)", "embedding: 4/4 chunks (100%)",
        "embedding: 4/4 chunks (100%)"]
    assert lines[-2].endswith("done")
    with quiet():
        with Progress("embedding", 4, stream=piped, log_every=0) as progress:
            progress.advance(4)
    assert len(piped.getvalue().split("\n")) == 5  # quiet: nothing more


def test_the_log_interval_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("RAGDX_PROGRESS_LOG_SECONDS", "0")
    piped = io.StringIO()
    with Progress("writing", 2, stream=piped) as progress:
        progress.advance(2)
    assert piped.getvalue().startswith("writing: 0/2 (0%)")
    monkeypatch.setenv("RAGDX_PROGRESS_LOG_SECONDS", "3600")
    assert Progress("writing", 2, stream=io.StringIO()).log_every == 3600.0


@pytest.mark.parametrize("value", ["soon", "-5", "nan"])
def test_a_log_interval_that_is_no_number_of_seconds_is_named_and_the_default_used(monkeypatch, caplog, value):
    monkeypatch.setenv("RAGDX_PROGRESS_LOG_SECONDS", value)
    with caplog.at_level("WARNING", logger="ragdx"):
        assert Progress("writing", 2, stream=io.StringIO()).log_every == 30.0
    assert f"RAGDX_PROGRESS_LOG_SECONDS={value!r} is not a number of seconds >= 0; using 30" in caplog.text
