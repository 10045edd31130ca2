"""One typed settings tree, read from TOML and ``--set key=value`` overrides, validated on load.

Every key is a dotted path (``retrieval.dense.enabled``); an unknown key, a value of the wrong
type, or a value outside its choices or range is a :class:`~ragdx.errors.ConfigError` that names
the key and lists what is valid. Numbers must be finite (``nan`` and ``inf`` are refused) and an
integer at most :data:`MAX_INT`. Candidate count (``fusion.top_k``), post-rerank count
(``rerank.top_n``) and context budget (``context.budget_tokens``) are three separate settings.
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager
import math
import re
import tomllib
from dataclasses import dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any, Iterator, Sequence

from ragdx._jsonl import decode_utf8
from ragdx.errors import ConfigError, InputError

#: The largest integer any setting takes (a count, a size, a budget).
MAX_INT = 1_000_000_000


def _choice(default: str, *choices: str) -> Any:
    return field(default=default, metadata={"choices": choices})


def _at_least(default: float, low: float, high: float | None = None) -> Any:
    """A number in ``[low, high]``; an integer's ``high`` is :data:`MAX_INT` unless given, a
    float's must be given (every number has a documented range: docs/pipeline.md, "Valid ranges")."""
    if high is None and isinstance(default, float):
        raise TypeError("a float setting needs an upper bound")
    return field(default=default, metadata={"min": low, "max": high})


@dataclass(frozen=True, slots=True)
class ChunkingSettings:
    """How documents are cut. ``tokenizer = "auto"`` counts in the dense encoder's word pieces
    when the dense channel is on (so chunks fit its window), else words and punctuation."""

    max_tokens: int = _at_least(200, 8)
    overlap_tokens: int = _at_least(0, 0)
    tokenizer: str = _choice("auto", "auto", "encoder", "regex")


@dataclass(frozen=True, slots=True)
class BM25Settings:
    """The lexical channel: SQLite FTS5's bm25() over each chunk's prefix and text."""

    enabled: bool = True
    top_k: int = _at_least(200, 1)
    prefix_weight: float = _at_least(0.5, 0.0, 1000.0)
    text_weight: float = _at_least(1.0, 0.0, 1000.0)


@dataclass(frozen=True, slots=True)
class DenseSettings:
    """The dense channel: exact (numpy) or approximate (hnsw) nearest neighbours.
    ``statement_vectors``: ingest and ``ragdx index build`` also store each chunk's statement
    vectors, which the sentence reranker and the extractive generator read instead of encoding
    (a store that keeps none, a custom one, is encoded at query time). ``runtime``: with the
    sentence-transformers backend, ``auto`` encodes passages on onnxruntime from a checked float32
    export of the same weights (the same space) when the ``onnx`` extra is installed, ``torch``
    always through sentence-transformers."""

    enabled: bool = True
    model: str = "all-MiniLM-L6-v2"
    backend: str = _choice("sentence-transformers", "sentence-transformers", "onnx")
    runtime: str = _choice("auto", "auto", "torch")
    top_k: int = _at_least(200, 1)
    batch_size: int = _at_least(16, 1)
    query_prefix: str = ""
    passage_prefix: str = ""
    with_prefix: bool = True
    search: str = _choice("auto", "auto", "exact", "quantized", "hnsw")
    statement_vectors: bool = True


@dataclass(frozen=True, slots=True)
class RewriteSettings:
    """Query rewriting and multi-hop retrieval (docs/pipeline.md, "Rewriting and multi-hop").
    ``route``: ``auto`` sends only questions whose decomposition has two or more evidence slots
    down the multi-hop path, ``single`` none, ``multi-hop`` every one. Questions routed ``single``
    are searched as asked unless ``rewrite_single``. The rewriter is ``offline`` (entity
    completion from the title and heading index, sub-questions, and with ``hyde`` a hypothetical
    passage), ``llm`` (the generation chat endpoint) or ``none``. The loop's bounds: ``max_hops``,
    ``max_queries`` (searches, one per hop per channel), ``budget_tokens`` (chunk text read) and
    ``budget_ms``; it also stops after two hops without progress."""

    route: str = _choice("auto", "auto", "single", "multi-hop")
    rewriter: str = _choice("offline", "offline", "llm", "none")
    rewrite_single: bool = False
    entities: bool = True
    expand: bool = True
    hyde: bool = False
    search_original: bool = True
    max_hops: int = _at_least(4, 1)
    max_queries: int = _at_least(12, 1)
    budget_tokens: int = _at_least(4000, 1)
    budget_ms: float = _at_least(5000.0, 1.0, 86_400_000.0)


@dataclass(frozen=True, slots=True)
class RetrievalSettings:
    """The channels, and which versions they search: ``current`` (the versions in force and
    those a question names; governance checks again) or ``all`` (governance drops what is not in
    force, each with its reason in the trace)."""

    bm25: BM25Settings = BM25Settings()
    dense: DenseSettings = DenseSettings()
    versions: str = _choice("current", "current", "all")


@dataclass(frozen=True, slots=True)
class FusionSettings:
    """How channel lists are merged: reciprocal rank fusion, or weighted scores whose
    normalisation and weights were fitted on a validation set (``weights_file``)."""

    method: str = _choice("rrf", "rrf", "weighted")
    c: float = _at_least(60.0, 0.0, 1_000_000.0)
    top_k: int = _at_least(150, 1)
    weights_file: str = ""


@dataclass(frozen=True, slots=True)
class RerankSettings:
    """Reranking of the fused candidates; ``top_n`` are kept. ``auto`` is ``sentences`` (the
    fused rank fused with the rank by each candidate's best sentence, the ``depth`` best scored)
    when the dense channel is on, else ``none``. ``cross-encoder`` scores the ``depth`` best with
    an ONNX cross-encoder (``model``, empty for the packaged int8 ms-marco-MiniLM-L-12-v2: extra
    ``models``) on pairs cut to ``max_tokens``, ``batch_size`` at a time, and orders by its score
    ``alone`` or by ``rrf`` of it with the fused rank (``combine``)."""

    method: str = _choice("auto", "auto", "none", "features", "cross-encoder", "sentences")
    model: str = ""
    top_n: int = _at_least(150, 1)
    depth: int = _at_least(75, 1)
    batch_size: int = _at_least(1, 1)
    max_tokens: int = _at_least(512, 8)
    combine: str = _choice("alone", "alone", "rrf")
    weights_file: str = ""


@dataclass(frozen=True, slots=True)
class GovernanceSettings:
    """What may reach the context: superseded and expired versions are dropped unless allowed;
    with ``withhold``, nothing reaches it when most of the question's best matches (the
    ``withhold_depth`` best of each retrieval channel, searched with every access group, each
    weighing ``1 / rank``) are sources the asker may not read."""

    allow_superseded: bool = False
    withhold: bool = True
    withhold_depth: int = _at_least(3, 1)


@dataclass(frozen=True, slots=True)
class ContextSettings:
    """The context's token budget (counted in the encoder's tokenizer by default), small-to-big
    expansion, and the smallest truncated unit worth keeping."""

    budget_tokens: int = _at_least(6000, 16)
    expand: str = _choice("section", "section", "none")
    min_tokens: int = _at_least(24, 1)
    tokenizer: str = _choice("auto", "auto", "encoder", "regex")


@dataclass(frozen=True, slots=True)
class GenerationSettings:
    """The generator: extractive (offline), an OpenAI-compatible chat endpoint (``chat``), or a
    GGUF chat model run here (``local``: ``model`` the ``.gguf`` file, extra ``local``; it answers
    what the extractive generator would answer, from ``feed``: the reader's chosen
    ``statements`` or the whole ``context``; ``threads``, ``context_tokens`` and ``max_tokens``
    bound it)."""

    method: str = _choice("extractive", "extractive", "chat", "local")
    min_coverage: float = _at_least(0.51, 0.0, 1.0)  # fitted on the dev set (docs/benchmarks.md; the refit to 0.654: "Answerability")
    keep_ratio: float = _at_least(0.5, 0.0, 1.0)
    max_sentences: int = _at_least(3, 1)  # fitted with the learned reader (bench/quality/train_reader.py)
    semantic_weight: float = _at_least(0.8, 0.0, 1.0)
    rank_weight: float = _at_least(0.3, 0.0, 10.0)
    tie_ratio: float = _at_least(0.0, 0.0, 1.0)
    # which sentences answer: 'learned' (a fitted scorer over words, meaning, place and, with the
    # extra 'models', a cross-encoder), 'cross-encoder' (the model's score blended in) or 'none'
    reader: str = _choice("learned", "learned", "none", "cross-encoder")
    reader_model: str = ""  # default: the packaged ms-marco-MiniLM-L-12-v2 (extra 'models')
    reader_weights: str = ""  # the learned reader's weights file; default the one ragdx ships
    reader_keep: float = _at_least(0.0, 0.0, 1.0)  # learned reader: a further sentence's least share of the first's probability
    # learned reader: a further sentence of a unit already cited counts this share of its probability
    reader_same_unit: float = _at_least(0.5, 0.0, 1.0)
    reader_weight: float = _at_least(0.5, 0.0, 1.0)
    reader_depth: int = _at_least(30, 1)
    reader_scale: float = _at_least(1.0, 0.001, 1000.0)
    reader_max_tokens: int = _at_least(128, 8, 4096)
    check_names: bool = True  # abstain when a distinctive name of the question occurs nowhere readable
    # abstain when the chosen statements share only the question's names with it, unless one's cosine
    # with it reaches this (0: off; docs/pipeline.md, "Answerability")
    name_only_cosine: float = _at_least(0.7, 0.0, 1.0)
    # names held by this share of the store's documents are what the sources are about: the reader
    # also reads the question without them, and they make no further statement an answer (0: off)
    background_share: float = _at_least(0.25, 0.0, 1.0)
    base_url: str = ""
    model: str = ""
    api_key_env: str = "RAGDX_LLM_API_KEY"
    timeout: float = _at_least(60.0, 0.001, 86_400.0)
    max_retries: int = _at_least(3, 0)
    max_tokens: int = _at_least(512, 1)
    feed: str = _choice("statements", "statements", "context")
    threads: int = _at_least(2, 1)
    context_tokens: int = _at_least(4096, 256)
    price_prompt_per_1k: float = _at_least(0.0, 0.0, 1_000_000.0)
    price_completion_per_1k: float = _at_least(0.0, 0.0, 1_000_000.0)


@dataclass(frozen=True, slots=True)
class VerifySettings:
    """How claims are checked against their cited evidence."""

    method: str = _choice("learned", "learned", "lexical", "classifier", "nli", "llm")
    model: str = ""          # classifier, nli: a model folder; llm: a .gguf file run here (else the chat endpoint)
    threshold: float = _at_least(0.5, 0.0, 1.0)  # llm with a .gguf file: the least P("Yes") for supported


@dataclass(frozen=True, slots=True)
class CacheSettings:
    """The retrieval and answer caches of ``ragdx ask`` and ``ragdx run`` (docs/formats.md, "The
    result cache"): kept in ``path``, by default the store's file with ``.cache`` added (a
    PostgreSQL store has a cache only when ``path`` is set)."""

    enabled: bool = True
    path: str = ""


@dataclass(frozen=True, slots=True)
class Settings:
    """Every setting of a pipeline run."""

    chunking: ChunkingSettings = ChunkingSettings()
    rewrite: RewriteSettings = RewriteSettings()
    retrieval: RetrievalSettings = RetrievalSettings()
    fusion: FusionSettings = FusionSettings()
    rerank: RerankSettings = RerankSettings()
    governance: GovernanceSettings = GovernanceSettings()
    context: ContextSettings = ContextSettings()
    generation: GenerationSettings = GenerationSettings()
    verify: VerifySettings = VerifySettings()
    cache: CacheSettings = CacheSettings()
    seed: int = _at_least(0, 0, 2 ** 32 - 1)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def get(self, key: str) -> Any:
        node: Any = self
        for part in key.split("."):
            node = getattr(node, part)
        return node


def _keys(cls: type, prefix: str = "") -> list[str]:
    out = []
    for f in fields(cls):
        if is_dataclass(f.default):
            out += _keys(type(f.default), f"{prefix}{f.name}.")
        else:
            out.append(prefix + f.name)
    return out


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _check(f: dataclasses.Field, key: str, value: Any) -> Any:
    kind = type(f.default)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        if abs(value) > 1e300:
            raise ConfigError(f"setting {key!r} must be a finite number, not {_show(value)}", key=key)
        value = float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ConfigError(f"setting {key!r} must be {kind.__name__}, not {_show(value)}", key=key)
    choices = f.metadata.get("choices")
    if choices and value not in choices:
        raise ConfigError(f"setting {key!r} must be one of {', '.join(map(repr, choices))}, "
                          f"not {_show(value)}", key=key)
    if kind is float and not math.isfinite(value):
        raise ConfigError(f"setting {key!r} must be a finite number, not {_show(value)}", key=key)
    low = f.metadata.get("min")
    if low is not None and value < low:
        raise ConfigError(f"setting {key!r} must be at least {low}, not {_show(value)}", key=key)
    high = f.metadata.get("max") or (MAX_INT if kind is int else None)
    if high is not None and value > high:
        raise ConfigError(f"setting {key!r} must be at most {high}, not {_show(value)}", key=key)
    return value


def _apply(node: Any, data: dict[str, Any], prefix: str) -> Any:
    by_name = {f.name: f for f in fields(node)}
    changes = {}
    for name, value in data.items():
        key = prefix + name
        if name not in by_name:
            valid = ", ".join(k for k in _keys(Settings) if k.startswith(prefix))
            raise ConfigError(f"unknown setting {_show(key)}; valid settings here: {valid}", key=key)
        current = getattr(node, name)
        if is_dataclass(current):
            if not isinstance(value, dict):
                raise ConfigError(f"setting {key!r} is a table of settings, not {_show(value)}", key=key)
            changes[name] = _apply(current, value, key + ".")
        else:
            changes[name] = _check(by_name[name], key, value)
    return replace(node, **changes)


def parse_override(text: str) -> tuple[str, Any]:
    """``key=value`` with a TOML value (``5``, ``true``, ``"x"``); a bare word is a string."""
    if "=" not in text:
        raise ConfigError(f"--set expects key=value, got {_show(text)}")
    key, raw = (part.strip() for part in text.split("=", 1))
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except (tomllib.TOMLDecodeError, RecursionError):
        value = raw
    return key, value


def _nest(key: str, value: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    node = out
    parts = key.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return out


def load_settings(path: str | Path | None = None, overrides: Sequence[str] = ()) -> Settings:
    """Defaults, then a TOML file, then ``--set`` overrides, in that order.

    Raises:
        ConfigError: an unreadable file, an unknown key, a bad type or value (a file's names the
            file and the key's line), or settings that do not go together.
    """
    settings, text = Settings(), ""
    if path is not None:
        try:
            text = decode_utf8(Path(path).read_bytes(), str(path))
            data = tomllib.loads(text)
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except IsADirectoryError:
            raise ConfigError(f"{path}: is a directory, not a TOML settings file") from None
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read the config file: {exc.strerror}") from None
        except InputError as exc:  # not UTF-8, as TOML must be
            raise ConfigError(str(exc)) from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
        except RecursionError:
            raise ConfigError(f"{path}: not valid TOML: nested too deeply") from None
        with _located(path, text):
            settings = _apply(settings, data, "")
    settings = _overridden(settings, overrides)
    with _located(path, text):
        _consistent(settings)
    return settings


@contextmanager
def _located(path: str | Path | None, text: str) -> Iterator[None]:
    """A :class:`ConfigError` of a key the settings file sets names the file and the key's line."""
    try:
        yield
    except ConfigError as exc:
        line = _line_of(text, exc.key) if path is not None and exc.key else None
        if line is None:
            raise
        raise ConfigError(f"{path}:{line}: {exc}", key=exc.key) from None


def _line_of(text: str, key: str) -> int | None:
    """The 1-based line of a TOML file where the dotted ``key`` (or the table holding it) is set."""
    table: tuple[str, ...] = ()
    wanted = tuple(key.split("."))
    best = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        header = _TABLE.match(line)
        if header:
            table = _dotted(header.group(1))
            if wanted[:len(table)] == table and best is None and table:
                best = number  # the table at least, if the key itself is not found
            continue
        assignment = _ASSIGN.match(line)
        if assignment:
            full = table + _dotted(assignment.group(1))
            if full == wanted:
                return number
            if wanted[:len(full)] == full and best is None:  # an inline table holding it
                best = number
    return best


_TABLE = re.compile(r"^\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_ASSIGN = re.compile(r"^((?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*'))*)\s*=")


def _dotted(text: str) -> tuple[str, ...]:
    return tuple(part.strip().strip("\"'") for part in re.split(r"\.(?=(?:[^\"']|\"[^\"]*\"|'[^']*')*$)", text))


def _consistent(settings: Settings) -> None:
    """Settings that need each other (each value alone is valid)."""
    if settings.fusion.method == "weighted" and not settings.fusion.weights_file:
        raise ConfigError("setting 'fusion.method' is 'weighted', which needs 'fusion.weights_file': the "
                          "weights fitted by 'ragdx fit fusion' (or use fusion.method=rrf)", key="fusion.method")


def ranges() -> dict[str, tuple[float, float]]:
    """Every numeric setting's valid range, ``low <= value <= high`` (docs/pipeline.md, "Valid ranges")."""
    found = {}

    def walk(cls: type, prefix: str) -> None:
        for f in fields(cls):
            if is_dataclass(f.default):
                walk(type(f.default), f"{prefix}{f.name}.")
            elif "min" in f.metadata:
                found[prefix + f.name] = (f.metadata["min"], f.metadata["max"] or MAX_INT)
    walk(Settings, "")
    return found


def with_overrides(settings: Settings, overrides: Sequence[str]) -> Settings:
    """``settings`` with ``key=value`` overrides applied, each validated.

    Raises:
        ConfigError: an unknown key, a bad type or value (naming the key and the valid values),
            or settings that do not go together.
    """
    settings = _overridden(settings, overrides)
    _consistent(settings)
    return settings


def _overridden(settings: Settings, overrides: Sequence[str]) -> Settings:
    for text in overrides:
        key, value = parse_override(text)
        settings = _apply(settings, _nest(key, value), "")
    return settings
