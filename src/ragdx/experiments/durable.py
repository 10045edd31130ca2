"""Durable runs (``ragdx run``): every query an item, taken under a lease, drafted, rechecked and
published, so a crash, a kill or a lost machine loses at most the items in flight, and a draft
whose evidence changed is never published (docs/durable.md).

A worker (one process; start several on the same run folder to share the work):

1. claims the first queued item, or one whose lease expired (:class:`~ragdx.experiments.runstate.RunState`);
2. runs and diagnoses it, and keeps a draft checkpoint: the trace with the index version and the
   versions and spans of every cited unit (:mod:`ragdx.binding`), and the diagnosis;
3. rechecks the draft's evidence and publishes it (one line each to ``traces.jsonl`` and
   ``diagnosis.jsonl``), or fails the item with ``evidence_changed_or_expired`` and the reason.

A draft left by a dead worker is taken, once its lease expires, by the next worker, which
rechecks and publishes or fails it without running the query again. When no item is left, the
worker that finds so writes the manifest, the metrics and the report of the published items.

A run folder damaged since is repaired or refused (docs/durable.md, "Damaged run folders"): the
published files are written again from ``run.db`` when they differ from what it published, a
draft checkpoint that does not read back is discarded and its item run again, and a damaged
``run.db`` is refused naming it.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from ragdx.binding import EvidenceBinding, recheck
from ragdx.diagnosis.evidence import EvidenceResolver
from ragdx.errors import EXIT_FAULT, InputError, StoreError
from ragdx.evaluation.layered import layered
from ragdx.executors import RemotePipelines
from ragdx.experiments.run import Answered, RunResult, answer_one
from ragdx.experiments.runstate import (Claim, Draft, ItemRecord, ItemState, RunState, _DamagedCheckpoint,
                                        damaged, worker_id)
from ragdx.pipeline import Pipeline
from ragdx.progress import Progress
from ragdx.runfolder import (RUN_DB, SUMMARY, Executed, append_published, manifest, repair_published,
                             write_json, write_report)
from ragdx.types import ChoiceEnum, Query

__all__ = ["Fault", "FAULT_EXIT", "DurableRun", "run_durable", "invocation_of", "inspect_run"]

FAULT_EXIT = EXIT_FAULT
"""The exit code of a worker stopped by ``--fault`` (a crash on purpose; :mod:`ragdx.errors`)."""


class Fault(ChoiceEnum):
    """Where a worker stops on purpose, as a crash would stop it (for tests and demonstrations)."""

    AFTER_DRAFT = "after_draft"        # the draft is kept; nothing is published
    BEFORE_PUBLISH = "before_publish"  # the lines are appended, the publication is not committed


@dataclass(frozen=True, slots=True)
class DurableRun:
    """What a worker leaves: the items by state, the failed ones with their reasons, and the run
    folder's result if this worker wrote its summary (else None: other workers still hold items,
    or the summary already shows every item); ``repaired``: what it found damaged and repaired."""

    folder: Path
    counts: Mapping[ItemState, int]
    failed: tuple[tuple[str, str], ...]
    index_versions: tuple[int, ...]
    result: RunResult | None
    repaired: tuple[str, ...] = ()


def _fingerprint(pipeline: Pipeline, queries: Sequence[Query]) -> dict[str, Any]:
    """What must be equal for a worker to join a run: ragdx, the store, the stages and the queries."""
    from ragdx import __version__
    info = manifest(pipeline, None)
    canon = json.dumps([[q.id, q.question, q.principal.user, list(q.principal.groups)] for q in queries])
    store = info["store"] or str(getattr(pipeline.store, "where", ""))  # a PostgreSQL store: its redacted DSN
    settings = info["settings"]
    if isinstance(settings, dict):  # whether results are cached does not change them
        settings = {k: v for k, v in settings.items() if k != "cache"}
    return {"ragdx_version": __version__, "settings": settings,
            "store": store if not store or "://" in store else str(Path(store).resolve()),
            "stages": info["stages"], "queries_sha256": hashlib.sha256(canon.encode()).hexdigest()}


def _join(state: RunState, pipeline: Pipeline, queries: Sequence[Query], invocation: Mapping[str, Any],
          out: Path) -> None:
    """Submit the run, or check that this worker runs the same one."""
    mine = json.loads(json.dumps(_fingerprint(pipeline, queries)))
    if not state.submitted():
        for name in SUMMARY:  # a previous run's, now stale
            (out / name).unlink(missing_ok=True)
        if state.submit([q.id for q in queries], {"fingerprint": mine, "invocation": dict(invocation)}):
            return
    theirs = state.info()["fingerprint"]
    # the same ragdx writes every key; a record without them is damaged, not another run
    lost = [k for k in mine if k not in theirs] if isinstance(theirs, dict) else ["fingerprint"]
    if lost and (not isinstance(theirs, dict) or theirs.get("ragdx_version", mine["ragdx_version"])
                 == mine["ragdx_version"]):
        raise damaged(out / RUN_DB, f"its fingerprint has no {', '.join(lost)}")
    differ = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
    if differ:
        raise InputError(f"{out} holds a run of other {', '.join(differ)}: resume it with the same store, "
                         "settings and queries (ragdx run --resume), or choose another --out", field="--out")
    state.check_items(len(queries))


def run_durable(pipeline: Pipeline, queries: Sequence[Query], out: Path, *, queries_path: Path | None = None,
                lease_seconds: float = 300.0, fault: Fault | None = None, retry_failed: bool = False,
                oracle: str | None = None, progress: bool = True,
                invocation: Mapping[str, Any] | None = None,
                remote: RemotePipelines | None = None) -> DurableRun:
    """Work on the durable run in ``out`` (submitting it first if new) until no item is left.

    Args:
        lease_seconds: how long a claimed item is this worker's; longer than one query takes.
        fault: stop the process (exit :data:`FAULT_EXIT`) at that point of the first item.
        retry_failed: queue the failed items again first.
        invocation: how to start the run again (``ragdx run --resume`` reads it), kept in ``run.db``.
        remote: run the queries on an executor's workers (``pipeline`` must be ragdx's own, built
            from ``pipeline.settings``): this worker claims a batch of items, the workers answer
            them, and this worker diagnoses, drafts, rechecks and publishes each, as alone.

    Raises:
        InputError: ``out`` holds a run of another store, other settings or other queries.
        StoreError: its ``run.db`` is damaged beyond repair, naming it (a damaged published or
            summary file, or draft checkpoint, is repaired instead: ``DurableRun.repaired``).
    """
    if lease_seconds <= 0:
        raise InputError(f"--lease-seconds must be positive, not {lease_seconds}", field="--lease-seconds")
    started = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    worker = worker_id()
    with RunState(out / RUN_DB) as state:
        _join(state, pipeline, queries, {**(invocation or {}), "lease_seconds": lease_seconds}, out)
        if retry_failed:
            state.retry_failed(worker)
        if remote is None:
            pipeline.warm_up()
        resolver = EvidenceResolver(pipeline.store)
        total = len(queries)
        bar = Progress("ragdx run", total, unit="queries") if progress else None
        batch = 1 if remote is None else 4 * max(1, remote.executor.workers) * (remote.per_task or 4)
        while True:
            claims = _claim(state, worker, lease_seconds, batch)
            if not claims:
                held, wait = state.wait_hint()
                if held == 0:
                    break
                time.sleep(min(max(wait or 0.0, 0.05), 0.5))  # another worker holds the rest
                continue
            recovered = {c.n: _recovered(state, c, worker) if c.recover else (None, None) for c in claims}
            todo = [c for c in claims if recovered[c.n][0] is None]
            index_version = pipeline.store.index_version  # before the answers: a change shows in the recheck
            made = dict(zip((c.n for c in todo), remote.run(pipeline.settings, [queries[c.n] for c in todo])
                            if remote is not None and todo else ()))
            for claim in claims:
                draft, binding = recovered[claim.n]
                fresh = draft is None  # this worker's own answer; a recovered one is read span by span
                if draft is None:
                    claim = replace(claim, recover=False)
                    produce = (lambda q, n=claim.n: made[n]) if claim.n in made else pipeline.run
                    one = answer_one(pipeline, queries[claim.n], produce, resolver, oracle=oracle,
                                     index_version=index_version if claim.n in made else None)
                    draft, binding = _keep_draft(state, claim, worker, one), one.binding
                    if draft is None:
                        continue
                    if fault is Fault.AFTER_DRAFT:
                        _crash(fault, f"after drafting item {claim.query_id!r}", out)
                _settle(state, pipeline, out, claim, draft, worker, fault, binding, shortcut=fresh)
                if bar is not None:
                    counts = state.counts()
                    bar.set(counts[ItemState.PUBLISHED] + counts[ItemState.FAILED], claim.query_id[:40])
        if bar is not None:
            bar.close()
        with state.transaction():  # one worker at a time writes the folder's summary files, once
            repaired = tuple(f"{detail}: discarded, and the item run again" for _, who, _, detail in
                             state.events("draft_damaged") if who == worker) + _repair(state, out)
            stale = bool(repaired) or not state.summarised()
            result = _finish(state, pipeline, queries, out, queries_path, started) if stale else None
            if result is not None:
                state.note_summarised(worker)
        return DurableRun(out, state.counts(), _failed(state), tuple(state.index_versions()), result, repaired)


def _claim(state: RunState, worker: str, lease_seconds: float, most: int) -> list[Claim]:
    """Up to ``most`` items claimed, in the queue's order."""
    claims: list[Claim] = []
    while len(claims) < most:
        claim = state.claim(worker, lease_seconds)
        if claim is None:
            break
        claims.append(claim)
    return claims


def _recovered(state: RunState, claim: Claim, worker: str) -> tuple[Draft | None, EvidenceBinding | None]:
    """A dead worker's draft and the evidence it cites, to be rechecked and published; (None,
    None) when it is missing or damaged: it is discarded (the item is this worker's to run again)
    and the reason kept in the events."""
    try:
        draft = state.draft(claim.n)
        if draft is None:
            raise _DamagedCheckpoint(f"{state.path}: item {claim.n} is drafted, but no checkpoint was kept")
        try:
            binding = EvidenceBinding.from_trace(draft.trace, f"the draft of {claim.query_id!r}")
        except InputError as exc:
            raise _DamagedCheckpoint(f"{state.path}: the checkpoint of item {claim.n} is damaged: {exc}") from None
    except _DamagedCheckpoint as exc:
        state.discard_draft(claim.n, worker, str(exc))
        return None, None
    return draft, binding


def _repair(state: RunState, out: Path) -> tuple[str, ...]:
    """Inside the summary's transaction: the published files written again from ``run.db`` when
    they differ from what it published, and the summary files written again when one is missing.
    Returns what was repaired, for the worker to say."""
    sizes, repaired = repair_published(out, state.published_lines())
    if state.sizes() is None:
        repaired += (f"{out / RUN_DB}: the record of the published files' sizes was damaged: set again",)
    if state.sizes() != sizes:
        state.set_sizes(sizes)
    counts = state.counts()
    done = not (counts[ItemState.QUEUED] or counts[ItemState.LEASED] or counts[ItemState.DRAFTED])
    if done and state.summarised():
        repaired += tuple(f"{out / name} was missing: written again" for name in SUMMARY
                          if not (out / name).is_file())
    return repaired


def _crash(fault: Fault, where: str, out: Path) -> None:
    """Stop the process as a crash would (no clean-up), saying so on stderr first."""
    sys.stderr.write(f"ragdx run: stopped on purpose by --fault {fault.value} {where} (exit {FAULT_EXIT}); "
                     f"continue with: ragdx run --resume {out}\n")
    sys.stderr.flush()
    os._exit(FAULT_EXIT)


def _keep_draft(state: RunState, claim: Claim, worker: str, one: Answered) -> Draft | None:
    return state.write_draft(claim, worker, one.binding.index_version, json.dumps(one.trace_json()),
                             json.dumps(one.diagnosis.to_dict()), (one.diagnosis, one.view, one.evidence, one.row))


def _settle(state: RunState, pipeline: Pipeline, out: Path, claim: Claim, draft: Draft | None, worker: str,
            fault: Fault | None, binding: EvidenceBinding | None = None, *, shortcut: bool = False) -> None:
    """Recheck a draft's evidence (``binding``: the evidence it cites, read from the draft when
    not given), then publish it, or fail the item with the reason. Only a draft this worker just
    made may take the shortcut of an unchanged store (``shortcut``); one read back (a dead
    worker's) is rechecked span by span: the store may have been rebuilt at the same path since,
    keeping its id and reaching the same index version."""
    if draft is None:  # a drafted item without a checkpoint: the two are written in one transaction
        raise StoreError(f"{out / RUN_DB}: item {claim.query_id!r} is drafted but has no checkpoint")
    where = f"{out / RUN_DB}: the draft of {claim.query_id!r}"
    if binding is None:
        binding = EvidenceBinding.from_trace(draft.trace, where)
    check = recheck(pipeline.store, binding, shortcut=shortcut, where=where)
    if not check.valid:
        state.fail(claim.n, worker, check.describe())
        return
    with state.publishing(claim.n, worker) as sizes:
        if sizes is None:
            return
        new = append_published(out, sizes, (draft.trace_line, draft.diagnosis_line), state.published_lines)
        if fault is Fault.BEFORE_PUBLISH:
            _crash(fault, f"after appending item {claim.query_id!r} but before committing it", out)
        state.set_sizes(new)


def _failed(state: RunState) -> tuple[tuple[str, str], ...]:
    return tuple((i.query_id, i.reason) for i in state.items() if i.state is ItemState.FAILED)





def _finish(state: RunState, pipeline: Pipeline, queries: Sequence[Query], out: Path,
            queries_path: Path | None, started: float) -> RunResult | None:
    """Once every item is published or failed: the manifest, metrics and report of the published."""
    counts = state.counts()
    if counts[ItemState.QUEUED] or counts[ItemState.LEASED] or counts[ItemState.DRAFTED]:
        return None
    drafts = state.published()
    diagnoses, views, evidence, rows = (tuple(objects[k] for _, _, objects in drafts) for k in range(4))
    published = [queries[n] for n, _, _ in drafts]
    versions = state.index_versions()
    failed = _failed(state)
    info = manifest(pipeline, queries_path) | {"durable": {
        "items": len(queries), "published": len(drafts),
        "failed": [{"id": q, "reason": r} for q, r in failed],
        "index_versions": versions, "index_version_changed": len(versions) > 1,
        "note": (f"the index version changed while the run ran: the published answers were made at index "
                 f"versions {', '.join(map(str, versions))}" if len(versions) > 1 else "")}}
    write_json(out / "manifest.json", info)
    metrics = layered(rows)
    write_json(out / "metrics.json", metrics.to_dict())
    write_report(out, info, published, Executed((), diagnoses, rows, views, evidence), metrics, pipeline.store)
    return RunResult(out, diagnoses, time.perf_counter() - started, metrics)


def invocation_of(out: Path) -> dict[str, Any]:
    """How a durable run was started (what ``ragdx run --resume`` starts again).

    Raises:
        InputError: ``out`` is not a durable run folder.
        StoreError: its ``run.db`` is empty or damaged (naming it).
    """
    with RunState(_run_db(out, "--resume"), create=False) as state:
        invocation = state.info().get("invocation", {})
        state.check_items()
    bad = _bad_invocation(invocation)
    if bad:
        raise damaged(out / RUN_DB, f"its invocation record has no {bad!r} of the right type")
    return dict(invocation)


#: what ``ragdx run`` records of how it was started, by type (store and queries always)
_INVOCATION = {"store": str, "queries": str, "config": str, "oracle": str, "strict": bool,
               "lease_seconds": (int, float), "set": list}


def _bad_invocation(invocation: Any) -> str | None:
    """The first key of a recorded invocation that is missing or of the wrong type, if any."""
    if not isinstance(invocation, dict):
        return "invocation"
    for key, kind in _INVOCATION.items():
        value = invocation.get(key)
        if value is None and key not in ("store", "queries"):
            continue
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            return key
    if not all(isinstance(v, str) for v in invocation.get("set") or []):
        return "set"
    return None


def _run_db(out: Path, option: str) -> Path:
    path = out / RUN_DB
    if not path.is_file():
        raise InputError(f"{path} not found: not a run folder of 'ragdx run'", field=option)
    return path


def inspect_run(out: Path) -> dict[str, Any]:
    """A run's items by state (with reasons) and the checkpoints kept (``ragdx run --inspect``).

    Raises:
        InputError: ``out`` is not a durable run folder.
        StoreError: its ``run.db`` is empty or damaged (naming it).
    """
    with RunState(_run_db(out, "--inspect"), create=False) as state:
        state.check_items()
        items: list[ItemRecord] = state.items()
        by_state: dict[str, list[dict[str, Any]]] = {s.value: [] for s in ItemState}
        for i in items:
            entry: dict[str, Any] = {"id": i.query_id, "attempts": i.attempts, "checkpoints": i.checkpoints}
            if i.worker and i.state in (ItemState.LEASED, ItemState.DRAFTED):
                entry |= {"worker": i.worker, "lease_left_seconds": round((i.lease_until or 0) - time.time(), 1)}
            if i.reason:
                entry["reason"] = i.reason
            by_state[i.state.value].append(entry)
        return {"run": str(out), "counts": {s.value: len(v) for s, v in zip(ItemState, by_state.values())},
                "items": by_state, "checkpoints": state.checkpoints(),
                "index_versions": state.index_versions()}
