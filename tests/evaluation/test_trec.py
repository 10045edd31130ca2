"""TREC run and qrels files: round trip, errors naming the line, and `ragdx eval`."""

import pytest

from ragdx.cli import main
from ragdx.errors import InputError
from ragdx.evaluation.trec import read_qrels, read_run, write_qrels, write_run
from tests.conftest import write


def test_round_trip(tmp_path):
    run = {"q1": {"B": 3.0, "A": 2.0, "D": 1.0}, "q2": {"X": 0.5}}
    qrels = {"q1": {"A": 1, "C": 2}, "q2": {"X": 0}}
    write_run(run, tmp_path / "run.txt")
    write_qrels(qrels, tmp_path / "qrels.txt")
    assert (tmp_path / "run.txt").read_text().splitlines()[0] == "q1 Q0 B 1 3.0 ragdx"
    assert read_run(tmp_path / "run.txt") == run and read_qrels(tmp_path / "qrels.txt") == qrels


@pytest.mark.parametrize("text, message", [
    ("q1 Q0 A 1 2.0\n", "run.txt:1: expected 6 fields"),
    ("q1 Q0 A 1 high tag\n", "run.txt:1: score 'high' is not a number"),
    ("q1 Q0 A 1 2.0 t\nq1 Q0 A 2 1.0 t\n", "run.txt:2: document 'A' is listed twice for query 'q1'"),
])
def test_bad_run_lines(tmp_path, text, message):
    with pytest.raises(InputError, match=message):
        read_run(write(tmp_path / "run.txt", text))


def test_ragdx_eval_prints_the_measures(tmp_path, capsys):
    write(tmp_path / "run.txt", "q1 Q0 B 1 3 t\nq1 Q0 A 2 2 t\nq1 Q0 D 3 1 t\n")
    write(tmp_path / "qrels.txt", "q1 0 A 1\nq1 0 C 1\nq2 0 Z 1\n")
    assert main(["eval", str(tmp_path / "run.txt"), str(tmp_path / "qrels.txt"), "--measure", "P@3",
                 "--measure", "R@3", "--measure", "RR", "--per-query"]) == 0
    out, err = capsys.readouterr()
    assert "q1\t0.3333\t0.5000\t0.5000" in out and "q2\t0.0000\t0.0000\t0.0000" in out
    assert "P@3      0.1667" in out  # (1/3 + 0) / 2: the query missing from the run counts
    assert "1 queries of the qrels have no ranking in the run" in err
    assert main(["eval", str(tmp_path / "run.txt"), str(tmp_path / "qrels.txt"), "--measure", "NDCG"]) == 2
