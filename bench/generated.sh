#!/usr/bin/env bash
# Generated-query run (issue 6, item 2): random well-typed queries from
# crates/ebql-querygen, compiled and loaded into the kernel (verifier, no
# attach), then run end to end through the differential oracle against the
# scripted workload, several checks attached at once.
#
#   bench/generated.sh                         10,000 loaded, 1,000 checked, seed 1 (~15 min, debug build)
#   bench/generated.sh --load 500 --check 50   a quick run
#
# Options: --seed N, --load N, --check N, --batch N (checks attached at
# once, default 12), --shrink N (disagreements to minimize, default 5),
# --output FILE (default ~/.cache/ebql/bench/generated.txt). The summary
# (queries loaded, query errors by reason, verifier rejections, internal
# errors, panics, checks that agree/disagree/are inconclusive, minimized
# disagreements) is printed and written to the output file. Exit status 0 =
# the run completed (read the summary for the verdict). Needs root.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
if [ "$(id -u)" -ne 0 ]; then
  echo "generated: run as root (BPF programs are loaded)" >&2
  exit 1
fi
SEED=1 LOAD=10000 CHECK=1000 BATCH=12 SHRINK=5 OUT="$HOME/.cache/ebql/bench/generated.txt"
while [ $# -gt 0 ]; do
  case "$1" in
    --seed) SEED="$2"; shift 2 ;;
    --load) LOAD="$2"; shift 2 ;;
    --check) CHECK="$2"; shift 2 ;;
    --batch) BATCH="$2"; shift 2 ;;
    --shrink) SHRINK="$2"; shift 2 ;;
    --output) OUT="$2"; shift 2 ;;
    *) echo "generated: unknown option $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
mkdir -p "$(dirname "$OUT")"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/ebql/target}"
cd "$HERE/.."
EBQL_GEN_SEED="$SEED" EBQL_GEN_LOAD="$LOAD" EBQL_GEN_CHECK="$CHECK" EBQL_GEN_BATCH="$BATCH" \
EBQL_GEN_SHRINK="$SHRINK" EBQL_GEN_OUT="$OUT" \
  cargo test -p ebql --test it generated::full_run -- --ignored --nocapture
echo "generated: summary in $OUT"
