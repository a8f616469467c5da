#!/usr/bin/env bash
# CI phase: the users' own jobs end to end on the stand-in SGLang cluster (docs/twin.md, unit/twin/test_twin_e2e.py):
# seed 000's 36-point MoE-backend A/B with its conclusions, the same job served a candidate-worse model (fails with
# `worse`) and an equal-backends model (never `better`), seed 004's PD run over the real sglang-router (rank 0 of
# each group resolved by the real sglang parser; every rank's log copy holds the rank's own output), a decode rank
# that logs a Traceback/CUDA OOM failing the PD job naming node and file, one rank's log copy over the SSH launcher,
# and the DSV4 layout matrix's recommendation per shape.
# Needs root (network-namespace sshd hosts), SSKJ_ROUTER_PYTHON and SSKJ_SGLANG_PYTHON (.ci/run exports both);
# SSKJ_REQUIRE_TWIN=1 makes every missing prerequisite a failure, never a skip.  Measured: see docs/twin.md.
set -uo pipefail
cd "$(dirname "$0")/.."
export SSKJ_REQUIRE_TWIN=1
export SSKJ_RUN_ID="${SSKJ_TWIN_RUN_ID:-ci-unit-twin}"
first="${SSKJ_NETNS_FIRST:-601}"
# Serial.  `-n 2 --dist loadgroup` works (each xdist worker gets its own eight hosts, unit/conftest.py; the jobs
# are in two xdist groups of about equal length) and halves the phase (897 s -> 479-530 s), but beside the slow
# phase on two cores it made the users' 3-repeat A/B inconclusive once in three runs (4K/C16: +17.2 % input TPS,
# 95 % CI -14.1 .. +59.9 %): docs/twin.md.  The trap also clears a second worker's hosts.
trap 'for f in '"$first"' '"$(( first + 60 ))"'; do tools/netns_hosts.sh down "/tmp/sskj-twin-hosts-$f" >/dev/null 2>&1 || true; done' EXIT
pytest unit/twin/ --run-slow -p no:cacheprovider --durations=0
