#!/usr/bin/env bash
# Installs what the eBQL benchmark suite needs (Debian 12). Idempotent: only
# missing packages are installed, and nothing is done when all are present.
set -euo pipefail
# dbtrace.py (issue 10): PostgreSQL 15 with pgbench and pg_stat_statements (contrib), bcc's
# dbslower (bpfcc-tools) and the kernel headers bcc compiles against (Debian's, merged by dbtrace.py);
# it reads the Parquet capture with pyarrow (scripts/setup.sh installs it).
# mydbtrace.py (issue 21): MariaDB under sysbench's OLTP scripts.
PKGS=(clang llvm libbpf-dev libelf-dev zlib1g-dev gcc make bpftool bpftrace rocksdb-tools python3 strace
      postgresql-15 postgresql-contrib bpfcc-tools linux-headers-amd64 mariadb-server sysbench)
missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi
# tracefs / debugfs are needed by bpftrace and for tracepoint ids.
if [ ! -e /sys/kernel/tracing/events ]; then
  mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
fi
if [ ! -e /sys/kernel/debug/tracing ] && [ -d /sys/kernel/debug ]; then
  mount -t debugfs nodev /sys/kernel/debug 2>/dev/null || true
fi
