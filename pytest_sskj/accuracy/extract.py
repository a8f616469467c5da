"""The standard GSM8K answer extraction, as lm-eval 0.4.13's ``gsm8k`` task defines it (``gsm8k.yaml``, metadata
version 3.0; docs/accuracy.md):

- ``strict``: the first match of ``#### (\\-?[0-9\\.\\,]+)`` (the OpenAI reference's pattern too);
- ``flexible``: the **last** match of ``(-?[$0-9.,]{2,})|(-?[0-9]+)``, its first non-empty group;
- exact match: both the extracted answer and the reference pass through the same normalisation -- lm-eval's
  ``regexes_to_ignore`` (``,``, ``\\$``, ``(?s).*#### ``, ``\\.$``) and ``ignore_case`` -- and are compared as
  strings (``18.0`` is not ``18``, as in lm-eval); surrounding white space is dropped.

No match is ``None`` (lm-eval's ``[invalid]``): never correct.  The same extractor applies to every side of a
comparison, and the report names which one it was.
"""

from __future__ import annotations

import re
from collections.abc import Callable

STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
FLEXIBLE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
IGNORED = tuple(re.compile(p) for p in (r",", r"\$", r"(?s).*#### ", r"\.$"))
INVALID = "[invalid]"
"""How a completion with no extractable answer is shown (lm-eval's RegexFilter default)."""


def strict(text: str) -> str | None:
    """The number after the first ``#### `` of ``text``, as written."""
    m = STRICT.search(text)
    return m.group(1) if m else None


def flexible(text: str) -> str | None:
    """The last number-like run of ``text`` (two or more of ``-$0-9.,``, or an integer), as written."""
    last: str | None = None
    for m in FLEXIBLE.finditer(text):
        last = m.group(1) or m.group(2)
    return last


EXTRACTORS: dict[str, Callable[[str], str | None]] = {"strict": strict, "flexible": flexible}
"""Extraction methods by the name the option, the report and the manifest use."""


def normalise(answer: str) -> str:
    """lm-eval's ``exact_match`` normalisation of one side: the ignored patterns removed, lower case, stripped."""
    for rx in IGNORED:
        answer = rx.sub("", answer)
    return answer.lower().strip()


def reference_answer(rationale: str) -> str | None:
    """The reference of a GSM8K ``answer`` field: its ``#### N``, normalised; ``None`` when it has none."""
    found = strict(rationale)
    return normalise(found) if found is not None else None


def grade(completion: str, reference: str, method: str) -> tuple[str | None, bool]:
    """``(extracted, correct)`` of one completion against a normalised reference with ``method``."""
    extracted = EXTRACTORS[method](completion)
    if extracted is None:
        return None, False
    return extracted, normalise(extracted) == reference
