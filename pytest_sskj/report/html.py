"""One self-contained HTML report from Allure results, and a headless-Chromium check that it renders.

:func:`render_html` runs Allure 3 from npm (``allure@3.18.0`` in a project-local ``node_modules``) with a
generated ``allurerc.mjs`` (awesome plugin, ``singleFile: true``), copies the single ``index.html`` to
the requested file and strips the Google Analytics tag that Allure 3.18 hard-codes.  :func:`check_html`
opens the file in headless Chromium over the DevTools protocol on a pipe (``--remote-debugging-pipe``;
no extra packages, no network: every host name resolves to nothing), asserts that the summary page and
every test page render, opens a test's attachments, expands its metrics JSON and its plot and checks
that the JSON text is shown and the PNG decoded, and saves a screenshot.  Subprocesses start in their
own session, log to files, and are killed as a process group on timeout.
"""

from __future__ import annotations

import base64
import json
import os
import re
import select
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_sskj.rundir import atomic_write_text

__all__ = [
    "HtmlCheckError",
    "HtmlCheckResult",
    "HtmlToolMissing",
    "check_html",
    "find_allure",
    "find_chromium",
    "render_html",
    "strip_analytics",
]

ALLURE_VERSION = "3.18.0"
ALLURE_INSTALL = f"npm install --no-audit --no-fund --prefix .ci/node allure@{ALLURE_VERSION}"
CHROMIUM_INSTALL = "apt-get update && apt-get install -y --no-install-recommends chromium"
_GA = re.compile(r'<script async src="https://www\.googletagmanager\.com/[^"]*"></script>\s*<script>.*?</script>', re.S)


class HtmlToolMissing(RuntimeError):
    """npm's allure or Chromium is not installed; the message says how to install it."""


class HtmlCheckError(AssertionError):
    """The rendered report does not show what it must; the message says what was expected and seen."""


def find_allure(start: Path | None = None, npm_prefix: Path | None = None) -> Path | None:
    """``<npm_prefix>/node_modules/.bin/allure`` when a prefix is given (``npm install --prefix DIR``), else
    ``$SSKJ_ALLURE``, else ``node_modules/.bin/allure`` in ``start``/cwd or its parents, else in the
    checkout (``node_modules/`` or CI's ``.ci/node/node_modules/``)."""
    if npm_prefix is not None:
        cand = Path(npm_prefix).resolve() / "node_modules" / ".bin" / "allure"
        return cand if cand.is_file() else None
    env = os.environ.get("SSKJ_ALLURE")
    if env:
        return Path(env) if Path(env).is_file() else None
    here = (start or Path.cwd()).resolve()
    checkout = Path(__file__).resolve().parents[2]
    dirs = [
        *(d / "node_modules" for d in (here, *here.parents)),
        checkout / "node_modules",
        checkout / ".ci" / "node" / "node_modules",
    ]
    for d in dirs:
        cand = d / ".bin" / "allure"
        if cand.is_file():
            return cand
    return None


def find_chromium() -> Path | None:
    """``$SSKJ_CHROMIUM``, else the first of chromium, chromium-browser, google-chrome on ``PATH``."""
    env = os.environ.get("SSKJ_CHROMIUM")
    if env:
        return Path(env) if Path(env).is_file() else None
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return Path(found)
    return None


def strip_analytics(html: str) -> tuple[str, int]:
    """Remove Allure 3's Google Analytics ``<script>`` pair; returns the text and how many were removed."""
    return _GA.subn("", html)


def _run(argv: Sequence[str], *, cwd: Path, log: Path, timeout_s: float) -> int:
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            list(argv), cwd=cwd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            raise
        finally:
            if proc.poll() is None:
                _kill_group(proc)


def _kill_group(proc: subprocess.Popen[Any]) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)


def _tail(path: Path, n: int = 3000) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-n:]
    except OSError:
        return ""


def render_html(
    alluredir: Path,
    out: Path,
    *,
    name: str = "pytest-sskj",
    allure: Path | None = None,
    timeout_s: float = 300.0,
    history: Path | None = None,
    defer_history: bool = False,
) -> Path:
    """Render ``alluredir`` into the single file ``out`` (no analytics tag); returns ``out``.

    ``history``: Allure 3's history file (JSON lines, one entry per rendered report): the report shows each
    test's earlier runs and the metrics trend from it, and this run is appended to it -- once: Allure renders
    against a copy, and :func:`commit_history` appends the new entry only when no entry of the same results is
    there yet.  ``defer_history``: leave the entry pending (:func:`pending_history`) until the caller commits it,
    e.g. after the Chromium check passed (a render whose check failed adds nothing)."""
    alluredir = Path(alluredir).resolve()
    if not any(alluredir.glob("*-result.json")):
        raise FileNotFoundError(f"{alluredir} holds no *-result.json; run pytest with --alluredir {alluredir} first")
    exe = allure or find_allure()
    if exe is None:
        raise HtmlToolMissing(
            f"Allure 3 is not installed; run `{ALLURE_INSTALL}` in the repository root "
            f"(or set SSKJ_ALLURE to its bin/allure)"
        )
    out = Path(out).resolve()
    with tempfile.TemporaryDirectory(prefix="sskj-allure-") as tmp:
        work = Path(tmp)
        report = work / "report"
        rc = work / "allurerc.mjs"
        options = {"singleFile": True, "reportLanguage": "en", "groupBy": ["epic", "feature", "story"]}
        cfg: dict[str, Any] = {"name": name, "output": str(report), "plugins": {"awesome": {"options": options}}}
        work_history = work / "history.jsonl"
        if history is not None:
            history = Path(history).resolve()
            history.parent.mkdir(parents=True, exist_ok=True)
            if history.is_file():
                shutil.copyfile(history, work_history)
            cfg.update(historyPath=str(work_history), appendHistory=True)
        rc.write_text("export default " + json.dumps(cfg, indent=2) + ";\n", encoding="utf-8")
        log = work / "allure.log"
        code = _run([str(exe), "generate", "--config", str(rc), str(alluredir)], cwd=work, log=log, timeout_s=timeout_s)
        index = report / "index.html"
        if code != 0 or not index.is_file():
            raise RuntimeError(f"`allure generate` exited {code} without {index}; its output:\n{_tail(log)}")
        html, _ = strip_analytics(index.read_text(encoding="utf-8"))
        atomic_write_text(out, html)
        ids = report / "test-results.json"
        if ids.is_file():
            shutil.copyfile(ids, out.with_name(out.stem + ".test-results.json"))
        if history is not None and work_history.is_file():
            before = len(history.read_text(encoding="utf-8").splitlines()) if history.is_file() else 0
            new = work_history.read_text(encoding="utf-8").splitlines()[before:]
            atomic_write_text(pending_history(out), "".join(line + "\n" for line in new))
            if not defer_history:
                commit_history(history, out)
    return out


def pending_history(out: Path) -> Path:
    """Where :func:`render_html` leaves the history entry of the report ``out`` until it is committed."""
    return Path(out).with_name(Path(out).name + ".history-pending.jsonl")


def _results_key(line: str) -> str | None:
    """What one history entry is a record of: its test results (ids and statuses), not when it was rendered."""
    try:
        entry = json.loads(line)
    except json.JSONDecodeError:
        return None
    results = entry.get("testResults") if isinstance(entry, dict) else None
    if not isinstance(results, dict):
        return None
    return json.dumps(
        sorted((k, str(v.get("id")), str(v.get("status"))) for k, v in results.items() if isinstance(v, dict))
    )


def commit_history(history: Path, out: Path) -> int:
    """Append the pending entry of ``out`` to ``history`` unless an entry of the same results is there
    already (rendering the same results again adds nothing); returns how many entries were appended."""
    pending = pending_history(out)
    if not pending.is_file():
        return 0
    lines = [line for line in pending.read_text(encoding="utf-8").splitlines() if line.strip()]
    pending.unlink()
    old = history.read_text(encoding="utf-8").splitlines() if history.is_file() else []
    seen = {k for k in (_results_key(line) for line in old) if k is not None}
    fresh = [line for line in lines if _results_key(line) is None or _results_key(line) not in seen]
    if fresh:
        atomic_write_text(history, "".join(line + "\n" for line in [*old, *fresh]))
    return len(fresh)


# -- headless Chromium over the DevTools protocol on a pipe --------------------------------------------
class _Cdp:
    """A minimal DevTools-protocol client over ``--remote-debugging-pipe`` (fd 3 in, fd 4 out)."""

    def __init__(self, proc: subprocess.Popen[bytes], to_chrome: int, from_chrome: int) -> None:
        self.proc, self.wfd, self.rfd = proc, to_chrome, from_chrome
        self.buf = b""
        self.next_id = 0
        self.session: str | None = None

    def send(
        self, method: str, params: dict[str, Any] | None = None, *, timeout_s: float = 30.0, browser: bool = False
    ) -> dict[str, Any]:
        self.next_id += 1
        msg: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if self.session and not browser:
            msg["sessionId"] = self.session
        os.write(self.wfd, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout_s
        while True:
            for reply in self._messages(deadline, method):
                if reply.get("id") == self.next_id:
                    if "error" in reply:
                        raise RuntimeError(f"Chromium DevTools {method} failed: {reply['error']}")
                    result: dict[str, Any] = reply.get("result", {})
                    return result

    def _messages(self, deadline: float, method: str) -> Iterator[dict[str, Any]]:
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"Chromium did not answer {method} in time")
            ready, _, _ = select.select([self.rfd], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(self.rfd, 1 << 20)
                if not chunk:
                    raise RuntimeError(f"Chromium closed the DevTools pipe (exit code {self.proc.poll()})")
                self.buf += chunk
        while b"\0" in self.buf:
            raw, self.buf = self.buf.split(b"\0", 1)
            yield json.loads(raw)

    def evaluate(self, expression: str) -> Any:
        res = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in res:
            raise RuntimeError(f"page script failed: {res['exceptionDetails'].get('text')}: {expression[:200]}")
        return res.get("result", {}).get("value")

    def wait_for(self, expression: str, what: str, timeout_s: float) -> Any:
        deadline = time.monotonic() + timeout_s
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                seen = re.sub(r"\s+", " ", str(self.evaluate("document.body ? document.body.innerText : ''") or ""))
                raise HtmlCheckError(
                    f"the report did not show {what} within {timeout_s:g} s; the page showed:\n{seen[:1500]}"
                )
            time.sleep(0.2)


def _high_fd(fd: int) -> int:
    """Move ``fd`` to a number >= 10 so that mapping the pipe to fds 3 and 4 cannot clobber either end."""
    import fcntl

    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return high


@contextmanager
def _chromium(exe: Path, log: Path, width: int, height: int) -> Iterator[_Cdp]:
    to_r, to_w = (_high_fd(fd) for fd in os.pipe())
    from_r, from_w = (_high_fd(fd) for fd in os.pipe())
    args = [
        str(exe),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--no-default-browser-check",
        "--remote-debugging-pipe",
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
        f"--window-size={width},{height}",
        f"--user-data-dir={log.parent / 'chromium-profile'}",
        "about:blank",
    ]
    # bash maps our pipe ends to fds 3 and 4, where Chromium expects them, then becomes Chromium
    bash = shutil.which("bash") or "/bin/bash"  # dash rejects fd numbers above 9
    argv = [bash, "-c", f'exec "$@" 3<&{to_r} 4>&{from_w}', "bash", *args]
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            argv,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            pass_fds=(to_r, from_w),
            start_new_session=True,
        )
    os.close(to_r)
    os.close(from_w)
    cdp = _Cdp(proc, to_w, from_r)
    try:
        try:
            targets = cdp.send("Target.getTargets", timeout_s=60)["targetInfos"]
        except (OSError, RuntimeError, TimeoutError) as exc:
            raise RuntimeError(
                f"headless Chromium ({exe}) did not start its DevTools pipe: {exc}; its log:\n{_tail(log)}"
            ) from None
        page = next((t for t in targets if t.get("type") == "page"), None)
        target_id = page["targetId"] if page else cdp.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        cdp.session = cdp.send("Target.attachToTarget", {"targetId": target_id, "flatten": True})["sessionId"]
        cdp.send("Page.enable")
        cdp.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        yield cdp
    finally:
        with suppress(Exception):
            cdp.send("Browser.close", timeout_s=5, browser=True)
        with suppress(OSError):
            os.close(to_w)
        with suppress(OSError):
            os.close(from_r)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            _kill_group(proc)


@dataclass
class HtmlCheckResult:
    """What the headless browser saw."""

    html: Path
    html_bytes: int
    tests: dict[str, str] = field(default_factory=dict)
    """Test result id -> name, for every test page that rendered its name."""
    test_checked: str = ""
    metric_attachment: str = ""
    metric_text_seen: str = ""
    plot_attachment: str = ""
    plot_size_px: tuple[int, int] = (0, 0)
    screenshot: Path | None = None
    screenshot_bytes: int = 0
    summary_text: str = ""
    history_test: str = ""
    """With ``history``: the test whose History tab was opened, and how many earlier runs it listed."""
    history_items: int = 0


def _attachments(step: dict[str, Any]) -> list[dict[str, Any]]:
    out = list(step.get("attachments") or [])
    for s in step.get("steps") or []:
        out.extend(_attachments(s))
    return out


def _pick_test(alluredir: Path) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """A test that has a JSON (metric) and a PNG (plot) attachment — one whose JSON is named ``metrics ...``
    first: (name, json attachment, png attachment)."""
    candidates: list[tuple[int, str, dict[str, Any], dict[str, Any]]] = []
    for path in sorted(alluredir.glob("*-result.json")):
        try:
            res = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        atts = _attachments(res)
        js = next((a for a in atts if a.get("type") == "application/json"), None)
        png = next((a for a in atts if a.get("type") == "image/png"), None)
        metrics = next(
            (a for a in atts if a.get("type") == "application/json" and str(a.get("name", "")).startswith("metrics")),
            None,
        )
        if (metrics or js) and png:
            candidates.append((0 if metrics else 1, str(res.get("name")), metrics or js, png))  # type: ignore[arg-type]
    if candidates:
        _, name, js_att, png_att = min(candidates, key=lambda c: (c[0], c[1]))
        return name, js_att, png_att
    raise HtmlCheckError(
        f"no test in {alluredir} has both a JSON (metrics) and a PNG (plot) attachment; "
        f"attach them with pytest_sskj.report.allure.attach_json / attach_file"
    )


def _js_str(text: str) -> str:
    return json.dumps(text)


def check_html(
    html: Path,
    alluredir: Path,
    *,
    screenshot: Path | None = None,
    chromium: Path | None = None,
    timeout_s: float = 60.0,
    width: int = 1400,
    height: int = 1000,
    history: bool = False,
) -> HtmlCheckResult:
    """Open ``html`` in headless Chromium and assert it shows every test of ``alluredir``, a metric
    attachment (its JSON text) and a plot (a decoded PNG); save a screenshot of that test's page.  With
    ``history``, also assert that test's History tab lists at least one earlier run."""
    exe = chromium or find_chromium()
    if exe is None:
        raise HtmlToolMissing(f"Chromium is not installed; run `{CHROMIUM_INSTALL}` (or set SSKJ_CHROMIUM)")
    html = Path(html).resolve()
    text = html.read_text(encoding="utf-8")
    if "googletagmanager" in text:
        raise HtmlCheckError(f"{html} still embeds the Google Analytics tag; render it with render_html()")
    ids_file = html.with_name(html.stem + ".test-results.json")
    if not ids_file.is_file():
        raise HtmlCheckError(f"{ids_file} is missing: render_html() writes it next to the report")
    by_id = {k: str(v.get("name")) for k, v in json.loads(ids_file.read_text(encoding="utf-8"))["byId"].items()}
    name, js_att, png_att = _pick_test(Path(alluredir))
    result = HtmlCheckResult(
        html=html,
        html_bytes=html.stat().st_size,
        metric_attachment=str(js_att.get("name")),
        plot_attachment=str(png_att.get("name")),
        test_checked=name,
    )
    try:
        metric_obj = json.loads((Path(alluredir) / str(js_att["source"])).read_text(encoding="utf-8"))
        probe = next(iter(metric_obj)) if isinstance(metric_obj, dict) and metric_obj else None
    except (OSError, json.JSONDecodeError, KeyError):
        probe = None
    with (
        tempfile.TemporaryDirectory(prefix="sskj-chromium-") as tmp,
        _chromium(exe, Path(tmp) / "chromium.log", width, height) as cdp,
    ):
        cdp.send("Page.navigate", {"url": html.as_uri()})
        total = len(by_id)
        result.summary_text = str(
            cdp.wait_for(
                f"(t => /Total\\s*{total}\\b/.test(t) && t)(document.body ? document.body.innerText : '')",
                f"the summary page with 'Total {total}'",
                timeout_s,
            )
        )[:2000]
        for tid, tname in by_id.items():
            cdp.evaluate(f"location.hash = {_js_str('#/' + tid)}")
            cdp.wait_for(
                f"document.body.innerText.includes({_js_str(tname)}) && "
                f'!!document.querySelector(\'[data-testid="test-result-attachment-header"], '
                f'[data-testid^="test-result"]\')',
                f"the page of test {tname!r} ({tid})",
                timeout_s,
            )
            result.tests[tid] = tname
        chosen = [tid for tid, n in by_id.items() if n == name]
        if not chosen:
            raise HtmlCheckError(
                f"test {name!r} of the Allure results is not in the report (seen: {sorted(by_id.values())})"
            )
        cdp.evaluate(f"location.hash = {_js_str('#/' + chosen[0] + '/attachments')}")
        for att in (result.metric_attachment, result.plot_attachment):
            cdp.wait_for(
                "(() => { const h = [...document.querySelectorAll('[data-testid=\"test-result-attachment-header\"]')]"
                f".find(e => e.innerText.includes({_js_str(att)})); if (!h) return false;"
                " (h.querySelector('button') || h).click(); return true; })()",
                f"the attachment {att!r} of {name!r}",
                timeout_s,
            )
        if probe is not None:
            cdp.wait_for(
                f"document.body.innerText.includes({_js_str(str(probe))})",
                f"the metric {probe!r} inside attachment {result.metric_attachment!r}",
                timeout_s,
            )
            result.metric_text_seen = str(probe)
        size = cdp.wait_for(
            "(() => { const i = [...document.images].find(i => i.complete && i.naturalWidth > 0);"
            " if (!i) return null; i.scrollIntoView(); return [i.naturalWidth, i.naturalHeight]; })()",
            f"the plot {result.plot_attachment!r} as a decoded image",
            timeout_s,
        )
        result.plot_size_px = (int(size[0]), int(size[1]))
        if history:
            cdp.evaluate(f"location.hash = {_js_str('#/' + chosen[0] + '/history')}")
            n = cdp.wait_for(
                "(n => n > 0 && n)(document.querySelectorAll('[data-testid=\"test-result-history-item\"]').length)",
                f"earlier runs in the History tab of {name!r} (render with --history after an earlier run)",
                timeout_s,
            )
            result.history_test, result.history_items = name, int(n)
        if screenshot is not None:
            time.sleep(0.3)
            shot = cdp.send("Page.captureScreenshot", {"format": "png"})
            screenshot = Path(screenshot)
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            screenshot.write_bytes(base64.b64decode(shot["data"]))
            result.screenshot, result.screenshot_bytes = screenshot, screenshot.stat().st_size
    return result
