#!/usr/bin/env bash
# The real SGLang router (PyPI sglang-router, a compiled Rust router) in its own venv: the deployment tests launch
# it as a process.  Idempotent; prints the venv's python on the last line (.ci/run exports it as SSKJ_ROUTER_PYTHON).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-router
if ! "$venv/bin/python" -c "import sglang_router" >/dev/null 2>&1; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check sglang-router==0.3.2 >&2
fi
echo "$PWD/$venv/bin/python"
