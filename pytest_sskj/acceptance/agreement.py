"""Output agreement: a candidate backend that changes what the model says must not pass the A/B.

Method (version :data:`METHOD_VERSION`).  Every side of a comparison answers one fixed set of greedy
probe requests (:func:`probe_set`: ``--sskj-agreement-prompts`` prompts of 8-128 seeded random token ids,
temperature 0, ``ignore_eos``, the point's OSL -- 16 when it is 1, at most 64 -- the same prompts for
baseline and candidate).  The *exact* generated token ids come from the engine itself through a request
*dialect* (:data:`DIALECTS`: llama.cpp's native ``/completion`` with ``return_tokens``, OpenAI
``/v1/completions`` with ``return_token_ids``, SGLang ``/generate`` ``output_ids``), never from re-tokenized
text.  The probes run inside the serving points while the server is up (no extra launch): repeat 1 of
every side at the point's concurrency (role ``ab``), and the baseline's repeat 2 one request at a time
(role ``aa``, the A/A control: another server run where repeats are interleaved, the same server
otherwise, and a different batch size -- the engine's own nondeterminism, batch-size-dependent numerics
included).

Per prompt the two sides' sequences give: whether the first token agrees, the length of the matching
prefix, and whether the sequences are identical.  Over the prompt set: ``first_token_agreement_frac``,
``identical_seq_frac``, ``mean_prefix_match_tokens`` and ``mean_prefix_match_frac`` (prefix / OSL).
Gates (``--sskj-agreement-min``, e.g. ``first_token_agreement_frac>=0.95`` for an MXFP4-vs-Marlin change,
``identical_seq_frac>=1`` for one that must be bit-identical) are judged on the fixed probe set.  A gate
the A/B misses is ``output-mismatch`` (naming the prompts that diverged and at which token) -- unless
the baseline's own A/A misses it too: then the candidate's difference cannot be told from the engine's
nondeterminism and the verdict is ``inconclusive`` (also a failure: agreement was not shown).  The probe
time is reported as a fraction of the comparison's wall time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_sskj.acceptance.agreement_dialects import (
    DIALECTS,
    METHOD_VERSION,
    Dialect,
    Probe,
    ProbeSet,
    dialect,
    load_probe,
    probe_osl,
    probe_set,
    run_probe,
    save_probe,
)
from pytest_sskj.accuracy.score import wilson

if TYPE_CHECKING:
    from pytest_sskj.registry import Registry

__all__ = [
    "DIALECTS",
    "GATE_METRICS",
    "METHOD_VERSION",
    "Agreement",
    "AgreementGate",
    "AgreementVerdict",
    "Dialect",
    "Divergence",
    "Probe",
    "ProbeSet",
    "agreement",
    "agreement_table",
    "dialect",
    "judge",
    "judge_dirs",
    "load_probe",
    "parse_gates",
    "probe_osl",
    "probe_repeat",
    "probe_roles",
    "probe_set",
    "run_probe",
    "run_roles",
    "save_probe",
    "wilson",
]

GATE_METRICS = ("first_token_agreement_frac", "identical_seq_frac", "mean_prefix_match_frac")
"""Figures a gate can bound from below (fractions in [0, 1])."""

_SHOWN_DIVERGENCES = 5


# -- which points probe ------------------------------------------------------------------------------------
def probe_roles(*, repeat: int, repeats: int, is_baseline: bool, concurrency: int) -> list[tuple[str, int]]:
    """Which probes a serving point runs: ``[(role, concurrency)]``.

    Repeat 1 of every side: ``ab`` at the point's concurrency.  The baseline's repeat 2 (repeat 1 right
    after ``ab`` when there is one repeat): ``aa`` one request at a time, the A/A control.
    """
    roles: list[tuple[str, int]] = []
    if repeat == 1:
        roles.append(("ab", concurrency))
    if is_baseline and (repeat == 2 or (repeat == 1 and repeats == 1)):
        roles.append(("aa", 1))
    return roles


# -- the figures -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Divergence:
    """Where one prompt's two sequences part: the first differing token position and the two ids there."""

    prompt: int
    token: int
    baseline: int | None
    candidate: int | None

    def describe(self) -> str:
        return f"prompt {self.prompt} at token {self.token} ({self.baseline} vs {self.candidate})"


@dataclass(frozen=True)
class Agreement:
    """Agreement of two probes over the prompts both answered."""

    n: int
    compared: int
    osl: int
    first_token_agreement_frac: float | None
    identical_seq_frac: float | None
    mean_prefix_match_tokens: float | None
    mean_prefix_match_frac: float | None
    divergences: tuple[Divergence, ...] = ()
    missing: tuple[int, ...] = ()
    """Prompts one side did not answer (left out of the figures)."""

    def value(self, metric: str) -> float | None:
        v = getattr(self, metric)
        return float(v) if isinstance(v, (int, float)) else None

    def counts(self) -> tuple[int, int]:
        """(prompts whose first token agrees, identical sequences)."""
        first_bad = sum(1 for d in self.divergences if d.token == 0)
        return self.compared - first_bad, self.compared - len(self.divergences)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["divergences"] = [asdict(x) for x in self.divergences]
        return d


def _prefix(a: Sequence[int], b: Sequence[int]) -> int:
    k = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        k += 1
    return k


def agreement(base: Probe, cand: Probe) -> Agreement:
    """First-token agreement, identical sequences and matching prefix of ``cand`` against ``base``."""
    n = min(base.n, cand.n)
    pairs = [(i, base.tokens[i], cand.tokens[i]) for i in range(n)]
    both = [(i, a, b) for i, a, b in pairs if a is not None and b is not None]
    missing = tuple(i for i, a, b in pairs if a is None or b is None)
    osl = max(base.osl, cand.osl)
    if not both:
        return Agreement(n, 0, osl, None, None, None, None, (), missing)
    divs: list[Divergence] = []
    prefixes: list[int] = []
    for i, a, b in both:
        k = _prefix(a, b)
        prefixes.append(k)
        if a != b:
            divs.append(Divergence(i, k, a[k] if k < len(a) else None, b[k] if k < len(b) else None))
    m = len(both)
    first = sum(1 for _, a, b in both if a[:1] == b[:1] and (a or b)) / m
    mean_prefix = sum(prefixes) / m
    return Agreement(
        n,
        m,
        osl,
        round(first, 6),
        round((m - len(divs)) / m, 6),
        round(mean_prefix, 4),
        round(mean_prefix / osl, 6) if osl else None,
        tuple(divs),
        missing,
    )


# -- gates -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AgreementGate:
    """``metric >= threshold`` on the probe set."""

    metric: str
    threshold: float

    def __str__(self) -> str:
        return f"{self.metric}>={self.threshold:g}"

    def holds(self, a: Agreement) -> bool | None:
        v = a.value(self.metric)
        return None if v is None else v >= self.threshold - 1e-12


def parse_gates(text: Any) -> tuple[AgreementGate, ...]:
    """``'first_token_agreement_frac>=0.95,identical_seq_frac>=1'``, a bare fraction (first-token
    agreement) or ``none``; ``ValueError`` saying what is wrong otherwise."""
    raw = str(text).strip()
    if raw.lower() in ("none", "off", ""):
        return ()
    gates: list[AgreementGate] = []
    for part in raw.split(","):
        item = part.strip()
        if not item:
            raise ValueError(f"{raw!r} has an empty gate (a stray comma?)")
        metric, sep, value = item.partition(">=")
        if not sep:
            metric, value = "first_token_agreement_frac", item
        metric = metric.strip()
        if metric not in GATE_METRICS:
            raise ValueError(f"{metric!r} is not an agreement figure (known: {', '.join(GATE_METRICS)})")
        try:
            threshold = float(value.strip())
        except ValueError:
            raise ValueError(f"{item!r}: {value.strip()!r} is not a number") from None
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"{item!r}: the threshold is a fraction in [0, 1], not {threshold:g}")
        gates.append(AgreementGate(metric, threshold))
    return tuple(gates)


# -- the verdict -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AgreementVerdict:
    """The output-agreement part of a comparison verdict."""

    outcome: str
    """``agree``, ``output-mismatch``, ``inconclusive``, ``recorded`` (no gates) or ``not-measured``."""
    message: str
    ab: Agreement | None = None
    aa: Agreement | None = None
    gates: tuple[AgreementGate, ...] = ()
    failed_gates: tuple[str, ...] = ()
    aa_what: str = ""
    probe_s: float | None = None
    comparison_s: float | None = None
    dialect: str = ""

    @property
    def passed(self) -> bool | None:
        """True/False when gates were judged (or could not be), ``None`` when only recorded."""
        if self.outcome == "agree":
            return True
        if self.outcome == "recorded" or (self.outcome == "not-measured" and not self.gates):
            return None
        return False

    @property
    def overhead_frac(self) -> float | None:
        if self.probe_s is None or not self.comparison_s:
            return None
        return self.probe_s / self.comparison_s

    def as_dict(self) -> dict[str, Any]:
        return {
            "method": METHOD_VERSION,
            "outcome": self.outcome,
            "passed": self.passed,
            "message": self.message,
            "dialect": self.dialect,
            "gates": [str(g) for g in self.gates],
            "failed_gates": list(self.failed_gates),
            "ab": self.ab.as_dict() if self.ab else None,
            "aa": self.aa.as_dict() if self.aa else None,
            "aa_what": self.aa_what,
            "probe_s": self.probe_s,
            "comparison_s": self.comparison_s,
            "overhead_frac": None if self.overhead_frac is None else round(self.overhead_frac, 4),
        }


def _figures(a: Agreement) -> str:
    first, ident = a.counts()
    ci = wilson(first, a.compared)
    ci_txt = f", 95 % CI {ci[0]:.2f}-{ci[1]:.2f}" if ci else ""
    out = (
        f"first token {first}/{a.compared} ({a.first_token_agreement_frac:.3f}{ci_txt}), "
        f"identical {ident}/{a.compared} ({a.identical_seq_frac:.3f}), "
        f"matching prefix {a.mean_prefix_match_tokens:.1f}/{a.osl} tokens"
    )
    if a.missing:
        out += f"; {len(a.missing)} prompt(s) unanswered on a side, left out: {list(a.missing)[:8]}"
    return out


def _divergences(a: Agreement) -> str:
    shown = "; ".join(d.describe() for d in a.divergences[:_SHOWN_DIVERGENCES])
    more = f" (+{len(a.divergences) - _SHOWN_DIVERGENCES} more)" if len(a.divergences) > _SHOWN_DIVERGENCES else ""
    return f"diverged: {shown}{more}" if shown else "no prompt diverged"


def _aa_sentence(aa: Agreement | None, what: str) -> str:
    if aa is None or not aa.compared:
        return f"no A/A control ({what})" if what else "no A/A control"
    if not aa.divergences:
        return f"A/A control ({what}): identical {aa.compared}/{aa.compared}, the engine is deterministic here"
    return (
        f"A/A control ({what}): {_figures(aa)} -- the engine's own nondeterminism (batch size or run to run); "
        f"{_divergences(aa)}"
    )


def _cost(probe_s: float | None, comparison_s: float | None) -> str:
    if probe_s is None or not comparison_s:
        return ""
    return f"; probes {probe_s:.2f} s = {100 * probe_s / comparison_s:.1f} % of the comparison's {comparison_s:.1f} s"


def judge(
    ab: Agreement | None,
    aa: Agreement | None,
    gates: Sequence[AgreementGate],
    *,
    baseline: str,
    candidate: str,
    why_missing: str = "",
    aa_what: str = "",
    probe_s: float | None = None,
    comparison_s: float | None = None,
    dialect_name: str = "",
) -> AgreementVerdict:
    """Judge the A/B agreement ``ab`` against ``gates`` with the baseline's A/A control ``aa``."""
    from pytest_sskj.report.categories import OUTPUT_MISMATCH

    gates = tuple(gates)

    def make(outcome: str, message: str, failed: tuple[str, ...] = ()) -> AgreementVerdict:
        return AgreementVerdict(outcome, message, ab, aa, gates, failed, aa_what, probe_s, comparison_s, dialect_name)

    subject = f"output agreement of {candidate} with {baseline}"
    if ab is None or not ab.compared:
        why = why_missing or ("no prompt was answered by both sides" if ab is not None else "no probes")
        return make("not-measured", f"{subject} not measured: {why}")
    head = f"{subject} on {ab.compared} greedy prompts x {ab.osl} tokens: {_figures(ab)}"
    tail = f"; {_aa_sentence(aa, aa_what)}{_cost(probe_s, comparison_s)}"
    if not gates:
        body = f"{head} (recorded, no gate: set --sskj-agreement-min)"
        if ab.divergences:
            body += f"; {_divergences(ab)}"
        return make("recorded", body + tail)
    failed = tuple(f"{g.metric} {_frac(ab.value(g.metric))} < {g.threshold:g}" for g in gates if not g.holds(ab))
    if not failed:
        return make("agree", f"{head} meets {', '.join(map(str, gates))}{tail}")
    aa_fails = aa is not None and aa.compared > 0 and any(not g.holds(aa) for g in gates if not g.holds(ab))
    if aa_fails:
        msg = (
            f"{OUTPUT_MISMATCH} inconclusive: {head} misses {'; '.join(failed)}, but the baseline misses it "
            f"against itself too, so the difference cannot be told from the engine's own nondeterminism"
            f"; {_divergences(ab)}{tail}"
        )
        return make("inconclusive", msg, failed)
    msg = f"{OUTPUT_MISMATCH} {head} misses {'; '.join(failed)}; {_divergences(ab)}{tail}"
    return make("output-mismatch", msg, failed)


# -- glue for the acceptance flow ----------------------------------------------------------------------------
def probe_repeat(role: str, repeats: int) -> int:
    """The repeat whose point runs the probe of ``role`` (see :func:`probe_roles`)."""
    return 2 if role == "aa" and repeats >= 2 else 1


def run_roles(
    url: str,
    dialect_name: str,
    probes: ProbeSet,
    roles: Sequence[tuple[str, int]],
    out_dir: Path,
    *,
    model: str | None = None,
    point_id: str = "",
) -> list[Probe]:
    """Run and store (``agreement-<role>.json`` in ``out_dir``) the probe of every role, in order."""
    done = []
    for role, conc in roles:
        p = run_probe(url, dialect_name, probes, concurrency=conc, role=role, model=model, point_id=point_id)
        save_probe(out_dir, p)
        done.append(p)
    return done


def judge_dirs(
    base_ab: Path,
    cand_ab: Path,
    base_aa: Path | None,
    gates: Sequence[AgreementGate],
    *,
    baseline: str,
    candidate: str,
    aa_what: str,
    measured_s: float,
    roles: tuple[str, str, str] = ("ab", "ab", "aa"),
) -> AgreementVerdict:
    """Load the stored probes of a comparison and judge them; ``measured_s``: the sides' points' wall time;
    ``roles``: the probes compared (baseline, candidate) and the baseline's control probe (default: both sides at
    the point's concurrency, the control one request at a time)."""
    b, c = load_probe(base_ab, roles[0]), load_probe(cand_ab, roles[1])
    aa_probe = load_probe(base_aa, roles[2]) if base_aa is not None else None
    missing = [
        f"{d.name}/agreement-{r}.json" for d, p, r in ((base_ab, b, roles[0]), (cand_ab, c, roles[1])) if p is None
    ]
    errors = [f"{p.point_id}: {e}" for p in (b, c) if p is not None for e in p.errors if e][:3]
    why = "; ".join([*(f"probe {m} missing" for m in missing), *errors])
    ab = agreement(b, c) if b is not None and c is not None else None
    aa = agreement(b, aa_probe) if b is not None and aa_probe is not None else None
    probe_s = sum(p.wall_s for p in (b, c, aa_probe) if p is not None)
    return judge(
        ab,
        aa,
        gates,
        baseline=baseline,
        candidate=candidate,
        why_missing=why,
        aa_what=aa_what if aa is not None else "baseline probe of the A/A repeat missing",
        probe_s=probe_s,
        comparison_s=measured_s + probe_s,
        dialect_name=next((p.dialect for p in (b, c) if p is not None), ""),
    )


def _frac(v: Any) -> str:
    return "n/a" if not isinstance(v, (int, float)) else f"{v:.3f}"


def agreement_table(verdicts: Sequence[Mapping[str, Any]]) -> list[str]:
    """Markdown-style lines: one row per comparison verdict that carries an ``agreement`` part."""
    rows = []
    for v in verdicts:
        a = v.get("agreement")
        if v.get("kind") != "comparison" or not isinstance(a, Mapping):
            continue
        ab = a.get("ab") if isinstance(a.get("ab"), Mapping) else {}
        aa = a.get("aa") if isinstance(a.get("aa"), Mapping) else {}
        assert isinstance(ab, Mapping) and isinstance(aa, Mapping)
        over = a.get("overhead_frac")
        rows.append(
            [
                f"{v.get('candidate')} vs {v.get('baseline')}",
                str(v.get("chunk")),
                str(v.get("concurrency")),
                _frac(ab.get("first_token_agreement_frac")),
                _frac(ab.get("identical_seq_frac")),
                "n/a" if ab.get("mean_prefix_match_tokens") is None else f"{ab['mean_prefix_match_tokens']:.1f}",
                _frac(aa.get("identical_seq_frac")),
                "n/a" if not isinstance(over, (int, float)) else f"{100 * over:.1f} %",
                str(a.get("outcome")),
            ]
        )
    if not rows:
        return []
    head = [
        "Comparison",
        "Chunk",
        "C",
        "First token",
        "Identical",
        "Prefix (tokens)",
        "A/A identical",
        "Cost",
        "Outcome",
    ]
    return [
        "| " + " | ".join(head) + " |",
        "|" + "|".join("---" for _ in head) + "|",
        *("| " + " | ".join(r) + " |" for r in rows),
    ]


def _parse_agreement_option(text: str) -> tuple[AgreementGate, ...]:
    """``--sskj-agreement-min``: the gate grammar's checks (:func:`pytest_sskj.slo.check_agreement_text`), then
    the gates."""
    from pytest_sskj.slo import check_agreement_text

    check_agreement_text(text)
    return parse_gates(text)


def register(registry: Registry) -> None:
    """Fill the option registry (:mod:`pytest_sskj.registry`) with what this module owns:
    the ``agreement`` value kind's parser."""
    registry.add_parser("agreement", _parse_agreement_option)
