"""Training a domain cross-encoder: the dequantiser against the ONNX file it reads, a few
training steps of a tiny model on hand-made pairs, and the exported int8 file against the torch
model (extras dense, onnx, quantize)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("tokenizers")

TINY_PAIRS = [("can i get a refund", "refunds accepted within 30 days", ("payment provider timeout error code",)),
              ("what does error code mean", "error code timeout of the payment provider",
               ("refunds accepted within 90 days",)),
              ("approval for 500 eur", "the team lead approval for 500 eur", ("delivery defect quality",))]

#: (premise, a claim it states, a claim it does not): the support classifier's pairs
SUPPORT_PAIRS = [("refunds accepted within 30 days of delivery", "refunds accepted within 30 days",
                  ("approval for 500 eur",)),
                 ("error code timeout of the payment provider", "the payment provider timeout error code",
                  ("delivery defect quality",)),
                 ("the team lead approval for 500 eur", "approval for 500 eur by the team lead",
                  ("refunds accepted within 90 days",))]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from ragdx.testing.models import tiny_bert
    return tiny_bert(tmp_path_factory.mktemp("tiny") / "model", seed=3)


def _model(folder):
    import transformers
    return transformers.BertForSequenceClassification.from_pretrained(str(folder), attn_implementation="eager").eval()


def _pairs():
    return [(q, t) for q, p, ns in TINY_PAIRS for t in (p, *ns)]


@pytest.fixture(scope="module")
def trained(tiny):
    """The tiny model before and after twenty steps on the hand-made pairs (its logits then spread
    enough for the int8 comparisons)."""
    from ragdx.train.cross import fine_tune, score_pairs, tokenizer_for
    from ragdx.train.pairs import Group
    model = _model(tiny)
    tokenizer = tokenizer_for(tiny / "tokenizer.json", 64)
    groups = [Group(q, p, ns, "heading", ("bm25",), f"s{i}") for i, (q, p, ns) in enumerate(TINY_PAIRS)]
    before = score_pairs(model, tokenizer, _pairs())
    result = fine_tune(model, tokenizer, groups, epochs=20, batch_groups=3, lr=3e-2, seed=0, threads=1)
    return model, result, before, score_pairs(model, tokenizer, _pairs())


def test_a_few_steps_on_hand_made_pairs_teach_the_tiny_model_their_order(trained):
    model, result, before, after = trained
    margin = lambda s: s.reshape(len(TINY_PAIRS), 2) @ np.array([1.0, -1.0])  # noqa: E731
    assert (margin(before) > 0).sum() < 3  # the random model does not already order them
    assert result.steps == 20 and result.groups == 60
    assert (margin(after) > 0).all()
    assert result.losses[-1] < result.losses[0]


@pytest.fixture(scope="module")
def pointwise(tiny):
    """The tiny model's logits before and after twenty pointwise steps, and the model."""
    from ragdx.train.cross import fine_tune, score_pairs, tokenizer_for
    from ragdx.train.pairs import Group
    model = _model(tiny)
    tokenizer = tokenizer_for(tiny / "tokenizer.json", 64)
    groups = [Group(q, p, ns, "support", (), f"s{i}") for i, (q, p, ns) in enumerate(SUPPORT_PAIRS)]
    pairs = [(q, t) for q, p, ns in SUPPORT_PAIRS for t in (p, *ns)]
    before = score_pairs(model, tokenizer, pairs).reshape(len(SUPPORT_PAIRS), 2)
    result = fine_tune(model, tokenizer, groups, epochs=20, batch_groups=3, lr=3e-2, seed=0, threads=1,
                       loss="pointwise")
    return model, result, before, score_pairs(model, tokenizer, pairs).reshape(len(SUPPORT_PAIRS), 2)


def test_the_pointwise_loss_puts_every_positive_above_every_negative_of_any_group(pointwise):
    """Pointwise: one scale across groups (a logit above 0 is a probability above one half), which
    the listwise loss does not ask for: each positive above its own negatives only."""
    _, result, before, after = pointwise
    assert not ((before[:, 0] > 0).all() and (before[:, 1] < 0).all())  # not so already
    assert (after[:, 0] > 0).all() and (after[:, 1] < 0).all()
    assert after[:, 0].min() > after[:, 1].max()
    assert result.losses[-1] < result.losses[0]


def test_a_pointwise_model_exported_is_a_support_classifier_at_its_calibrated_threshold(tiny, pointwise, tmp_path):
    """verify.method = "classifier": the exported folder judges a claim (second) against the
    evidence's statements (first), supported from the threshold its training.json holds."""
    import json

    from ragdx.build import support_checker
    from ragdx.config import load_settings
    from ragdx.errors import ConfigError
    from ragdx.stages.support import SupportClassifier
    from ragdx.stages.verify import ClassifierChecker
    from ragdx.train.cross import export
    from ragdx.types import Verdict
    model, _, _, after = pointwise
    folder = export(model, tiny / "tokenizer.json", tmp_path / "support")
    with pytest.raises(ConfigError, match="has no calibrated threshold in training.json"):
        SupportClassifier(folder)
    (folder / "training.json").write_text(json.dumps({"threshold": 1.5}))
    with pytest.raises(ConfigError, match="the threshold of .* is 1.5, not a probability between 0 and 1"):
        SupportClassifier(folder)
    (folder / "training.json").write_text(json.dumps({"threshold": 0.5}))
    checker = support_checker(load_settings(overrides=["verify.method=classifier", f"verify.model={folder}"]))
    assert isinstance(checker, ClassifierChecker) and checker.model.threshold == 0.5
    query, positive, (negative,) = SUPPORT_PAIRS[0]
    p, premise, parts = checker.model.probability(positive, query)
    assert premise.text == query and p == pytest.approx(1 / (1 + np.exp(-parts["logit"])))
    assert parts["logit"] == pytest.approx(float(after[0, 0]), abs=0.35)  # int8 against the torch model
    assert checker.judge(positive, query)[0] is Verdict.SUPPORTED
    verdict, reason = checker.judge(negative, query)
    assert verdict is not Verdict.SUPPORTED and reason.startswith("support 0.") and f"closest: {query!r}" in reason
    with pytest.raises(ConfigError, match="is not a support classifier's folder"):
        SupportClassifier(tmp_path)
    with pytest.raises(ConfigError, match="verify.model must name a support classifier's folder"):
        support_checker(load_settings(overrides=["verify.method=classifier"]))


def test_the_dequantised_model_gives_the_onnx_files_logits(tiny, trained, tmp_path):
    from ragdx.encoders.cross import CrossEncoder
    from ragdx.train.cross import dequantise, export, score_pairs, tokenizer_for
    model = trained[0]
    tokenizer = tokenizer_for(tiny / "tokenizer.json", 64)
    fp32 = export(model, tiny / "tokenizer.json", tmp_path / "fp32", int8=False)
    # an fp32 file: every weight back exactly, so the same logits as the file and the source model
    back = dequantise(fp32 / "model.onnx", num_heads=2)
    for name, value in model.state_dict().items():
        assert torch.equal(back.state_dict()[name], value), name
    onnx_scores = np.concatenate([CrossEncoder(str(fp32), max_tokens=64).score(q, [t]) for q, t in _pairs()])
    np.testing.assert_allclose(score_pairs(back, tokenizer, _pairs(), batch_size=1), onnx_scores, atol=1e-5)
    # an int8 file: each weight is (q - zero point) * scale of the file's own initialisers
    import onnx
    from onnx import numpy_helper
    int8 = export(model, tiny / "tokenizer.json", tmp_path / "int8")
    inits = {i.name: numpy_helper.to_array(i) for i in onnx.load(str(int8 / "model.onnx")).graph.initializer}
    back8 = dequantise(int8 / "model.onnx", num_heads=2)
    query = back8.bert.encoder.layer[0].attention.self.query.weight.detach().numpy()
    name = next(n[:-len("_quantized")] for n in inits if n.endswith("_quantized")
                and inits[n].shape == query.T.shape
                and np.allclose((inits[n].astype(np.float32) - inits[n[:-10] + "_zero_point"].astype(np.float32))
                                * inits[n[:-10] + "_scale"], query.T))
    assert name  # found by value: the query projection's quantised initialiser
    original = model.bert.encoder.layer[0].attention.self.query.weight.detach().numpy()
    # rounding, no more: half a step of the scale of each weight's own output channel
    error, half_step = np.abs(query - original).T, inits[name + "_scale"] / 2 + 1e-7
    assert error.shape == query.T.shape and half_step.shape in ((), (query.shape[0],))
    assert (error <= half_step).all()
    int8_scores = np.concatenate([CrossEncoder(str(int8), max_tokens=64).score(q, [t]) for q, t in _pairs()])
    spread = float(np.ptp(onnx_scores))
    assert np.abs(score_pairs(back8, tokenizer, _pairs(), batch_size=1) - int8_scores).max() < 0.05 * spread


def test_the_exported_int8_file_scores_as_the_torch_model(tiny, trained, tmp_path):
    from ragdx.encoders.cross import CrossEncoder
    from ragdx.train.cross import export, score_pairs, tokenizer_for
    model = trained[0]
    folder = export(model, tiny / "tokenizer.json", tmp_path / "out")
    assert sorted(p.name for p in folder.iterdir()) == ["model.onnx", "tokenizer.json"]
    torch_scores = score_pairs(model, tokenizer_for(tiny / "tokenizer.json", 64), _pairs(), batch_size=1)
    onnx_scores = np.concatenate([CrossEncoder(str(folder), max_tokens=64).score(q, [t]) for q, t in _pairs()])
    assert np.abs(torch_scores - onnx_scores).max() < 0.05 * float(np.ptp(torch_scores))
    assert (onnx_scores.reshape(len(TINY_PAIRS), 2) @ np.array([1.0, -1.0]) > 0).all()  # each positive first


def test_bad_inputs_are_named(tiny, tmp_path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from ragdx.errors import ConfigError
    from ragdx.train.cross import dequantise, fine_tune, tokenizer_for
    from ragdx.train.pairs import Group
    with pytest.raises(ConfigError, match="the group of query 'refund' has no negative"):
        fine_tune(_model(tiny), tokenizer_for(tiny / "tokenizer.json", 64),
                  [Group("approval", "the team lead", ("delivery",), "heading", ("bm25",), "s0"),
                   Group("refund", "refunds accepted", (), "heading", (), "s1")])
    with pytest.raises(ConfigError, match="loss must be 'listwise' or 'pointwise', not 'hinge'"):
        fine_tune(_model(tiny), tokenizer_for(tiny / "tokenizer.json", 64),
                  [Group("approval", "the team lead", ("delivery",), "heading", ("bm25",), "s0")], loss="hinge")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="/toy/MatMul")], "toy",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
                              [numpy_helper.from_array(np.eye(2, dtype=np.float32), "w")])
    onnx.save(helper.make_model(graph), str(tmp_path / "toy.onnx"))
    with pytest.raises(ConfigError, match="toy.onnx' is not a BERT sequence classifier"):
        dequantise(tmp_path / "toy.onnx")
    (tmp_path / "bad.onnx").write_bytes(b"not a model")
    with pytest.raises(ConfigError, match="cannot read .*bad.onnx"):
        dequantise(tmp_path / "bad.onnx")


def test_frozen_lower_layers_keep_their_weights_and_the_upper_ones_learn(tiny):
    from ragdx.errors import ConfigError
    from ragdx.train.cross import fine_tune, tokenizer_for
    from ragdx.train.pairs import Group
    groups = [Group(q, p, ns, "fit", ("candidate",), f"q{i}") for i, (q, p, ns) in enumerate(TINY_PAIRS)]
    tokenizer = tokenizer_for(tiny / "tokenizer.json", 64)
    frozen = ("bert.embeddings.", "bert.encoder.layer.0.")  # the tiny model has one layer
    for below, still in ((0, ()), (1, frozen)):
        model = _model(tiny)
        start = {k: v.clone() for k, v in model.state_dict().items() if "position_ids" not in k}
        fine_tune(model, tokenizer, groups, epochs=2, batch_groups=3, lr=3e-2, seed=0, threads=1, freeze_below=below)
        kept = {k for k, v in model.state_dict().items() if k in start and torch.equal(v, start[k])}
        assert kept == {k for k in start if k.startswith(still)}, below
    with pytest.raises(ConfigError, match="freeze_below=2, but the model has 1 layers"):
        fine_tune(_model(tiny), tokenizer, groups, freeze_below=2)


def test_the_model_read_in_two_parts_gives_the_whole_models_logits(tmp_path):
    from ragdx.testing.models import tiny_bert
    from ragdx.train.cross import _Split, score_pairs, tokenizer_for  # noqa: I001
    folder = tiny_bert(tmp_path / "two", seed=5, layers=2)
    model = _model(folder)
    with torch.no_grad():  # a random head's logits differ by 1e-5: spread them to see any difference
        model.classifier.weight.mul_(1e5)
    tokenizer = tokenizer_for(folder / "tokenizer.json", 64)
    pairs = _pairs()  # of different lengths (10 to 15 tokens): the shorter ones are padded in a batch
    whole = score_pairs(model, tokenizer, pairs, batch_size=len(pairs))
    assert np.ptp(whole) > 1.0
    for below in (1, 2):
        split = _Split(model, tokenizer, below, torch)
        with torch.no_grad():
            np.testing.assert_allclose(split.logits(pairs).numpy(), whole, atol=1e-3)
        assert len(split.kept) == len(pairs)
    # computed beforehand for groups, and handed to a run
    from ragdx.train.cross import frozen_outputs
    from ragdx.train.pairs import Group
    kept = frozen_outputs(model, tokenizer, [Group(q, p, ns, "fit", ("candidate",), "q") for q, p, ns in TINY_PAIRS], 1)
    assert sorted(kept) == sorted(pairs)
    with torch.no_grad():
        np.testing.assert_allclose(_Split(model, tokenizer, 1, torch, kept).logits(pairs).numpy(), whole, atol=1e-3)
