# Sourced by the scripts: cargo on PATH and a build directory outside the
# checkout, so CI and later runs reuse compiled dependencies.
for d in "$HOME/.cargo/bin" /root/.cargo/bin; do
  [ -x "$d/cargo" ] && case ":$PATH:" in *":$d:"*) ;; *) export PATH="$d:$PATH" ;; esac
done
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/ebql/target}"
