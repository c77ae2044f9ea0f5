#!/usr/bin/env bash
# Builds (if needed) and runs the three reference ns-3 runs of the two-flow
# cross-check, one JSON line each on stdout. Extra arguments are passed to
# every run (e.g. --stagger=0.3, --seed=2, --duration=35).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin="$("$here/build.sh" | tail -n 1)"
"$bin" --scenario=droptail --tcp=newreno "$@"
"$bin" --scenario=droptail --tcp=cubic "$@"
"$bin" --scenario=red --tcp=newreno "$@"
