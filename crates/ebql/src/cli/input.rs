//! What users type besides flags: durations with units (`-d 500ms`), and
//! the query, from `-e SQL`, the QUERY argument, a file it names, or stdin
//! (`-`).

use super::common::Failure;
use std::path::Path;
use std::time::Duration;

/// A duration as `-d/--duration` takes it: a bare number is seconds (`5`,
/// `0.5`), else numbers with units, summed: `500ms`, `5s`, `2m`, `1h`,
/// `1m30s`, `1.5s` (units `ns`, `us`/`µs`, `ms`, `s`/`sec`, `m`/`min`, `h`).
pub(super) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let bad = |why: &str| {
        format!("`{text}`: {why} (e.g. 5, 5s, 500ms, 2m, 1m30s; a bare number is seconds)")
    };
    if let Ok(secs) = text.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).map_err(|_| bad("not a duration"));
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    if rest.is_empty() {
        return Err(bad("empty"));
    }
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (num, tail) = rest.split_at(num_len);
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let value: f64 = num.parse().map_err(|_| bad("a number must come first"))?;
        let scale = match unit.trim() {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" | "sec" | "secs" => 1.0,
            "m" | "min" | "mins" => 60.0,
            "h" | "hr" | "hrs" => 3600.0,
            "" => return Err(bad("a number needs a unit after another one")),
            other => return Err(bad(&format!("unknown unit `{other}`"))),
        };
        total += Duration::try_from_secs_f64(value * scale).map_err(|_| bad("too long"))?;
        rest = tail;
    }
    Ok(total)
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_units_and_a_bare_number_is_seconds() {
        let ms = Duration::from_millis;
        for (text, want) in [
            ("5", ms(5000)),
            ("0.5", ms(500)),
            ("5s", ms(5000)),
            ("500ms", ms(500)),
            ("2m", ms(120_000)),
            ("1h", ms(3_600_000)),
            ("1m30s", ms(90_000)),
            ("1.5s", ms(1500)),
            ("250us", Duration::from_micros(250)),
            ("7ns", Duration::from_nanos(7)),
            (" 3 s ", ms(3000)),
        ] {
            assert_eq!(parse_duration(text), Ok(want), "{text}");
        }
        for bad in ["", "s", "5x", "-1", "5s3", "1..2s", "ms500", "inf"] {
            let e = parse_duration(bad).unwrap_err();
            assert!(e.contains("a bare number is seconds"), "{bad}: {e}");
        }
    }
}
