"""Open a page in headless Chromium and inspect it as a user's browser renders it, through the
Chrome DevTools Protocol over a pipe (``--remote-debugging-pipe``): stdlib only, no driver.

Used by the report's browser test; usable for testing any report a user builds on ragdx::

    with Browser() as browser:
        page = browser.open(Path("run/report.html"))
        assert page.evaluate("document.querySelectorAll('details.q').length") == 18
        page.screenshot(Path("shot.png"))
        assert not page.errors

``page.errors`` collects console errors, uncaught exceptions and error log entries;
``page.requests`` every URL the page asked for (a self-contained page asks for none but itself).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from ragdx.errors import BrowserError, MissingExtraError

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "chrome")


def find_chromium() -> str | None:
    """The path of a Chromium-family browser on PATH, if any."""
    return next((path for name in CANDIDATES if (path := shutil.which(name))), None)


class Page:
    """One page (a DevTools session)."""

    def __init__(self, browser: "Browser", session: str) -> None:
        self._browser = browser
        self.session = session
        self.errors: list[str] = []
        self.requests: list[str] = []

    def call(self, method: str, params: dict | None = None) -> dict:
        return self._browser.call(method, params, session=self.session)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-serialisable values)."""
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True})
        if "exceptionDetails" in result:
            raise BrowserError(f"evaluating {expression!r} threw: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def click(self, selector: str, *, navigates: bool = False) -> None:
        """Click the first element ``selector`` matches, as a user's mouse does (scrolled into view,
        pressed and released at its centre); with ``navigates``, wait for the page it opens.

        Raises:
            BrowserError: no element matches, or the new page did not load in time.
        """
        centre = self.evaluate(f"""(() => {{const e = document.querySelector({json.dumps(selector)});
            if (!e) return null; e.scrollIntoView({{block: 'center'}}); const r = e.getBoundingClientRect();
            return [r.x + r.width / 2, r.y + r.height / 2];}})()""")
        if centre is None:
            raise BrowserError(f"no element matches {selector!r}")
        if navigates:
            self._browser._events = [e for e in self._browser._events if e.get("sessionId") != self.session]
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", {"type": kind, "x": centre[0], "y": centre[1], "button": "left",
                                                   "clickCount": 1})
        if navigates:
            self._browser._wait_for("Page.loadEventFired", self.session)

    def wait(self, expression: str, timeout: float = 30.0) -> Any:
        """Wait until a JavaScript expression is truthy; returns its value.

        Raises:
            BrowserError: it was not within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise BrowserError(f"{expression!r} was still false after {timeout:g} s")
            time.sleep(0.05)

    def screenshot(self, path: Path, max_height: int = 8000) -> Path:
        """A PNG of the page, down to ``max_height`` CSS pixels: Chromium refuses a capture taller
        than its largest texture ("Page is too large"), which a report with every drill-down open
        can exceed."""
        metrics = self.call("Page.getLayoutMetrics", {})
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], max_height), "scale": 1}
        data = self.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                    "clip": clip})["data"]
        path.write_bytes(base64.b64decode(data))
        return path


class Browser:
    """Headless Chromium driven over the DevTools pipe.

    Args:
        executable: the browser (default: the first of ``CANDIDATES`` on PATH).
        timeout: seconds to wait for any one reply or page load.
    """

    def __init__(self, executable: str | None = None, timeout: float = 30.0) -> None:
        self.executable = executable or find_chromium()
        if self.executable is None:
            raise MissingExtraError("no Chromium found on PATH (Debian: apt-get install chromium)")
        self.timeout = timeout
        self._id = 0
        self._buffer = b""
        self._events: list[dict] = []
        self._pages: dict[str, Page] = {}

    def __enter__(self) -> "Browser":
        self._profile = tempfile.mkdtemp(prefix="ragdx-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def plumb() -> None:  # the browser reads commands on fd 3 and writes replies on fd 4
            os.dup2(to_browser_r, 3)
            os.dup2(from_browser_w, 4)

        args = [self.executable, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--remote-debugging-pipe", f"--user-data-dir={self._profile}", "--no-first-run",
                "--no-default-browser-check", "--disable-background-networking", "--disable-extensions",
                "--disable-sync", "--disable-component-update", "--metrics-recording-only", "--mute-audio",
                "--hide-scrollbars", "--window-size=1280,900", "about:blank"]
        self._process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, preexec_fn=plumb, pass_fds=(3, 4))
        os.close(to_browser_r)
        os.close(from_browser_w)
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(BrowserError, OSError):  # the browser may be gone already
            self.call("Browser.close")
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        for fd in (self._to_browser, self._from_browser):
            with contextlib.suppress(OSError):  # closed when the browser went away
                os.close(fd)
        shutil.rmtree(self._profile, ignore_errors=True)

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise BrowserError(f"no reply from {self.executable} within {self.timeout} s")
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise BrowserError(f"{self.executable} closed the DevTools pipe (exit {self._process.poll()})")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)

    def _dispatch(self, message: dict) -> None:
        page = self._pages.get(message.get("sessionId", ""))
        method, params = message.get("method", ""), message.get("params", {})
        if page is not None:
            if method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                page.errors.append("exception: " + (details.get("exception", {}).get("description")
                                                    or details.get("text", "")))
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                page.errors.append("console: " + " ".join(str(a.get("value", a.get("description", "")))
                                                          for a in params.get("args", [])))
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                page.errors.append("log: " + params["entry"].get("text", ""))
            elif method == "Network.requestWillBeSent":
                page.requests.append(params["request"]["url"])
        self._events.append(message)

    def call(self, method: str, params: dict | None = None, *, session: str | None = None) -> dict:
        """Send one DevTools command and wait for its reply (events meanwhile are recorded)."""
        self._id += 1
        message: dict = {"id": self._id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error'].get('message')}")
                return reply.get("result", {})
            self._dispatch(reply)

    def _wait_for(self, method: str, session: str) -> None:
        deadline = time.monotonic() + self.timeout
        while True:
            for n, event in enumerate(self._events):
                if event.get("method") == method and event.get("sessionId") == session:
                    del self._events[n]
                    return
            self._dispatch(self._read(deadline))

    def open(self, path: Path | str) -> Page:
        """Load a local file (or a URL) in a new page and wait for its load event."""
        url = Path(path).resolve().as_uri() if not str(path).startswith(("file:", "http:", "https:", "data:")) \
            else str(path)
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session)
        self._pages[session] = page
        for domain in ("Runtime", "Log", "Page", "Network"):
            page.call(f"{domain}.enable")
        self._events.clear()
        page.call("Page.navigate", {"url": url})
        self._wait_for("Page.loadEventFired", session)
        return page
