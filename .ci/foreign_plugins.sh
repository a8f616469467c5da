#!/usr/bin/env bash
# The README's install plus five third-party pytest plugins that a user's Python often ships beside it (the GPU
# test machine's has pytest-benchmark; issue 54), in a venv of their own: .venv-foreign sees the dev venv's packages
# through a .pth entry and adds only the plugins (pinned) and the project itself (editable, no dependencies), so it
# takes seconds, not a second install.  CI's main job and its `pytest unit/` run in it: both must pass beside them.
# Usage: .ci/foreign_plugins.sh [DEV_VENV [VENV]]  (defaults .venv-ci, .venv-foreign); prints the plugins installed.
set -euo pipefail
cd "$(dirname "$0")/.."
dev=${1:-.venv-ci}
venv=${2:-.venv-foreign}
PLUGINS=(pytest-benchmark==5.3.1 pytest-cov==7.1.0 pytest-randomly==5.1.0 pytest-rerunfailures==16.7 pytest-asyncio==1.5.0)
rm -rf "$venv"
python3 -m venv "$venv"
purelib() { "$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
purelib "$dev" > "$(purelib "$venv")/_dev_venv.pth"
"$venv/bin/python" -m pip install -q --disable-pip-version-check "${PLUGINS[@]}"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps -e .
# its own console script `pytest` (the README's commands as typed), the dev venv's pytest version
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --ignore-installed \
  "pytest==$("$dev/bin/python" -c 'import pytest; print(pytest.__version__)')"
"$venv/bin/python" -m pip list --disable-pip-version-check 2>/dev/null | grep -iE '^pytest-(benchmark|cov|randomly|rerunfailures|asyncio) '
