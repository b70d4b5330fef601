#!/usr/bin/env bash
# Fuzzes eBQL's pre-pass, planner, split and codegen for a fixed time
# (crates/ebql-compiler/tests/it/fuzz.rs: arbitrary strings, token soups,
# random edits of valid queries). Prints the cases tried and every failure
# (panic, Internal error, unpositioned or badly rendered diagnostic) shrunk
# to a minimal input. Exit status 1 when anything failed.
#
#   bench/fuzz.sh [--seconds N] [--seed S]     (default 600 s, seed from the clock)
set -euo pipefail
seconds=600
seed=$(date +%s)
while [[ $# -gt 0 ]]; do
    case "$1" in
        --seconds) seconds="$2"; shift 2 ;;
        --seed) seed="$2"; shift 2 ;;
        *) echo "usage: $0 [--seconds N] [--seed S]" >&2; exit 2 ;;
    esac
done
cd "$(dirname "$0")/.."
# cargo on PATH and the shared build directory outside the checkout.
. scripts/env.sh
cargo test -q -p ebql-compiler --test it --no-run
EBQL_FUZZ_SECONDS="$seconds" EBQL_FUZZ_SEED="$seed" \
    cargo test -q -p ebql-compiler --test it fuzz:: -- --nocapture 2>&1 | grep -E '^(fuzz:|FAIL|     )'
exit "${PIPESTATUS[0]}"
