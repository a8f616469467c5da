"""A thin adapter over ``allure`` for pytest-sskj: every helper is a no-op unless allure-pytest is active.

allure-pytest is active when pytest runs with ``--alluredir`` (its listener is then registered with
``allure_commons.plugin_manager``).  Without it, or without allure installed, nothing is imported and
every call returns at once, so tests can call these helpers unconditionally.  Everything text-like
that reaches Allure (titles, parameter values, attachments) is redacted first
(:mod:`pytest_sskj.report.scrub`).  Metric values go in as *excluded* parameters so Allure's history id
(md5 of the full name and the non-excluded parameters) stays keyed on the configuration.
:func:`write_performance` puts the run's headline medians per configuration into ``--alluredir`` as an
Allure 3 performance file, so a report rendered with a history file trends them across runs.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pytest_sskj.report.scrub import scrub, scrub_text

__all__ = [
    "active",
    "attach_csv",
    "attach_file",
    "attach_files",
    "attach_json",
    "attach_text",
    "labels",
    "metric_parameters",
    "parameters",
    "step",
    "write_performance",
]

_SEVERITIES = ("blocker", "critical", "normal", "minor", "trivial")
_TEXT_SUFFIXES = {
    ".txt": "TEXT",
    ".log": "TEXT",
    ".json": "JSON",
    ".jsonl": "TEXT",
    ".csv": "CSV",
    ".tsv": "TSV",
    ".md": "TEXT",
    ".yaml": "YAML",
    ".yml": "YAML",
    ".toml": "TEXT",
    ".sh": "TEXT",
    ".html": "HTML",
    ".svg": "SVG",
    ".xml": "XML",
}
_BINARY_SUFFIXES = {".png": "PNG", ".jpg": "JPG", ".jpeg": "JPG", ".gif": "GIF", ".pdf": "PDF"}


def _allure() -> Any | None:
    """The ``allure`` module when allure-pytest is listening in this process, else ``None``."""
    if "allure_commons" not in sys.modules:  # allure-pytest not loaded: do not import anything
        return None
    try:
        import allure
        import allure_commons
    except ImportError:
        return None
    if not allure_commons.plugin_manager.hook.attach_data.get_hookimpls():
        return None
    return allure


def _session_secrets() -> tuple[str, ...]:
    """Secret values of the running session (``--sskj-env`` values, the SSH identity), found through the
    allure-pytest listener's ``config`` -> the reporter in ``config.stash``; empty outside a session."""
    import allure_commons

    from pytest_sskj.stash import EXTRA_KEY

    for plugin in allure_commons.plugin_manager.get_plugins():
        stash = getattr(getattr(plugin, "config", None), "stash", None)
        if stash is None:
            continue
        reporter = stash.get(EXTRA_KEY, {}).get("reporter")
        if reporter is not None:
            return tuple(reporter.secrets)
    return ()


def _clean(text: str) -> str:
    return scrub_text(text, _session_secrets())


def active() -> bool:
    """Whether allure-pytest records results in this process (pytest ran with ``--alluredir``)."""
    return _allure() is not None


def _fmt(value: Any) -> Any:
    """Numbers stay numbers (Allure quotes strings), floats to 6 significant digits, ``None`` is n/a."""
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return float(f"{value:.6g}")
    return _clean(str(value))


def labels(
    *,
    epic: str | None = None,
    feature: str | None = None,
    story: str | None = None,
    severity: str | None = None,
    **extra: str,
) -> None:
    """Set epic/feature/story/severity (``blocker|critical|normal|minor|trivial``) and extra labels."""
    if severity is not None and severity not in _SEVERITIES:
        raise ValueError(f"severity {severity!r} is not one of {', '.join(_SEVERITIES)}")
    a = _allure()
    if a is None:
        return
    if epic:
        a.dynamic.epic(_clean(epic))
    if feature:
        a.dynamic.feature(_clean(feature))
    if story:
        a.dynamic.story(_clean(story))
    if severity:
        a.dynamic.severity(a.severity_level(severity))
    for name, value in extra.items():
        a.dynamic.label(name, _clean(str(value)))


def parameters(**params: Any) -> None:
    """Configuration parameters (backend, chunk, C, repeat): they are part of Allure's history id."""
    a = _allure()
    if a is None:
        return
    for name, value in params.items():
        a.dynamic.parameter(name, _fmt(value))


def metric_parameters(**metrics: Any) -> None:
    """Measured values shown as parameters but ``excluded`` from the history id (``None`` shows n/a)."""
    a = _allure()
    if a is None:
        return
    for name, value in metrics.items():
        a.dynamic.parameter(name, _fmt(value), excluded=True)


@contextmanager
def step(title: str) -> Iterator[None]:
    """An Allure step around a phase (launch, health, warmup, bench, log scan); plain block otherwise."""
    a = _allure()
    if a is None:
        yield
        return
    with a.step(_clean(title)):
        yield


def attach_text(name: str, text: str) -> None:
    """Attach redacted plain text (a log excerpt, the launch command of a node)."""
    a = _allure()
    if a is None:
        return
    a.attach(_clean(text), name=_clean(name), attachment_type=a.attachment_type.TEXT)


def attach_json(name: str, obj: Any) -> None:
    """Attach ``obj`` as pretty JSON after deep redaction (metrics, bench results, verdicts)."""
    a = _allure()
    if a is None:
        return
    body = json.dumps(scrub(obj, _session_secrets()), indent=2, sort_keys=True, default=str)
    a.attach(body, name=_clean(name), attachment_type=a.attachment_type.JSON)


def _csv_text(rows: Sequence[Mapping[str, Any]] | Sequence[Sequence[Any]]) -> str:
    buf = io.StringIO()
    if rows and isinstance(rows[0], Mapping):
        dict_rows: list[Mapping[str, Any]] = [r for r in rows if isinstance(r, Mapping)]
        fields: list[str] = []
        for r in dict_rows:
            fields.extend(k for k in r if k not in fields)
        dw = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
        dw.writeheader()
        for r in dict_rows:
            dw.writerow({k: "" if r.get(k) is None else r.get(k) for k in fields})
    else:
        w = csv.writer(buf, lineterminator="\n")
        for row in rows:
            w.writerow(["" if v is None else v for v in row])
    return buf.getvalue()


def attach_csv(name: str, rows: Sequence[Mapping[str, Any]] | Sequence[Sequence[Any]]) -> None:
    """Attach rows (dicts: header from their keys; sequences: as given) as redacted CSV."""
    a = _allure()
    if a is None:
        return
    a.attach(_clean(_csv_text(rows)), name=_clean(name), attachment_type=a.attachment_type.CSV)


def attach_file(path: str | Path, name: str | None = None) -> None:
    """Attach a file: text files are read and redacted, images and PDFs attached as they are."""
    a = _allure()
    if a is None:
        return
    p = Path(path)
    title = _clean(name or p.name)
    suffix = p.suffix.lower()
    if suffix in _BINARY_SUFFIXES:
        a.attach.file(str(p), name=title, attachment_type=getattr(a.attachment_type, _BINARY_SUFFIXES[suffix]))
        return
    kind = getattr(a.attachment_type, _TEXT_SUFFIXES.get(suffix, "TEXT"))
    text = p.read_text(encoding="utf-8", errors="replace")
    a.attach(_clean(text), name=title, attachment_type=kind)


def attach_files(paths: Iterable[str | Path]) -> None:
    """Attach every existing file of ``paths`` (missing ones are skipped)."""
    for p in paths:
        if Path(p).is_file():
            attach_file(p)


_PERF = (("input_throughput", "input_throughput"), ("median_ttft_ms", "ttft_p50_ms"), ("p95_ttft_ms", "ttft_p95_ms"))
"""(vocabulary name, :class:`~pytest_sskj.report.summary.PointSummary` attribute) of the trended medians."""


def write_performance(
    alluredir: Path, rows: Sequence[Mapping[str, Any]], *, run_id: str, baseline: str | None, start: float, stop: float
) -> Path | None:
    """``<alluredir>/sskj-<run id>-perf.json``: per serving configuration (grouped by its id) the median over
    passed repeats of input TPS and TTFT P50/P95 (undefined medians are left out, never 0); ``None`` when
    no configuration has a median."""
    from pytest_sskj.report.summary import format_chunk, summarize_points
    from pytest_sskj.rundir import atomic_write_json
    from pytest_sskj.vocabulary import METRICS

    samples = []
    for p in summarize_points(rows, baseline):
        group = f"{p.backend} chunk {format_chunk(p.chunk)} C={p.concurrency}"
        for name, attr in _PERF:
            value = getattr(p, attr)
            if value is None:
                continue
            m = METRICS[name]
            title, unit, better = m.label, m.unit, m.direction
            samples.append(
                {
                    "id": f"{run_id}:{group}:{name}",
                    "key": f"{group} {title}",
                    "value": float(value),
                    "start": int(start * 1000),
                    "stop": int(stop * 1000),
                    "title": f"{title} ({group})",
                    "unit": unit,
                    "group": group,
                    "better": better,
                }
            )
    if not samples:
        return None
    return atomic_write_json(Path(alluredir) / f"sskj-{run_id}-perf.json", samples, indent=1)
