//! What users type besides flags: the query, from `-e SQL`, the QUERY
//! argument, a file it names, or stdin (`-`); durations with units
//! (`-d 500ms`) are [`ebql::duration`]'s.

use super::common::Failure;
pub(super) use ebql::duration::parse_duration;
use std::path::Path;

/// The query of `query`, `check` and `explain`: `-e SQL`, or QUERY (its
/// text, a file holding it, or `-` for stdin).
#[derive(clap::Args, Debug, Clone)]
pub(super) struct QueryText {
    /// The query text, e.g. -e "SELECT COUNT(*) FROM tracepoint:syscalls:sys_enter_read
    /// WINDOW(time, 1000, 1000)" (instead of QUERY).
    #[arg(
        short = 'e',
        long = "execute",
        value_name = "SQL",
        allow_hyphen_values = true,
        conflicts_with = "query"
    )]
    execute: Option<String>,
    /// The query: its text (may start with a `-- comment`), the path of a
    /// file holding it, or `-` to read it from stdin.
    #[arg(
        value_name = "QUERY",
        allow_hyphen_values = true,
        required_unless_present = "execute"
    )]
    query: Option<String>,
    /// A file of `CREATE VIEW name AS SELECT …;` definitions the query may
    /// read (repeatable); they come before the query's own.
    #[arg(long = "views", value_name = "FILE")]
    views: Vec<std::path::PathBuf>,
}

impl QueryText {
    /// The query's text, read from its file or stdin if it names one,
    /// after the definitions of the `--views` files.
    ///
    /// Errors: stdin or a named file that cannot be read, a QUERY that looks
    /// like a file name (one word ending in `.sql`) but names none: exit 2.
    pub(super) fn read(self) -> Result<String, Failure> {
        let mut text = String::new();
        for path in &self.views {
            let views = std::fs::read_to_string(path).map_err(|e| {
                Failure::usage(
                    format!("reading the views in {}: {e}", path.display()),
                    None,
                )
            })?;
            text.push_str(&views);
            text.push('\n');
        }
        Ok(text + &self.query_only()?)
    }

    /// The query's own text, without the views of `--views`.
    fn query_only(self) -> Result<String, Failure> {
        if let Some(sql) = self.execute {
            return Ok(sql);
        }
        let arg = self.query.unwrap_or_default();
        if arg == "-" {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                .map_err(|e| Failure::usage(format!("reading the query from stdin: {e}"), None))?;
            return Ok(text);
        }
        let path = Path::new(&arg);
        if path.is_file() {
            return std::fs::read_to_string(path)
                .map_err(|e| Failure::usage(format!("reading the query from {arg}: {e}"), None));
        }
        if !arg.contains(char::is_whitespace) && arg.ends_with(".sql") {
            return Err(Failure::usage(
                format!("no query file {arg}"),
                Some("give the query text in quotes, a file that exists, or - for stdin".into()),
            ));
        }
        Ok(arg)
    }
}
