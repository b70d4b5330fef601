#!/usr/bin/env bash
# Fresh machine → results: install build dependencies, build eBQL, and run the
# thesis' Figure 12 query for a few seconds on a built-in 2-thread pread64
# workload whose pid it fills in. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
. scripts/env.sh
cargo build -p ebql
"$CARGO_TARGET_DIR/debug/ebql" demo --seconds "${1:-5}"
