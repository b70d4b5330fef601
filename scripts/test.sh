#!/usr/bin/env bash
# The test suite: unit tests, kernel tests (real BPF programs on real
# tracepoints, filtered to our own workload processes) and the benchmark
# suite's smoke mode (every variant runs and agrees on exact totals), then
# the Python package's tests (pytest against real events).
# Run as root: kernel tests load BPF programs and refuse to skip.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
. scripts/env.sh
# Style and import structure first: they fail in seconds.
cargo fmt --all --check
scripts/check_imports.py
# Clippy's lints (warnings are errors) run as our crates compile: clippy-driver
# compiles them (what `cargo clippy --workspace --all-targets` checks: libs,
# bins, tests, examples; there are no benches), while the dependencies are the
# ones the build already made. `cargo clippy` would first check every
# dependency again in a metadata-only build of its own (~3.5 min on a fresh
# machine). Exported, so every build below shares these artifacts.
RUSTC_WORKSPACE_WRAPPER="$(command -v clippy-driver)"
export RUSTC_WORKSPACE_WRAPPER
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
cargo test --workspace --no-run
cargo test --workspace
cargo build -p ebql
EBQL="$CARGO_TARGET_DIR/debug/ebql" bench/run.sh --quick
# The Python package: a dev-profile abi3 wheel from the same target dir (only
# the extension itself is compiled on top of the build above), installed into
# python3, then its tests. The native `linux` tag: the wheel links the
# system's libelf (a release wheel bundles it: see README "Python").
rm -f "$CARGO_TARGET_DIR"/wheels/ebql-*.whl
python3 -m maturin build -q -m crates/ebql-python/Cargo.toml --compatibility linux -o "$CARGO_TARGET_DIR/wheels"
pip_flags=(-q --root-user-action=ignore --force-reinstall --no-deps)
[ -e "$(python3 -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')/EXTERNALLY-MANAGED" ] && pip_flags+=(--break-system-packages)
python3 -m pip install "${pip_flags[@]}" "$CARGO_TARGET_DIR"/wheels/ebql-*-cp39-abi3-linux_x86_64.whl
EBQL="$CARGO_TARGET_DIR/debug/ebql" python3 -m pytest -q crates/ebql-python/tests
