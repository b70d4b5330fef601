//! `ebql`: the command-line front end. Thin: everything lives in the
//! library; the subcommands are in [`cli`].
//!
//! Exit codes: 0 ok, 1 runtime failure, 2 bad query, 3 a disagreement
//! (`check`, `replay`).

mod cli;

fn main() {
    std::process::exit(cli::main());
}
