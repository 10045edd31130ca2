"""Training ragdx's own models on a user's corpus: label-free pairs (:mod:`ragdx.train.pairs`) and a
domain cross-encoder fine-tuned on CPU (:mod:`ragdx.train.cross`, extras ``dense``, ``onnx`` and
``quantize``)."""
