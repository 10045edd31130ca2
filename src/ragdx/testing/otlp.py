"""Small OpenInference traces as OTLP/JSON requests, made from a query set's labels: for testing
``ragdx serve`` (and the load benchmark) without running a framework.

Each trace is a CHAIN root span (the question as input, the query id in its metadata unless
unlabelled), a RETRIEVER span whose documents hold each required group's first quote and one
distractor, with scores, the same documents as the context (``ragdx.stage.kind``), and an LLM
span answering the reference answer as one claim citing the quotes' documents (an unanswerable
question: ``I don't know``)::

    body = json.dumps(request([trace(q, n) for n, q in enumerate(queries)]))
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any, Mapping, Sequence

__all__ = ["trace", "request", "trace_id", "any_value", "Load", "Server", "free_port", "get_json"]


def trace_id(n: int, salt: str = "") -> str:
    """A 32-hex-digit trace id, the same for the same ``n`` and ``salt``."""
    return hashlib.sha256(f"{salt}:{n}".encode()).hexdigest()[:32]


def any_value(v: Any) -> dict[str, Any]:
    """A value as an OTLP/JSON ``AnyValue`` (anything but a bool, number or string as JSON text)."""
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    return {"stringValue": v if isinstance(v, str) else json.dumps(v)}


def _span(tid: str, sid: str, parent: str | None, name: str, kind: str, start: int, attrs: Mapping[str, Any]) -> dict:
    span = {"traceId": tid, "spanId": sid, "name": name, "kind": 1, "startTimeUnixNano": str(start),
            "endTimeUnixNano": str(start + 1_000_000),
            "attributes": [{"key": k, "value": any_value(v)} for k, v in
                           {"openinference.span.kind": kind, **attrs}.items()]}
    if parent:
        span["parentSpanId"] = parent
    return span


def trace(query: Mapping[str, Any], n: int, *, labelled: bool = True, salt: str = "",
          score: float = 10.0, now: float | None = None) -> list[dict]:
    """One question's spans (OTLP/JSON), its trace id :func:`trace_id` of ``n``; ``score`` is the
    top retrieval score."""
    tid = trace_id(n, salt)
    sid = [tid[:12] + f"{k:04x}" for k in range(4)]
    start = int((time.time() if now is None else now) * 1e9)
    docs = []
    for g, group in enumerate(query.get("required") or []):
        alt = group[0]
        if "quote" in alt:
            docs.append((f"{alt['doc']}#{g}", alt["doc"], f"{alt['quote']}."))
    docs.append(("distractor#0", "policies/other.md", "Opening hours are nine to five on weekdays."))
    retrieved: dict[str, Any] = {"input.value": query["question"]}
    for k, (did, doc, text) in enumerate(docs):
        key = f"retrieval.documents.{k}.document"
        retrieved |= {f"{key}.id": did, f"{key}.content": text, f"{key}.score": round(score - k, 3),
                      f"{key}.metadata": json.dumps({"doc": doc})}
    answer = query.get("answer") or "" if query.get("answerable", True) else "I don't know."
    context = {k: v for k, v in retrieved.items() if k != "input.value"} | {"ragdx.stage.kind": "context", "ragdx.stage": "context"}
    claims = [{"text": answer, "citations": [d for d, _, _ in docs[:-1]]}] if query.get("answerable", True) else []
    root_attrs: dict[str, Any] = {"input.value": query["question"], "output.value": answer}
    if labelled:
        root_attrs["metadata"] = json.dumps({"query_id": query["id"]})
    return [_span(tid, sid[0], None, "rag", "CHAIN", start, root_attrs),
            _span(tid, sid[1], sid[0], "retriever", "RETRIEVER", start + 10, retrieved),
            _span(tid, sid[2], sid[0], "context", "RETRIEVER", start + 15, context),
            _span(tid, sid[3], sid[0], "llm", "LLM", start + 20, {
                "llm.output_messages.0.message.content": answer, "llm.token_count.prompt": 100,
                "llm.token_count.completion": len(answer.split()), "ragdx.claims": json.dumps(claims)})]


#: the poison traces :func:`poison` makes: what the receiver refuses (400), and what it
#: acknowledges but no diagnosis can read (set aside with its reason)
POISONS = ("cycle", "surrogate", "kind")


def poison(query: Mapping[str, Any], n: int, kind: str, *, salt: str = "") -> bytes:
    """A request body of one bad trace of question ``query``: ``cycle`` (its root's parent is its
    last span: acknowledged, then set aside when its root never comes), ``surrogate`` (a lone
    surrogate in the question: refused) or ``kind`` (a stage kind that does not exist: refused)."""
    spans = trace(query, n, salt=salt)
    if kind == "cycle":
        spans[0]["parentSpanId"] = spans[-1]["spanId"]
    elif kind == "kind":
        spans[1]["attributes"].append({"key": "ragdx.stage.kind", "value": {"stringValue": "magic"}})
    body = json.dumps(request(spans))
    return body.replace('"input.value", "value": {"stringValue": "', '"input.value", "value": {"stringValue": "\\udfff',
                        1).encode() if kind == "surrogate" else body.encode()


def request(spans: Sequence[dict], service: str = "synthetic-rag") -> dict[str, Any]:
    """An OTLP/JSON ExportTraceServiceRequest holding ``spans`` (lists from :func:`trace`, joined)."""
    return {"resourceSpans": [{"resource": {"attributes": [{"key": "service.name",
                                                             "value": {"stringValue": service}}]},
                               "scopeSpans": [{"scope": {"name": "ragdx.testing"}, "spans": list(spans)}]}]}


class Load:
    """Traces sent to an OTLP/HTTP endpoint at a steady rate, one trace per request (OTLP/JSON),
    from a few threads with a kept-alive connection each; records the trace ids acknowledged
    (answered 200), refused (another status) and failed (no answer: the server died).

    Args:
        url: ``http://HOST:PORT`` (the path ``/v1/traces`` is added).
        queries: labelled questions as JSON objects; the ``n``-th trace asks ``queries[n % len]``.
        rate: traces per second; seconds: how long (``stop()`` ends it sooner).
    """

    def __init__(self, url: str, queries: Sequence[Mapping[str, Any]], rate: float, seconds: float, *,
                 workers: int = 4, salt: str = "load", headers: Mapping[str, str] | None = None,
                 poison_every: int = 0) -> None:
        self.url, self.queries, self.rate, self.seconds = url, list(queries), rate, seconds
        self.workers, self.salt, self.headers = workers, salt, dict(headers or {})
        self.poison_every = poison_every  # every n-th trace a poison (:func:`poison`, the kinds in turn); 0: none
        self.poisoned: set[str] = set()
        self.acknowledged: list[str] = []
        self.refused: list[tuple[str, int]] = []
        self.failed: list[str] = []
        self.latencies: list[float] = []
        self._stop = False

    def stop(self) -> None:
        self._stop = True

    def run(self) -> "Load":
        import http.client
        import threading
        from urllib.parse import urlsplit
        parts = urlsplit(self.url)
        total = int(self.rate * self.seconds)
        start = time.monotonic()
        lock = threading.Lock()
        counter = iter(range(total))

        def worker() -> None:
            conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
            while not self._stop:
                with lock:
                    n = next(counter, None)
                if n is None:
                    return
                delay = start + n / self.rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                query = self.queries[n % len(self.queries)]
                tid = trace_id(n, self.salt)
                if self.poison_every and n % self.poison_every == self.poison_every - 1:
                    body = poison(query, n, POISONS[(n // self.poison_every) % len(POISONS)], salt=self.salt)
                    with lock:
                        self.poisoned.add(tid)
                else:
                    body = json.dumps(request(trace(query, n, salt=self.salt))).encode()
                sent = time.monotonic()
                try:
                    conn.request("POST", "/v1/traces", body, {"Content-Type": "application/json", **self.headers})
                    response = conn.getresponse()
                    response.read()
                except (OSError, http.client.HTTPException):  # no answer: the server is gone
                    with lock:
                        self.failed.append(tid)
                    conn.close()
                    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
                    continue
                with lock:
                    self.latencies.append(time.monotonic() - sent)
                    (self.acknowledged.append(tid) if response.status == 200
                     else self.refused.append((tid, response.status)))
            conn.close()

        threads = [threading.Thread(target=worker, daemon=True) for _ in range(self.workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return self


def free_port() -> int:
    """A TCP port free on loopback now."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str, token: str | None = None) -> Any:
    import urllib.request
    request_ = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(request_, timeout=30) as response:
        return json.loads(response.read())


class Server:
    """``ragdx serve ARGS`` as a subprocess on a free loopback port, up when the constructor
    returns; ``stop()`` ends it (``kill()``: as ``kill -9`` does).

    Raises:
        AssertionError: it did not answer within 30 s (with the end of its stderr).
    """

    def __init__(self, *args: str, env: Mapping[str, str] | None = None) -> None:
        import os
        import subprocess
        import sys
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "ragdx.cli", "serve", "--port", str(self.port), *args],
                                     env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while True:
            try:
                self.status()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise AssertionError(f"ragdx serve did not start: {self.proc.stderr.read().decode()[-2000:]}")
                time.sleep(0.2)

    def status(self) -> dict[str, int]:
        return get_json(self.url + "/api/status")

    def wait_diagnosed(self, count: int, timeout: float = 60) -> list[dict]:
        """Every result once ``count`` traces are diagnosed and none waits."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.status()
            if status["diagnosed"] >= count and status["open"] == 0:
                return self.results()
            time.sleep(0.3)
        raise AssertionError(f"not all traces were diagnosed in {timeout} s: {self.status()}")

    def results(self) -> list[dict]:
        """Every result (``/api/traces``, page by page)."""
        out: list[dict] = []
        while True:
            page = get_json(f"{self.url}/api/traces?limit=10000&offset={len(out)}")
            out += page
            if len(page) < 10000:
                return out

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        import subprocess
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.proc.stderr is not None:
            self.proc.stderr.close()
