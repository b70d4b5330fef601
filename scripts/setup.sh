#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build and run eBQL (idempotent).
# libbpf is built from source by libbpf-sys (vendored), which needs a C
# toolchain, make, pkg-config and the libelf/zlib headers. bpftool: the kernel
# tests cross-check with it that a killed ebql leaves no BPF object behind.
set -euo pipefail
# bpftool and strace: the fault and bad-input tests check with them what is loaded and called.
# systemtap-sdt-dev (sys/sdt.h): the USDT test target; postgresql-15: the USDT tests on a real binary;
# iproute2: the TC tests' network namespace and veth pair; prometheus: the server the `ebql serve` test scrapes with.
# python3, python3-pip: the Python package (crates/ebql-python) and its tests.
# librdkafka-dev: the Kafka sink links it dynamically; openjdk-17-jre-headless, maven: the Kafka broker of tests/it/kafka.rs.
# mariadb-server (10.11): tests/it/mariadb.rs traces the mariadbd it starts itself (temp datadir, own socket and port).
pkgs=(build-essential make pkg-config libelf-dev zlib1g-dev bpftool strace systemtap-sdt-dev postgresql-15 iproute2 prometheus python3 python3-pip librdkafka-dev openjdk-17-jre-headless maven mariadb-server)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # mariadb-server's postinst starts the packaged service: deny service starts
  # while installing (policy-rc.d, exit 101), unless a policy is already in place.
  deny_starts=""
  if [[ " ${missing[*]} " == *" mariadb-server "* && ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && deny_starts=1
  fi
  apt-get install -y -qq "${missing[@]}" >/dev/null
  [ -n "$deny_starts" ] && rm -f /usr/sbin/policy-rc.d
  if [[ " ${missing[*]} " == *" mariadb-server "* ]]; then
    # Not started at boot either: the tests run their own server.
    if [ -d /run/systemd/system ]; then
      systemctl disable --now mariadb >/dev/null 2>&1 || true
    else
      update-rc.d mariadb disable >/dev/null 2>&1 || true
      service mariadb stop >/dev/null 2>&1 || true
    fi
  fi
fi
if ! command -v cargo >/dev/null; then
  for d in "$HOME/.cargo/bin" /root/.cargo/bin /usr/local/cargo/bin; do
    [ -x "$d/cargo" ] && export PATH="$d:$PATH" && break
  done
fi
command -v cargo >/dev/null || { echo "setup: cargo not found; install Rust (stable) with rustup first" >&2; exit 1; }
# tracefs: eBQL mounts it itself when missing, this just makes `ls` work for people.
if [ ! -e /sys/kernel/tracing/events ] && [ "$(id -u)" = 0 ]; then
  mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
fi
# The Python package: maturin builds its wheel; pyarrow, pandas, polars and
# pytest run its tests (pyarrow also reads the file sinks' output back). Debian's Python is externally managed (PEP 668), so
# pip needs --break-system-packages there; a venv or pyenv Python does not.
# mysql-connector-python: tests/it/mywire.rs's client of server-side prepared statements;
# psycopg (libpq's pipeline mode): tests/it/pgwire.rs's pipelined client;
# adbc-driver-flightsql: tests/it/flight.rs's Flight SQL client.
# pyspark 3.5 (hll_union_agg; runs on Java 17) and datasketches: the merge of
# --partial rows (python/ebql/spark.py) and its tests (tests/test_fleet.py).
py_mods=(maturin pyarrow pandas polars pytest duckdb mysql.connector:mysql-connector-python psycopg adbc_driver_flightsql:adbc-driver-flightsql pyspark:pyspark==3.5.7 datasketches)
py_missing=()
for m in "${py_mods[@]}"; do
  python3 -c "import ${m%%:*}" 2>/dev/null || py_missing+=("${m##*:}")
done
if ((${#py_missing[@]})); then
  echo "setup: pip installing ${py_missing[*]}"
  pip_flags=(-q --root-user-action=ignore)
  [ -e "$(python3 -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')/EXTERNALLY-MANAGED" ] && pip_flags+=(--break-system-packages)
  python3 -m pip install "${pip_flags[@]}" "${py_missing[@]}"
fi
# The Kafka test's single-node broker (KRaft): Apache Kafka's jars from Maven
# Central, fetched once so that the tests need no network.
kafka_jars="$HOME/.cache/ebql/kafka-jars"
if ! ls "$kafka_jars"/kafka_2.13-*.jar >/dev/null 2>&1; then
  echo "setup: downloading the Kafka broker's jars into $kafka_jars"
  mvn -q -f "$(dirname "$0")/../crates/ebql/tests/kafka/pom.xml" dependency:copy-dependencies -DoutputDirectory="$kafka_jars"
fi
# Spark's Kafka connector (pyspark has Spark, not its connectors), for the
# fleet test's Structured Streaming merge.
spark_jars="$HOME/.cache/ebql/spark-jars"
if ! ls "$spark_jars"/spark-sql-kafka-0-10_*.jar >/dev/null 2>&1; then
  echo "setup: downloading Spark's Kafka connector into $spark_jars"
  mvn -q -f "$(dirname "$0")/../crates/ebql-python/tests/spark/pom.xml" dependency:copy-dependencies \
    -DincludeArtifactIds=spark-sql-kafka-0-10_2.12,spark-token-provider-kafka-0-10_2.12,kafka-clients,commons-pool2 \
    -DoutputDirectory="$spark_jars"
fi
