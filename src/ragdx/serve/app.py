"""The ``ragdx serve`` web application (Starlette): the OTLP/HTTP receiver, a small JSON API, and
the UI (server-rendered pages with the report's own styles and views; no asset from elsewhere).

Routes: ``POST /v1/traces`` (OTLP/HTTP), ``GET /api/status``, ``GET /api/traces``, ``GET /`` (runs,
live windows, first failures over time, the compare form), ``GET /window/{start}`` (a window's
traces), ``GET /window/{start}/report`` (the window as a run report), ``GET /trace/{id}`` (a
trace's stage-by-stage drill-down), ``GET /runs/{name}/report`` and ``GET /compare?base=&new=``
(``run:NAME`` or ``window:START`` each).

Every request must carry the token when the server has one: ``Authorization: Bearer TOKEN`` (the
OTLP exporter's ``OTEL_EXPORTER_OTLP_HEADERS``), or ``?token=TOKEN`` once in a browser, which
sets a cookie. On loopback the ``Host`` header must name loopback too (no DNS rebinding).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hmac
import logging
import math
import threading
import urllib.parse
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ragdx.traces.jsonl import parse_trace
from ragdx.errors import InputError, MissingExtraError, RagdxError
from ragdx.serve.live import UNLABELLED, LiveSpec, checked_claims, displayed, run_process
from ragdx.serve.receiver import PROTOBUF, Limits, _Refused, decode_request
from ragdx.types import Principal, StageKind

__all__ = ["ServeConfig", "build_app", "LOOPBACK"]

log = logging.getLogger("ragdx.serve")
LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


@dataclass
class ServeConfig:
    """What ``ragdx serve`` was started with (the CLI's flags)."""

    spec: LiveSpec
    principal: Principal = Principal()
    token: str | None = None
    host: str = "127.0.0.1"
    window: float = 3600.0
    limits: Limits = Limits()
    max_open: int = 100_000
    process: bool = False  # diagnose in a process of its own (ragdx serve), else in a thread


def _a_time(t: float) -> bool:
    """Whether a window's start is a time this server could have seen (1970 to 9999)."""
    return math.isfinite(t) and 0 <= t < 253_402_300_800


def _when(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _pct(n: Any, d: Any) -> str:
    return f"{n / d:.0%}" if d else "–"


def build_app(config: ServeConfig):
    """The application and its live diagnoser (started and stopped with the app's lifespan)."""
    try:
        from starlette.applications import Starlette
        from starlette.concurrency import run_in_threadpool
        from starlette.requests import Request
        from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
        from starlette.routing import Route
    except ImportError:
        raise MissingExtraError("serve", "ragdx serve") from None
    from ragdx.report import html as report

    live = config.spec.diagnoser()
    spool, data, queries = live.spool, config.spec.data, live.queries
    counter = {"n": 0}
    counter_lock = threading.Lock()

    @contextlib.contextmanager
    def store():
        s = config.spec.open_store()
        try:
            yield s
        finally:
            if s is not None:
                s.close()

    def page(title: str, body: str) -> HTMLResponse:
        return HTMLResponse(f"""<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{report._e(title)}</title>
<style>{report._CSS}</style></head><body><main><p class="small"><a href="/">ragdx serve</a></p>
<h1>{report._e(title)}</h1>{body}</main></body></html>""")

    # ---- the receiver ----

    def refusal(status: int, message: str, protobuf: bool) -> Response:
        if protobuf:
            with contextlib.suppress(ImportError):
                from google.rpc.status_pb2 import Status
                return Response(Status(code=3, message=message).SerializeToString(), status,
                                media_type="application/x-protobuf")
        return JSONResponse({"code": 3, "message": message}, status)

    async def traces(request: Request) -> Response:
        ctype = request.headers.get("content-type", "")
        protobuf = ctype.split(";")[0].strip().lower() in PROTOBUF
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > config.limits.max_bytes:
            return refusal(413, f"the body has {declared} bytes, more than the limit of {config.limits.max_bytes} "
                                "(--max-request-bytes)", protobuf)
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > config.limits.max_bytes:
                return refusal(413, f"the body exceeds the limit of {config.limits.max_bytes} bytes "
                                    "(--max-request-bytes)", protobuf)
        with counter_lock:
            counter["n"] += 1
            number = counter["n"]
        try:
            spans, system = await run_in_threadpool(decode_request, bytes(body), ctype,
                                                    request.headers.get("content-encoding"), config.limits,
                                                    "OTLP request", number)
        except _Refused as exc:
            log.warning("refused a trace request (%d): %s", exc.status, exc)
            return refusal(exc.status, str(exc), protobuf)
        if spool.open_traces() >= config.max_open:
            response = refusal(503, f"{config.max_open} traces wait for diagnosis (--max-open): retry later",
                               protobuf)
            response.headers["Retry-After"] = "5"
            return response
        await run_in_threadpool(spool.add, spans, system, len(body))
        if protobuf:
            from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
            return Response(ExportTraceServiceResponse().SerializeToString(), media_type="application/x-protobuf")
        return JSONResponse({})

    # ---- the API ----

    async def status(request: Request) -> Response:
        return JSONResponse(await run_in_threadpool(spool.counts))

    async def api_traces(request: Request) -> Response:
        params = request.query_params
        labelled = params.get("labelled")
        where, args = ("labelled = ?", [int(labelled == "1")]) if labelled in ("0", "1") else ("1", [])
        try:
            limit, offset = int(params.get("limit", 1000)), int(params.get("offset", 0))
        except ValueError:
            return PlainTextResponse("limit and offset must be integers", 400)
        if not 1 <= limit <= 10_000 or offset < 0:
            return PlainTextResponse(f"limit must be 1 to 10000 and offset at least 0, not {limit} and {offset}", 400)
        rows = await run_in_threadpool(spool.results, where, args, limit, offset)
        return JSONResponse([{k: r[k] for k in ("trace_id", "seen", "query_id", "labelled", "question", "outcome",
                                                 "first_failure", "system", "diagnosis", "abstained", "claims",
                                                 "claims_supported", "retrieval_score", "evidence_changed", "error")}
                             for r in rows])

    # ---- the UI ----

    def runs() -> list[str]:
        folder = data / "runs"
        return sorted(p.name for p in folder.iterdir() if (p / "diagnosis.jsonl").is_file()) \
            if folder.is_dir() else []

    def index_page() -> str:
        e = report._e
        windows = spool.windows(config.window)
        failures = spool.first_failures(config.window)
        counts = spool.counts()
        previous: dict[float, float | None] = {}
        ordered = sorted(windows, key=lambda w: w["start"])
        for n, w in enumerate(ordered):
            previous[w["start"]] = ordered[n - 1]["retrieval_score"] if n else None
        rows = []
        for w in windows:
            score, before = w["retrieval_score"], previous[w["start"]]
            drift = f"{score - before:+.3f}" if score is not None and before is not None else "–"
            rows.append([f'<a class="window-link" href="/window/{w["start"]:.0f}">{e(_when(w["start"]))}</a>',
                         str(w["traces"]), str(w["labelled"] or 0), _pct(w["supported"] or 0, w["labelled"]),
                         _pct(w["abstained"] or 0, w["answers"]), _pct(w["claims_supported"] or 0, w["claims"]),
                         "–" if score is None else f"{score:.3f}", drift,
                         f'{w["evidence_changed"] or 0} of {w["rechecked"]}' if w["rechecked"] else "–",
                         str(w["errors"] or 0)])
        stages = [k.value for k in StageKind if any(k.value in f for f in failures.values())]
        fail_rows = [[e(_when(w))] + [str(failures[w].get(s, 0)) for s in stages] for w in sorted(failures)]
        choices = [f"run:{r}" for r in runs()] + [f"window:{w['start']:.0f}" for w in windows if w["labelled"]]
        options = "".join(f'<option value="{e(c)}">{e(c)}</option>' for c in choices)
        run_list = "".join(f'<li><a class="run-link" href="/runs/{e(r)}/report">{e(r)}</a></li>' for r in runs()) \
            or '<li class="muted">No run folders under DATA/runs.</li>'
        return (f'<p class="muted">{counts["requests"]} requests, {counts["spans"]} spans, {counts["traces"]} traces '
                f'({counts["open"]} waiting, {counts["diagnosed"]} diagnosed); {len(queries)} labelled '
                f"questions; windows of {config.window:g} s</p>"
                f'<section id="windows"><h2>Live windows</h2>'
                + report._table(["window", "traces", "labelled", "supported", "abstained", "claims supported",
                                 "retrieval score", "drift", "evidence changed", "unreadable"], rows,
                                (1, 2, 3, 4, 5, 6, 7)) + "</section>"
                '<section id="failures"><h2>First failures over time</h2>'
                + (report._table(["window", *stages], fail_rows, tuple(range(1, len(stages) + 1))) if fail_rows
                   else '<p class="muted">No labelled trace has failed.</p>') + "</section>"
                f'<section id="runs"><h2>Runs</h2><ul>{run_list}</ul></section>'
                f'<section id="compare"><h2>Compare</h2><form action="/compare" method="get">'
                f'<label>base <select name="base" id="base">{options}</select></label> '
                f'<label>new <select name="new" id="new">{options}</select></label> '
                f'<button id="compare-button" type="submit">Compare</button></form></section>')

    async def index(request: Request) -> Response:
        return page("ragdx serve", await run_in_threadpool(index_page))

    def window_rows(start: float) -> list[dict[str, Any]]:
        return spool.results("seen >= ? AND seen < ?", (start, start + config.window))

    async def window(request: Request) -> Response:
        start = float(request.path_params["start"])
        if not _a_time(start):
            return PlainTextResponse(f"no window at {request.url.path}: a window starts at a time, in seconds", 404)
        rows = await run_in_threadpool(window_rows, start)
        e = report._e
        body = [[f'<a class="trace-link" href="/trace/{e(r["trace_id"])}">{e(r["trace_id"][:12])}</a>',
                 e(r["query_id"] if r["labelled"] else "–"), e((r["question"] or "")[:90]),
                 report._badge(r["outcome"]) if r["outcome"] else "–", e(r["first_failure"] or "–"),
                 "–" if r["abstained"] is None else ("yes" if r["abstained"] else "no"),
                 f'{r["claims_supported"]}/{r["claims"]}' if r["claims"] else "–",
                 "–" if r["retrieval_score"] is None else f'{r["retrieval_score"]:.3f}',
                 "–" if r["evidence_changed"] is None else ("changed" if r["evidence_changed"] else "valid"),
                 e(r["error"] or "")] for r in rows]
        link = f'<p><a id="window-report" href="/window/{start:.0f}/report">The window as a run report</a></p>' \
            if any(r["labelled"] for r in rows) else ""
        return page(f"Window {_when(start)}", link + report._table(
            ["trace", "question id", "question", "outcome", "first failure", "abstained", "claims supported",
             "retrieval score", "cited evidence", "error"], body))

    def window_folder(start: float) -> Path:
        """The window's labelled traces (each question's latest) diagnosed and written as a run
        folder, ``DATA/windows/START``, by the writer of ``ragdx diagnose``."""
        from ragdx.experiments.imported import write_imported
        from ragdx.runfolder import write_queries
        latest: dict[str, dict] = {}
        for r in window_rows(start):
            if r["labelled"] and r["trace"] is not None:
                latest[r["query_id"]] = r
        if not latest:
            raise InputError(f"window {start:.0f} has no labelled trace")
        asked = [q for q in queries if q.id in latest]
        system = next((r["system"] for r in latest.values() if r["system"]), None) or "imported system"
        out = data / "windows" / f"{start:.0f}"
        views = [(n, parse_trace(latest[q.id]["trace"], f"window {start:.0f}", n)) for n, q in enumerate(asked, 1)]
        with store() as s:
            # diagnosed whole, shown as every page shows a document's text: what the server's principal
            # may read, never the question's principal's
            write_imported(views, asked, out, s, source=f"window {_when(start)}", system=system,
                           checker=live.checker, chunks=live.chunks, abstention=live.abstention,
                           shown=lambda view: displayed(view, config.principal, s))
        write_queries(out, asked)
        return out

    async def window_report(request: Request) -> Response:
        start = float(request.path_params["start"])
        if not _a_time(start):
            return PlainTextResponse(f"no window at {request.url.path}: a window starts at a time, in seconds", 404)
        try:
            out = await run_in_threadpool(window_folder, start)
        except RagdxError as exc:
            return PlainTextResponse(str(exc), 404)
        return HTMLResponse((out / "report.html").read_text(encoding="utf-8"))

    def trace_page(trace_id: str) -> tuple[str, str] | None:
        rows = spool.results("trace_id = ?", (trace_id,))
        if not rows:
            return None
        row = rows[0]
        e = report._e
        facts = (f'<p class="muted">seen {e(_when(row["seen"]))} · system {e(row["system"] or "–")} · '
                 f'{"labelled: " + e(row["query_id"]) if row["labelled"] else "unlabelled"} · abstained '
                 f'{e({None: "–", 0: "no", 1: "yes"}[row["abstained"]])} · claims supported {row["claims_supported"]}/{row["claims"]} · '
                 f'retrieval score {e(row["retrieval_score"])} · cited evidence '
                 f'{e({None: "not rechecked", 0: "valid", 1: "changed"}[row["evidence_changed"]])}</p>')
        if row["error"]:
            return f"Trace {trace_id}", facts + f'<p class="worse">{e(row["error"])}</p>'
        with store() as s:
            query, view, evidence, diagnosis = live.prepared(row, s)
            view = displayed(view, config.principal, s)
        if query is not None:
            body = report._drilldown(query, diagnosis, view, evidence, {}).replace("<details ", "<details open ", 1)
        else:
            from ragdx.diagnosis.evidence import QueryEvidence
            none = QueryEvidence(UNLABELLED + trace_id, ())
            if view.answer is not None:  # the claims as ragdx's own checker judged them
                view = dataclasses.replace(view, answer=dataclasses.replace(
                    view.answer, claims=tuple(checked_claims(view, live.checker))))
            body = (f"<p><b>Question</b> {e(row['question'] or '–')}</p>"
                    + "".join(report._stage_list(st, none, {}, []) for st in view.stages) + report._answer(view))
        return f"Trace {trace_id}", facts + f'<section id="trace">{body}</section>'

    async def trace(request: Request) -> Response:
        found = await run_in_threadpool(trace_page, request.path_params["trace_id"])
        if found is None:
            return PlainTextResponse(f"no diagnosed trace {request.path_params['trace_id']!r}", 404)
        return page(*found)

    async def run_report(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in runs():
            return PlainTextResponse(f"no run folder {name!r} under {data / 'runs'}", 404)
        found = data / "runs" / name / "report.html"
        if not found.is_file():
            return PlainTextResponse(f"the run folder {name!r} has no report.html (ragdx run and ragdx diagnose "
                                     "write it)", 404)
        return HTMLResponse(found.read_text(encoding="utf-8"))

    def folder_of(choice: str) -> Path:
        kind, _, name = choice.partition(":")
        if kind == "run" and name in runs():
            return data / "runs" / name
        if kind == "window":
            with contextlib.suppress(ValueError):  # not a number: the error below
                return window_folder(float(name))
        raise InputError(f"{choice!r} is neither run:NAME (a folder under DATA/runs) nor window:START")

    def compare_page(base: str, new: str) -> str:
        from ragdx.experiments.compare import compare_runs, load_run
        from ragdx.report.compare import render_html
        given = config.spec.queries  # for a run folder without its own queries.jsonl
        return render_html(compare_runs(load_run(folder_of(base), given), load_run(folder_of(new), given)))

    async def compare(request: Request) -> Response:
        base, new = request.query_params.get("base", ""), request.query_params.get("new", "")
        try:
            return HTMLResponse(await run_in_threadpool(compare_page, base, new))
        except RagdxError as exc:
            return PlainTextResponse(str(exc), 400)

    routes = [Route("/v1/traces", traces, methods=["POST"]), Route("/api/status", status),
              Route("/api/traces", api_traces), Route("/", index), Route("/window/{start:float}", window),
              Route("/window/{start:float}/report", window_report), Route("/trace/{trace_id}", trace),
              Route("/runs/{name}/report", run_report), Route("/compare", compare),
              Route("/favicon.ico", lambda request: Response(status_code=204))]

    @contextlib.asynccontextmanager
    async def lifespan(app):
        if config.process:
            import multiprocessing
            import os
            context = multiprocessing.get_context("spawn")
            stop = context.Event()
            child = context.Process(target=run_process, args=(config.spec, stop, os.getpid()), name="ragdx-live",
                                    daemon=True)
            child.start()
        else:
            live.start()
        try:
            yield
        finally:
            if config.process:
                stop.set()
                child.join(30)
            else:
                live.stop()

    app = Starlette(routes=routes, lifespan=lifespan)
    wrapped = _Guard(app, config.token, config.host in LOOPBACK)
    return wrapped, live


class _Guard:
    """ASGI middleware: the token on every request when there is one; on loopback, a loopback
    ``Host`` header (a page elsewhere cannot reach the server through DNS rebinding)."""

    def __init__(self, app: Any, token: str | None, loopback: bool) -> None:
        self.app, self.token, self.loopback = app, token, loopback

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
        if self.loopback:
            host = headers.get("host", "")
            name = host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0] + "]"
            if name not in LOOPBACK:
                return await _plain(send, 403, f"Host {host!r} is not loopback")
        if self.token is None:
            return await self.app(scope, receive, send)
        given = headers.get("authorization", "").removeprefix("Bearer ").strip()
        cookies = dict(c.strip().partition("=")[::2] for c in headers.get("cookie", "").split(";") if "=" in c)
        query = dict(p.partition("=")[::2] for p in scope.get("query_string", b"").decode().split("&") if p)
        if hmac.compare_digest(given.encode(), self.token.encode()) or hmac.compare_digest(
                cookies.get("ragdx_token", "").encode(), self.token.encode()):
            return await self.app(scope, receive, send)
        if hmac.compare_digest(query.get("token", "").encode(), self.token.encode()):
            # back to the same page of this server: "//host/" or "/\\host/" would send the browser away
            here = "/" + urllib.parse.quote(scope["path"].lstrip("/\\"), safe="/:@!$&'()*+,;=-._~")
            return await _plain(send, 303, "", [(b"location", here.encode()),
                                                (b"set-cookie", f"ragdx_token={self.token}; HttpOnly; "
                                                                "SameSite=Strict; Path=/".encode())])
        return await _plain(send, 401, "this server needs its token: Authorization: Bearer TOKEN, or ?token=TOKEN")


async def _plain(send: Any, status: int, text: str, extra: list[tuple[bytes, bytes]] = ()) -> None:
    body = text.encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode()), *extra]})
    await send({"type": "http.response.body", "body": body})
