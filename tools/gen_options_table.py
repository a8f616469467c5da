"""Regenerate the options table of README.md from pytest_sskj.subsystems.OPTIONS (python tools/gen_options_table.py)."""

from __future__ import annotations

import re
from pathlib import Path

from pytest_sskj.schema import accepted
from pytest_sskj.subsystems import OPTIONS

README = Path(__file__).resolve().parents[1] / "README.md"


def table() -> str:
    rows = ["| Option | ini / env | Meaning | Accepted (the schema: kind, bounds, unit) |", "|---|---|---|---|"]
    for o in OPTIONS:
        flags = ", ".join(f"`{f}`" for f in o.flags)
        ok = accepted(o).replace("|", "/")
        rows.append(f"| {flags} | `{o.ini}` / `{o.env}` | {o.help.replace('|', '/')} | {ok} |")
    return "\n".join(rows) + "\n"


def main() -> None:
    text = README.read_text()
    new = re.sub(r"\| Option \| ini / env \| Meaning \|.*\n(\|.*\|\n)+", table(), text, count=1)
    README.write_text(new)


if __name__ == "__main__":
    main()
