#!/usr/bin/env bash
# The real sglang (pinned in pyproject's [sglang-contract] extra) WITHOUT its GPU dependencies, in its own venv, for
# the contract suite (unit/contracts/).  Run it with the dev venv active (torch, numpy, pillow come from there
# through a .pth entry, so nothing heavy is installed twice).  Idempotent: the venv is rebuilt from scratch.
#   usage: .ci/install_sglang.sh [VENV_DIR]     (default .venv-sglang; then SSKJ_SGLANG_PYTHON=VENV_DIR/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
dest="${1:-.venv-sglang}"
python -c 'import torch, numpy' || { echo "install_sglang.sh: activate the dev venv (with torch) first" >&2; exit 2; }
dev_site=$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
base=$(python -c 'import sys; print(sys._base_executable)')
rm -rf "$dest"
"$base" -m venv "$dest"
site=$("$dest/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$dev_site" > "$site/zz_sskj_dev_venv.pth"   # after the venv's own packages: its pins win
mapfile -t reqs < <(python -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["sglang-contract"]))')
"$dest/bin/python" -m pip install -q --disable-pip-version-check --no-deps "${reqs[@]}"
# smoke: the harness imports sglang, its parser and choices (no command resolved)
echo '{"commands": []}' | "$dest/bin/python" pytest_sskj/twin/sglang_resolve.py | python -c \
  'import json, sys; d = json.load(sys.stdin); print("sglang", d["version"], "in", sys.argv[1], "-", len(d["options"]), "options")' "$dest"
