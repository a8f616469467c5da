"""GSM-style items CI can make itself: reasoning-gym's GSM-Symbolic generators (Apache-2.0; GSM8K questions with
their numbers turned into variables), written as a GSM8K-format JSONL file (``question``, ``answer`` ending in
``#### N``) that the accuracy pipeline reads like the user's own copy.

reasoning-gym is pinned (:data:`PIN`) and installed without its dependencies (``pip install --no-deps
reasoning-gym==0.1.25``: its package ``__init__`` imports every sub-gym, which needs eleven packages; the two
generator files need only the standard library and its ``utils.py``).  They are loaded here by path, without
running that ``__init__``.  Templates are the ones reasoning-gym marks ``tasks_ok``, sampled **without**
replacement (its own dataset class samples with replacement: 43 distinct templates in 64 items), one item per
template, each drawn by ``Random(seed * 1000 + template)``: the same file for the same seed, on any machine.

    python -m pytest_sskj.accuracy.generate --out gsm-symbolic.jsonl [--questions 64] [--seed 1]
"""

from __future__ import annotations

import argparse
import ast
import importlib.metadata
import importlib.util
import json
import random
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pytest_sskj.accuracy.extract import normalise, reference_answer

PIN = "0.1.25"
INSTALL = f"pip install --no-deps reasoning-gym=={PIN}"
_GEN_DIR = ("arithmetic", "gsm_symbolic")
_FILES = ("generators_00_49.py", "generators_50_99.py")

Generator = Callable[[random.Random, float], dict[str, Any]]


class GeneratorMissing(RuntimeError):
    """reasoning-gym is absent or not the pinned version; the message says how to install it."""


def _root() -> Path:
    try:
        dist = importlib.metadata.distribution("reasoning-gym")
    except importlib.metadata.PackageNotFoundError:
        raise GeneratorMissing(f"reasoning-gym is not installed; run `{INSTALL}`") from None
    if dist.version != PIN:
        raise GeneratorMissing(f"reasoning-gym {dist.version} is installed, the items are pinned to {PIN}: `{INSTALL}`")
    root = Path(str(dist.locate_file("reasoning_gym")))
    if not (root / "utils.py").is_file():
        raise GeneratorMissing(f"reasoning-gym {PIN} has no reasoning_gym/utils.py at {root}; reinstall: `{INSTALL}`")
    return root


@contextmanager
def _bare_package(root: Path) -> Iterator[None]:
    """``reasoning_gym`` as an empty package over its folder while the generator files load (their only import is
    ``reasoning_gym.utils``); ``sys.modules`` is put back as it was afterwards."""
    names = ("reasoning_gym", "reasoning_gym.utils")
    saved = {n: sys.modules.get(n) for n in names}
    pkg = types.ModuleType("reasoning_gym")
    pkg.__path__ = [str(root)]
    sys.modules["reasoning_gym"] = pkg
    sys.modules.pop("reasoning_gym.utils", None)
    try:
        yield
    finally:
        for n, mod in saved.items():
            if mod is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = mod


def generators() -> dict[int, Generator]:
    """Template number -> generator, for the templates reasoning-gym marks ``tasks_ok``."""
    root = _root()
    gen_dir = root.joinpath(*_GEN_DIR)
    listing = (gen_dir / "gsm_symbolic.py").read_text()
    ok = next(
        ast.literal_eval(node.value)
        for node in ast.parse(listing).body
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "tasks_ok" for t in node.targets)
    )
    found: dict[int, Generator] = {}
    with _bare_package(root):
        for name in _FILES:
            spec = importlib.util.spec_from_file_location(f"_sskj_gsm_symbolic_{name[:-3]}", gen_dir / name)
            assert spec is not None and spec.loader is not None
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            for attr, fn in vars(mod).items():
                if attr.startswith("generate_") and attr[9:].isdigit() and int(attr[9:]) in ok:
                    found[int(attr[9:])] = fn
    return found


def _final_line(template: int, cot: str, answer: str) -> str:
    """The rationale with its ``#### `` line written as the item's answer (a few templates write ``#### 133.0`` for
    the answer ``133``: under GSM8K's string match a model's ``133`` would then be wrong).  A rationale whose number
    differs from the answer is refused."""
    head, sep, last = cot.rpartition("#### ")
    ref = reference_answer(cot)
    if not sep or ref is None or float(ref) != float(normalise(answer)):
        raise RuntimeError(f"template {template}: the rationale's '#### {last[:20]}' is not the answer {answer}")
    return f"{head}#### {answer}"


def items(questions: int, seed: int) -> list[dict[str, str]]:
    """``questions`` GSM8K-format records from as many distinct templates (at most the number of ``tasks_ok``)."""
    gens = generators()
    if not 0 < questions <= len(gens):
        raise ValueError(f"{questions} question(s) asked; accepted: 1 to {len(gens)} (one per distinct template)")
    out = []
    for template in random.Random(seed).sample(sorted(gens), questions):
        ex = gens[template](random.Random(seed * 1000 + template), 1.0)
        cot = _final_line(template, str(ex["metadata"]["answer_cot"]), str(ex["answer"]))
        source = f"reasoning-gym {PIN} gsm_symbolic {template}"
        out.append({"question": str(ex["question"]), "answer": cot, "source": source})
    return out


def write(records: list[dict[str, str]], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pytest_sskj.accuracy.generate", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="the JSONL file to write")
    ap.add_argument("--questions", type=int, default=64, help="how many items, one per template (default 64)")
    ap.add_argument("--seed", type=int, default=1, help="the draw (default 1): the same seed gives the same file")
    args = ap.parse_args(argv)
    try:
        records = items(args.questions, args.seed)
    except (GeneratorMissing, ValueError) as e:
        sys.stderr.write(f"error: {e}\n")
        return 2
    write(records, args.out)
    sys.stdout.write(f"{len(records)} GSM-style items (reasoning-gym {PIN}, seed {args.seed}) -> {args.out}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
