#!/usr/bin/env bash
# Builds the hand-written BPF probes (clang -O2 -target bpf), their libbpf
# skeletons (bpftool gen skeleton) and the C loader into $1 (default
# $HOME/.cache/ebql/bench). Rebuilds only when a source is newer.
set -euo pipefail
SRC="$(cd "$(dirname "$0")" && pwd)"
OUT="${1:-$HOME/.cache/ebql/bench}"
mkdir -p "$OUT"
ARCH_INC="/usr/include/$(uname -m)-linux-gnu"
BPF_CFLAGS=(-O2 -g -target bpf -Wall -Werror -I"$ARCH_INC" -I"$SRC")

newer() { # newer TARGET SRC... : true when TARGET is missing or older than a source
  local t="$1"; shift
  [ -e "$t" ] || return 0
  for s in "$@"; do [ "$s" -nt "$t" ] && return 0; done
  return 1
}

obj() { # obj NAME SOURCE [CFLAGS...]
  local name="$1" src="$2"; shift 2
  if newer "$OUT/$name.bpf.o" "$SRC/$src" "$SRC/common.h" "$0"; then
    clang "${BPF_CFLAGS[@]}" "$@" -c "$SRC/$src" -o "$OUT/$name.bpf.o"
    bpftool gen skeleton "$OUT/$name.bpf.o" name "${name}_bpf" > "$OUT/$name.skel.h.tmp"
    mv "$OUT/$name.skel.h.tmp" "$OUT/$name.skel.h"
  fi
}

obj empty empty.bpf.c
obj standard standard.bpf.c
obj hand hand.bpf.c
obj hand_f4 hand.bpf.c -DFILTER4
obj pair_hash pair.bpf.c
obj pair_ts pair.bpf.c -DTASK_STORAGE

if newer "$OUT/bench_loader" "$SRC/loader.c" "$OUT"/*.skel.h; then
  cc -O2 -g -Wall -Wno-unused-function -I"$OUT" "$SRC/loader.c" -o "$OUT/bench_loader" -lbpf -lelf -lz
fi
echo "$OUT/bench_loader"
