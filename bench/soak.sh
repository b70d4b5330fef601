#!/usr/bin/env bash
# eBQL soak test: a windowed query at the machine's maximum pread64 rate
# (2-thread `ebql workload pread-loop`) for a long time, checking that ebql's
# RSS stays flat and that every event is accounted for.
#
#   bench/soak.sh                 30 minutes (the release check)
#   bench/soak.sh --minutes 2     a quick validation run
#
# Other options (see bench/soak.py --help): --ebql PATH (default $EBQL or
# ~/.cache/ebql/target/release/ebql), --window-ms, --sample-seconds,
# --warmup-seconds, --rss-growth-mib, --keep. Exit status 0 = all checks passed.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
if [ "$(id -u)" -ne 0 ]; then
  echo "soak: run as root (BPF programs are loaded)" >&2
  exit 1
fi
exec python3 "$HERE/soak.py" "$@"
