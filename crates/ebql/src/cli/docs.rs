//! `ebql completions SHELL` and `ebql man`: generated from the clap
//! definitions, so they cannot drift from the parser.

use super::common::{io_err, Failure};
use clap::CommandFactory;

/// Prints `shell`'s completion script for every (visible) subcommand and flag.
pub(super) fn completions<C: CommandFactory>(shell: clap_complete::Shell) -> Result<(), Failure> {
    let mut cmd = C::command();
    clap_complete::generate(shell, &mut cmd, "ebql", &mut std::io::stdout());
    Ok(())
}

/// Prints the man page (roff) of `ebql`, or of one of its subcommands
/// (`ebql-query(1)`, …).
///
/// Errors: a subcommand that does not exist (exit 2).
pub(super) fn man<C: CommandFactory>(subcommand: Option<&str>) -> Result<(), Failure> {
    let top = C::command();
    let cmd = match subcommand {
        None => top,
        Some(name) => {
            let Some(sub) = top
                .get_subcommands()
                .find(|c| c.get_name() == name && !c.is_hide_set())
            else {
                let names: Vec<&str> = top
                    .get_subcommands()
                    .filter(|c| !c.is_hide_set())
                    .map(|c| c.get_name())
                    .collect();
                return Err(Failure::usage(
                    format!("no subcommand `{name}`"),
                    Some(format!("one of: {}", names.join(", "))),
                ));
            };
            // The page's title and usage lines name it `ebql-query`, `ebql
            // query …` (clap takes static names here; this runs once).
            let page: &'static str = Box::leak(format!("ebql-{name}").into_boxed_str());
            sub.clone().name(page).bin_name(format!("ebql {name}"))
        }
    };
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd)
        .render(&mut out)
        .map_err(|e| io_err("rendering the man page".into(), e))?;
    std::io::Write::write_all(&mut std::io::stdout(), &out)
        .map_err(|e| io_err("writing the man page".into(), e))?;
    Ok(())
}
