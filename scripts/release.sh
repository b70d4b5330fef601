#!/usr/bin/env bash
# Release artifacts, each installed on this machine and smoke-tested with a
# real query on live events (a command's exact number of write(2) calls):
#   1. the `dist` build of `ebql` (Cargo.toml: the release profile without
#      unwinding) and `cargo install --profile dist --path crates/ebql`
#      (the same target directory: the install reuses the build);
#   2. a Debian package of it (cargo-deb; installed with dpkg, then removed);
#   3. a release wheel (maturin build --release; installed into a venv).
# The artifacts land in $CARGO_TARGET_DIR/packages; each step prints its wall
# time and each artifact its size (docs/setup.md "Build cost" records them).
# Run as root (the smoke queries load BPF programs; dpkg installs).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
. scripts/env.sh
unset RUSTC_WORKSPACE_WRAPPER CLIPPY_ARGS
pkg="$CARGO_TARGET_DIR/packages"
bin="$CARGO_TARGET_DIR/dist"
rm -rf "$pkg"
mkdir -p "$pkg"

step() { printf '== %s\n' "$*" >&2; }
timed() {
  local t0=$SECONDS
  "$@"
  printf '   %s: %d s\n' "$1" $((SECONDS - t0)) >&2
}
size() { printf '   %s: %s bytes\n' "$1" "$(stat -c %s "$1")" >&2; }

# The smoke query: `dd` writes 1,000 one-byte blocks; -c traces exactly it.
writes_sql="SELECT COUNT(*) AS n FROM tracepoint:syscalls:sys_enter_write"
writes_cmd="dd if=/dev/zero of=/dev/null bs=1 count=1000 status=none"
smoke() {
  local ebql=$1 out
  "$ebql" --version
  out=$("$ebql" query -q -f csv -c "$writes_cmd" "$writes_sql")
  [ "$out" = $'n\n1000' ] || {
    printf 'smoke query of %s: expected n=1000, got:\n%s\n' "$ebql" "$out" >&2
    exit 1
  }
  printf '   %s counted 1000 writes of 1000\n' "$ebql" >&2
}

step "dist build"
timed cargo build --profile dist --locked -p ebql
size "$bin/ebql"
smoke "$bin/ebql"

step "cargo install --profile dist --path crates/ebql"
timed cargo install --profile dist --locked --path crates/ebql --root "$pkg/cargo"
smoke "$pkg/cargo/bin/ebql"

step "Debian package"
# Beside the binary: the package's assets name them under target/release/,
# which cargo-deb reads as the chosen profile's directory.
mkdir -p "$bin/man"
"$bin/ebql" man > "$bin/man/ebql.1"
for sub in query check calibrate serve replay explain events describe demo; do
  "$bin/ebql" man "$sub" > "$bin/man/ebql-$sub.1"
done
"$bin/ebql" completions bash > "$bin/ebql.bash"
"$bin/ebql" completions zsh > "$bin/_ebql"
"$bin/ebql" completions fish > "$bin/ebql.fish"
command -v cargo-deb > /dev/null || timed cargo install --locked cargo-deb
timed cargo deb --profile dist --no-build --no-strip -p ebql -o "$pkg"
deb=$(ls "$pkg"/ebql_*.deb)
size "$deb"
dpkg-deb --info "$deb" | sed -n 's/^ *\(Depends:.*\)/   \1/p' >&2
dpkg -i "$deb" > /dev/null
smoke /usr/bin/ebql
dpkg -L ebql | grep -q "/usr/share/man/man1/ebql-query.1"
dpkg -r ebql > /dev/null

step "release wheel"
timed python3 -m maturin build -q --release -m crates/ebql-python/Cargo.toml \
  --compatibility linux -o "$pkg"
wheel=$(ls "$pkg"/ebql-*.whl)
size "$wheel"
python3 -m venv --system-site-packages "$pkg/venv"
# --ignore-installed: the system's site-packages (for pyarrow) may hold a dev build of ebql.
"$pkg/venv/bin/pip" install -q --no-deps --ignore-installed "$wheel"
"$pkg/venv/bin/python" - "$writes_sql" "$writes_cmd" << 'EOF'
import sys
import ebql

sql, cmd = sys.argv[1:]
table = ebql.query(sql, command=cmd).read_all()
n = table.column("n").to_pylist()
assert n == [1000], f"the wheel's query counted {n}, expected [1000]"
print(f"   the wheel ({ebql.__file__}) counted 1000 writes of 1000", file=sys.stderr)
EOF
step "done: $pkg"
