//! `ebql`: the command-line front end. Thin: everything lives in the
//! library; the subcommands are in [`cli`].
//!
//! Exit codes: 0 ok, 1 runtime failure, 2 bad query or usage (arguments,
//! an unknown event, a format the results do not fit), 3 a disagreement
//! (`check`, `replay`), 4 the run ended but some windows failed.

mod cli;

fn main() {
    std::process::exit(cli::main());
}
