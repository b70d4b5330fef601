#!/usr/bin/env bash
# eBQL evaluation suite: the one entry point.
#
#   bench/run.sh            full suite (< 15 min): writes BENCHMARKS.md at the repo root
#   bench/run.sh --quick    smoke mode (~30 s): every variant once, short; exits non-zero
#                           only when a variant is broken or its totals are wrong
#
# Extra arguments go to bench/runner.py (--only, --variants, --rounds, --seconds, --output).
# Environment: EBQL (ebql CLI, default ~/.cache/ebql/target/release/ebql; the ebql
# variant is skipped if it is missing), EBQL_BENCH_CACHE (build/DB dir),
# BENCH_NO_SETUP=1 (skip bench/setup.sh).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(dirname "$HERE")"
export EBQL_BENCH_CACHE="${EBQL_BENCH_CACHE:-$HOME/.cache/ebql/bench}"
export EBQL_WORKLOAD="${EBQL_WORKLOAD:-$HOME/.cache/ebql/target-workload/release/ebql-workload}"

if [ "$(id -u)" -ne 0 ]; then
  echo "bench: run as root (BPF programs are loaded)" >&2
  exit 1
fi
if [ "${BENCH_NO_SETUP:-0}" != 1 ]; then
  "$HERE/setup.sh" >&2
fi

# The workload binary: only this small crate, in its own target dir.
(cd "$REPO" && CARGO_TARGET_DIR="$HOME/.cache/ebql/target-workload" cargo build --release -q -p ebql-workload) >&2

"$HERE/probes/build.sh" "$EBQL_BENCH_CACHE" >/dev/null
exec python3 "$HERE/runner.py" "$@"
