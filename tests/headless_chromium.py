"""Load a page in headless Chromium over the DevTools protocol (a pipe) and collect its errors.

Errors are console messages of level error, uncaught exceptions, browser log entries of level
error (failed image loads among them) and images that did not decode.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
    "--remote-debugging-pipe",
]
IMAGE_CHECK = (
    "JSON.stringify(Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0))"
    ".map(i => i.getAttribute('src')))"
)


def find_chromium() -> str | None:
    """Path of Debian's ``chromium`` (or another Chromium build on PATH), if installed."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class _Pipe:
    def __init__(self, write_fd: int, read_fd: int, deadline: float) -> None:
        self.write = os.fdopen(write_fd, "wb", buffering=0)
        self.read = os.fdopen(read_fd, "rb", buffering=0)
        self.buffer = b""
        self.next_id = 0
        self.deadline = deadline
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self.next_id += 1
        message: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        self.write.write(json.dumps(message).encode() + b"\0")
        while True:
            reply = self.receive()
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def receive(self) -> dict:
        import select

        while b"\0" not in self.buffer:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("Chromium did not answer in time")
            ready, _, _ = select.select([self.read], [], [], left)
            if ready:
                chunk = self.read.read(65536)
                if not chunk:
                    raise RuntimeError("Chromium closed the DevTools pipe")
                self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def wait_for(self, method: str) -> dict:
        for event in self.events:
            if event.get("method") == method:
                return event
        while True:
            event = self.receive()
            self.events.append(event)
            if event.get("method") == method:
                return event


def _high_pipe() -> tuple[int, int]:
    """A pipe whose ends are numbered above 9, so redirecting them onto fds 3 and 4 is safe."""
    import fcntl

    ends = []
    for fd in os.pipe():
        ends.append(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10))
        os.close(fd)
    return ends[0], ends[1]


def _errors(events: list[dict[str, Any]]) -> list[str]:
    errors = []
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            args = " ".join(str(a.get("value", a.get("description", ""))) for a in params["args"])
            errors.append(f"console.{params['type']}: {args}")
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            text = details.get("exception", {}).get("description") or details.get("text")
            errors.append(f"exception: {text}")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            errors.append(f"log: {entry.get('text')} {entry.get('url', '')}".strip())
    return errors


def render(
    page: Path,
    timeout_s: float = 60.0,
    *,
    screenshot: Path | None = None,
    width: int = 1280,
    height: int = 900,
    full_page: bool = False,
    probe: str | None = None,
) -> tuple[list[str], str] | tuple[list[str], str, Any]:
    """Open ``page`` from the file system and return its errors and the rendered DOM's text.

    Parameters
    ----------
    page : Path
        An HTML file.
    timeout_s : float
        Give up (``TimeoutError``) after this long.
    screenshot : Path, optional
        Also write a PNG of the first screenful (``width`` × ``height`` CSS pixels), or of
        the whole page with ``full_page``.
    width, height : int
        The window.
    full_page : bool
        Screenshot the whole page, not only the first screenful.
    probe : str, optional
        A JavaScript expression evaluated after loading; its JSON value is returned third.

    Returns
    -------
    tuple
        The errors (empty for a clean page), ``document.body.innerText`` and, with ``probe``,
        its value.
    """
    binary = find_chromium()
    if binary is None:
        raise FileNotFoundError("chromium is not installed (apt-get install chromium)")
    to_chrome_r, to_chrome_w = _high_pipe()
    from_chrome_r, from_chrome_w = _high_pipe()
    with tempfile.TemporaryDirectory(prefix="prfmap-chromium-") as profile:
        # Chromium's DevTools pipe is fd 3 (commands in) and fd 4 (replies out).
        command = " ".join(shlex.quote(a) for a in [binary, *FLAGS, f"--user-data-dir={profile}"])
        proc = subprocess.Popen(
            ["bash", "-c", f"exec {command} about:blank 3<&{to_chrome_r} 4>&{from_chrome_w}"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(to_chrome_r, from_chrome_w),
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        pipe = _Pipe(to_chrome_w, from_chrome_r, time.monotonic() + timeout_s)
        try:
            target = pipe.send("Target.createTarget", {"url": "about:blank"})["targetId"]
            session = pipe.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            for domain in ("Runtime", "Log", "Page"):
                pipe.send(f"{domain}.enable", session=session)
            pipe.send(
                "Emulation.setDeviceMetricsOverride",
                {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
                session=session,
            )
            pipe.send("Page.navigate", {"url": page.resolve().as_uri()}, session=session)
            pipe.wait_for("Page.loadEventFired")
            broken = pipe.send(
                "Runtime.evaluate",
                {"expression": IMAGE_CHECK, "returnByValue": True},
                session=session,
            )["result"]["value"]
            text = pipe.send(
                "Runtime.evaluate",
                {"expression": "document.body.innerText", "returnByValue": True},
                session=session,
            )["result"]["value"]
            errors = _errors(pipe.events) + [f"image not rendered: {s}" for s in json.loads(broken)]
            probed = None
            if probe is not None:
                probed = pipe.send(
                    "Runtime.evaluate",
                    {"expression": f"JSON.stringify({probe})", "returnByValue": True},
                    session=session,
                )["result"].get("value")
                probed = json.loads(probed) if probed is not None else None
            if screenshot is not None:
                _screenshot(pipe, session, screenshot, full_page)
            pipe.send("Browser.close")
        finally:
            pipe.write.close()
            pipe.read.close()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    if probe is not None:
        return errors, text, probed
    return errors, text


def _screenshot(pipe: _Pipe, session: str, path: Path, full_page: bool) -> None:
    import base64

    params: dict[str, Any] = {"format": "png"}
    if full_page:
        size = pipe.send("Page.getLayoutMetrics", session=session)["cssContentSize"]
        params.update(
            captureBeyondViewport=True,
            clip={"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1},
        )
    data = pipe.send("Page.captureScreenshot", params, session=session)["data"]
    Path(path).write_bytes(base64.b64decode(data))
