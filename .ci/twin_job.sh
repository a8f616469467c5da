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
# two xdist workers, each with its own eight hosts (unit/conftest.py: worker N at FIRST + 60 * N), the jobs split in
# two groups of about equal length (xdist_group marks in unit/twin/test_twin_e2e.py): the jobs mostly wait on
# modelled time, so two side by side halve the phase (897 s -> see docs/twin.md) on two cores
trap 'for f in '"$first"' '"$(( first + 60 ))"'; do tools/netns_hosts.sh down "/tmp/sskj-twin-hosts-$f" >/dev/null 2>&1 || true; done' EXIT
pytest unit/twin/ --run-slow -p no:cacheprovider --durations=0 -n 2 --dist loadgroup
