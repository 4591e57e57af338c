"""Load a page in real headless Chromium and report what a person would see and what the console said.

Speaks the DevTools protocol over `--remote-debugging-pipe` (JSON messages separated by NUL bytes on file
descriptors 3 and 4) with the standard library only: it collects console errors and warnings, uncaught
exceptions and failed resource loads (`Log.entryAdded`, which `--enable-logging` does not show), reads
the page's text, and writes a full-page screenshot.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
         "--remote-debugging-pipe"]


def binary() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@dataclass
class PageLoad:
    text: str
    title: str
    problems: list[str] = field(default_factory=list)  # console errors/warnings, exceptions, failed loads
    images: int = 0
    broken_images: int = 0


class _Pipe:
    def __init__(self, proc: subprocess.Popen, write_fd: int, read_fd: int):
        self.proc, self.w, self.r = proc, write_fd, read_fd
        self.next_id = 0
        self.buffer = b""
        self.events: list[dict] = []

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 30) -> dict:
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for m in self._read(deadline - time.monotonic()):
                if m.get("id") == self.next_id:
                    if "error" in m:
                        raise RuntimeError(f"{method}: {m['error']}")
                    return m.get("result", {})
                self.events.append(m)
        raise TimeoutError(f"no answer to {method} within {timeout} s")

    def wait_event(self, method: str, timeout: float = 30) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for i, m in enumerate(self.events):
                if m.get("method") == method:
                    return self.events.pop(i)
            self.events.extend(self._read(deadline - time.monotonic()))
        raise TimeoutError(f"no {method} within {timeout} s")

    def _read(self, timeout: float) -> list[dict]:
        import select

        ready, _, _ = select.select([self.r], [], [], max(timeout, 0))
        if not ready:
            return []
        chunk = os.read(self.r, 1 << 20)
        if not chunk:
            raise RuntimeError(f"chromium closed the pipe (exit code {self.proc.poll()})")
        self.buffer += chunk
        *messages, self.buffer = self.buffer.split(b"\0")
        return [json.loads(m) for m in messages if m]


def load(page: Path, screenshot: Path | None = None, width: int = 1280, timeout: float = 60) -> PageLoad:
    """Open `page` (a file) in headless Chromium; return its text and every problem the console reported."""
    exe = binary()
    if exe is None:
        raise RuntimeError("chromium is not installed (Debian: apt-get install chromium)")
    profile = tempfile.mkdtemp(prefix="aci-chromium-")
    to_chrome_r, to_chrome_w = os.pipe()
    from_chrome_r, from_chrome_w = os.pipe()

    def wire() -> None:  # in the child: chromium reads commands on fd 3 and writes answers on fd 4
        r, w = os.dup(to_chrome_r), os.dup(from_chrome_w)  # copies first: the originals may be 3 or 4
        os.dup2(r, 3)
        os.dup2(w, 4)

    proc = subprocess.Popen([exe, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},900"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=wire, pass_fds=(3, 4))
    os.close(to_chrome_r)
    os.close(from_chrome_w)
    pipe = _Pipe(proc, to_chrome_w, from_chrome_r)
    try:
        target = pipe.send("Target.createTarget", {"url": "about:blank"}, timeout=timeout)["targetId"]
        session = pipe.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            pipe.send(f"{domain}.enable", session=session)
        pipe.send("Page.navigate", {"url": page.resolve().as_uri()}, session=session)
        pipe.wait_event("Page.loadEventFired", timeout)

        def evaluate(expr: str):
            return pipe.send("Runtime.evaluate", {"expression": expr, "returnByValue": True},
                             session=session)["result"].get("value")

        result = PageLoad(text=evaluate("document.body.innerText"), title=evaluate("document.title"),
                          images=evaluate("document.images.length"),
                          broken_images=evaluate("[...document.images].filter(i => !(i.complete && "
                                                 "i.naturalWidth > 0)).length"))
        if screenshot is not None:
            height = evaluate("Math.ceil(document.documentElement.scrollHeight)")
            pipe.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height,
                                                             "deviceScaleFactor": 1, "mobile": False},
                      session=session)
            shot = pipe.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True},
                             session=session, timeout=timeout)
            screenshot.write_bytes(base64.b64decode(shot["data"]))
        pipe.events.extend(pipe._read(0.2))
        result.problems = _problems(pipe.events)
        return result
    finally:
        try:
            pipe.send("Browser.close", timeout=5)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        os.close(to_chrome_w)
        os.close(from_chrome_r)
        shutil.rmtree(profile, ignore_errors=True)


def _problems(events: list[dict]) -> list[str]:
    out = []
    for e in events:
        method, p = e.get("method"), e.get("params", {})
        if method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "warning", "assert"):
            out.append(f"console.{p['type']}: " + " ".join(str(a.get("value", a.get("description", "")))
                                                          for a in p.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            out.append(f"exception: {d.get('exception', {}).get('description') or d.get('text')}")
        elif method == "Log.entryAdded" and p.get("entry", {}).get("level") in ("error", "warning"):
            entry = p["entry"]
            out.append(f"log {entry['level']} ({entry.get('source')}): {entry.get('text')} {entry.get('url', '')}")
    return out
