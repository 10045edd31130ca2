"""A chat-completions server on loopback for tests: it replies by a script and records every
request (so a test can read the exact prompt a generator sent). Standard library only."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["ChatServer"]


class ChatServer:
    """Serves ``POST .../chat/completions`` on 127.0.0.1 until :meth:`close`.

    Args:
        script: one step per request, in order: a reply text, ``"sleep"`` (wait 0.6 s, then reply
            ``OK``), or ``"500"``, ``"400"``, ``"429"`` (that status, no body). When the script runs
            out, the reply is ``OK``.

    Attributes:
        url: the base URL to give a :class:`~ragdx.stages.generate.ChatClient`.
        requests: ``(path, Authorization header, JSON body)`` of every request received.
    """

    def __init__(self, *script: str) -> None:
        self.script: list[str] = list(script)
        self.requests: list[tuple[str, str | None, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                """Keep the test output quiet."""

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append((self.path, self.headers.get("Authorization"), body))
                step = outer.script.pop(0) if outer.script else "OK"
                if step == "sleep":
                    time.sleep(0.6)
                if step in ("500", "400", "429"):
                    self.send_response(int(step))
                    self.end_headers()
                    return
                reply = {"choices": [{"message": {"role": "assistant", "content": step}}],
                         "usage": {"prompt_tokens": 120, "completion_tokens": 30}}
                data = json.dumps(reply).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    return  # the client timed out and hung up

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    def prompt(self, n: int = -1) -> list[dict[str, str]]:
        """The messages of the ``n``-th request received (default the last)."""
        return self.requests[n][2]["messages"]

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> "ChatServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
