"""The known-answer control set: a tiny model scores near 0 on real arithmetic, so the engine's own greedy answers
become the references -- the proof, on any CPU box, that extraction, scoring and the gate can fail.

:func:`known_answer_file` asks a reference server the questions once (greedy, text) and writes a GSM8K-format file
whose ``#### N`` is the number flexible extraction finds in that server's completion; questions where it finds none
are left out.  Asked again, the same model must score 100 %; a changed model must not: on CI's 64 generated
questions the f32 tiny model gave a number for 57, its q8_0 copy kept 49 of those answers and its mxfp4 copy 33
(48 tokens, C=4; ``unit/accuracy/test_accuracy_control.py``, docs/accuracy.md), so a quantization that answers worse
fails the gate.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

from pytest_sskj.accuracy.client import ask
from pytest_sskj.accuracy.extract import flexible, normalise
from pytest_sskj.accuracy.gsm8k import Item

_NUMBER = re.compile(r"-?[0-9][0-9.]*")


def known_answer_file(
    url: str,
    dialect_name: str,
    items: Sequence[Item],
    out: Path,
    *,
    max_tokens: int = 48,
    concurrency: int = 4,
) -> int:
    """Write the control set of ``items`` answered by the server at ``url`` to ``out``; return how many it kept."""
    answers = ask(url, dialect_name, items, concurrency=concurrency, max_tokens=max_tokens)
    if answers.errors:
        first = next(iter(answers.errors.items()))
        raise RuntimeError(
            f"the reference server failed {len(answers.errors)} question(s), e.g. #{first[0]}: {first[1]}"
        )
    lines = []
    for it in items:
        found = flexible(answers.completions[it.index])
        ref = normalise(found) if found is not None else ""
        if not _NUMBER.fullmatch(ref):
            continue
        record = {"question": it.question, "answer": f"the reference server's own answer\n#### {ref}"}
        lines.append(json.dumps({**record, "source": f"known-answer control of record {it.index}"}))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return len(lines)
