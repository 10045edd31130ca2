"""Reading evaluation sets: RAGAS, DeepEval, plain CSV/JSONL and Hugging Face datasets, mapped to
ragdx's fields, with the missing fields said and unknown columns refused by file, line and column."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragdx.errors import InputError
from ragdx.label.readers import DatasetFormat, case_trace, read_eval_set
from tests.conftest import write


def jsonl(path: Path, rows: list[dict]) -> Path:
    return write(path, "".join(json.dumps(r) + "\n" for r in rows))


def test_ragas_fields_mapped(tmp_path: Path) -> None:
    # the fields RAGAS's EvaluationDataset.to_jsonl() writes (SingleTurnSample), nulls included
    path = jsonl(tmp_path / "ragas.jsonl", [
        {"user_input": "How long?", "retrieved_contexts": ["a", "b"], "reference_contexts": ["c"],
         "response": "30 days.", "multi_responses": None, "reference": "Within 30 days.", "rubrics": None}])
    data = read_eval_set(path)
    assert data.format is DatasetFormat.RAGAS
    assert data.missing == ()
    (case,) = data.cases
    assert (case.id, case.question, case.reference, case.reference_contexts, case.retrieved_contexts,
            case.response, case.line) == ("q1", "How long?", "Within 30 days.", ("c",), ("a", "b"), "30 days.", 1)
    trace = case_trace(case, "ragas")
    assert [(s["name"], s["kind"], [i["text"] for i in s["items"]]) for s in trace["stages"]] == [
        ("retrieved_contexts", "retrieval", ["a", "b"]), ("context", "context", ["a", "b"])]
    assert trace["answer"] == {"text": "30 days.", "abstained": False}


def test_deepeval_json_array(tmp_path: Path) -> None:
    path = write(tmp_path / "goldens.json", json.dumps([
        {"input": "Q one?", "expected_output": "A one.", "context": ["ctx"], "additional_metadata": {"k": 1}},
        {"input": "Q two?", "actual_output": "out", "expected_output": "A two.", "retrieval_context": ["r"]}]))
    data = read_eval_set(path)
    assert data.format is DatasetFormat.DEEPEVAL
    assert [(c.id, c.question, c.reference, c.reference_contexts, c.retrieved_contexts, c.response, c.line)
            for c in data.cases] == [("q1", "Q one?", "A one.", ("ctx",), None, None, 1),
                                     ("q2", "Q two?", "A two.", (), ("r",), "out", 2)]
    assert case_trace(data.cases[0]) is None  # no system output: nothing to diagnose


def test_plain_csv_with_missing_fields_said(tmp_path: Path) -> None:
    path = write(tmp_path / "tests.csv", 'id,question,answer,principal\n'
                 'a-1,"How long, exactly?",30 days.,staff;public\nb-2,Who?,Nobody.,\n')
    data = read_eval_set(path)
    assert data.format is DatasetFormat.PLAIN
    assert data.missing == ("reference_contexts",)
    assert [(c.id, c.question, c.reference, c.line) for c in data.cases] == [
        ("a-1", "How long, exactly?", "30 days.", 2), ("b-2", "Who?", "Nobody.", 3)]
    assert data.cases[0].principal.groups == ("staff", "public")
    assert data.cases[1].principal is None
    assert "missing: reference_contexts (reference contexts)" in data.describe()


def test_a_field_a_command_needs_is_named(tmp_path: Path) -> None:
    data = read_eval_set(jsonl(tmp_path / "r.jsonl", [{"user_input": "Q?", "response": "A."}]))
    with pytest.raises(InputError) as err:
        data.require("question", "reference", purpose="ragdx label")
    assert str(err.value) == (f"{tmp_path / 'r.jsonl'}: the ragas dataset has no reference (reference) column: "
                              "ragdx label needs it")


def test_unknown_column_names_file_line_and_column(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "ragas.jsonl", [{"user_input": "Q?", "reference": "A."},
                                            {"user_input": "Q2?", "reference": "B.", "faithfulness": 0.5}])
    with pytest.raises(InputError) as err:
        read_eval_set(path)
    assert (err.value.file, err.value.line, err.value.field) == (str(path), 2, "faithfulness")
    assert read_eval_set(path, ignore=["faithfulness"]).cases[1].reference == "B."


def test_unknown_format_and_bad_values(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"cannot tell the dataset's format from its columns \(query, truth\)"):
        read_eval_set(jsonl(tmp_path / "x.jsonl", [{"query": "Q?", "truth": "A."}]))
    with pytest.raises(InputError) as err:
        read_eval_set(jsonl(tmp_path / "y.jsonl", [{"user_input": "Q?", "retrieved_contexts": ["a", 3]}]))
    assert (err.value.line, err.value.field) == (1, "retrieved_contexts")
    with pytest.raises(InputError) as err:
        read_eval_set(jsonl(tmp_path / "z.jsonl", [{"id": "a", "question": "Q?"}, {"id": "a", "question": "R?"}]))
    assert (err.value.line, err.value.field) == (2, "id")
    with pytest.raises(InputError) as err:
        read_eval_set(write(tmp_path / "bad.csv", "question,answer\nQ?,A.,extra\n"))
    assert err.value.line == 2


def test_hugging_face_dataset_saved_to_disk(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    folder = tmp_path / "hf"
    datasets.Dataset.from_list([{"user_input": "Q?", "reference": "A.", "retrieved_contexts": ["x"],
                                 "response": "A."}]).save_to_disk(str(folder))
    data = read_eval_set(folder)
    assert data.format is DatasetFormat.RAGAS
    assert [(c.question, c.reference, c.retrieved_contexts, c.line) for c in data.cases] == [("Q?", "A.", ("x",), 1)]
    datasets.DatasetDict({"test": datasets.Dataset.from_list([{"question": "Q?"}])}).save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(InputError, match=r"several splits \(test\): give one split's folder"):
        read_eval_set(tmp_path / "dd")


@pytest.mark.parametrize("text, said", [
    # a quote never closed: the rest of the file is one cell (once an AttributeError traceback)
    ('question,reference\n"How long, refunds?,30 days\nb,c\n',
     ":2: the row has 1 cell, the header 2 (a quote opened here and never closed takes the lines after it into "
     "one cell)"),
    ("question,reference\nHow long?\n", ":2: the row has 1 cell, the header 2"),  # a short row
    ("question,reference\nHow long?,30 days,extra,more\n", ":2: the row has 4 cells, the header 2"),
    ("question,reference\nA?,b\nHow long?,30 days,x\n", ":3: the row has 3 cells, the header 2"),
])
def test_a_ragged_csv_row_is_named_by_its_line(tmp_path: Path, text: str, said: str) -> None:
    path = write(tmp_path / "tests.csv", text)
    with pytest.raises(InputError) as err:
        read_eval_set(path)
    assert str(err.value) == f"{path}{said}"


def test_a_field_past_its_bound_is_named_with_its_size(tmp_path: Path) -> None:
    # an 11 MB reference once ran for minutes with no word said (issue 51)
    from ragdx.label.readers import MAX_CHARS, MAX_CONTEXTS
    rows = [{"user_input": "Q?", "reference": "x" * (MAX_CHARS["reference"] + 1)},
            {"user_input": "Q" * (MAX_CHARS["question"] + 1) + "?", "reference": "A."},
            {"user_input": "Q?", "reference": "A.", "reference_contexts": ["c"] * (MAX_CONTEXTS + 1)},
            {"user_input": "Q?", "reference": "A.", "retrieved_contexts": ["c", "x" * (MAX_CHARS["context"] + 1)]}]
    said = ["field 'reference': 20,001 characters, more than the 20,000 a reference may have",
            "field 'user_input': 4,002 characters, more than the 4,000 a question may have",
            "field 'reference_contexts': 501 texts, more than the 500 a row may hold",
            "field 'retrieved_contexts': text 1 has 100,001 characters, more than the 100,000 a context may have"]
    for row, message in zip(rows, said):
        path = jsonl(tmp_path / "r.jsonl", [{"user_input": "Fine?", "reference": "Yes."}, row])
        with pytest.raises(InputError) as err:
            read_eval_set(path)
        assert str(err.value) == f"{path}:2 {message}"
    at_bound = {"user_input": "Q" * MAX_CHARS["question"], "reference": "x" * MAX_CHARS["reference"]}
    assert len(read_eval_set(jsonl(tmp_path / "ok.jsonl", [at_bound])).cases) == 1
