#!/usr/bin/env bash
# The test suite: unit tests, kernel tests (real BPF programs on real
# tracepoints, filtered to our own workload processes) and the benchmark
# suite's smoke mode (every variant runs and agrees on exact totals).
# Run as root: kernel tests load BPF programs and refuse to skip.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
. scripts/env.sh
cargo test --workspace
cargo build -p ebql
EBQL="$CARGO_TARGET_DIR/debug/ebql" bench/run.sh --quick
