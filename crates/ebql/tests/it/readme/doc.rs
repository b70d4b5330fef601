//! Reading the documentation: fenced code blocks, the `<!-- ebql-test: … -->`
//! markers before them, the statements of SQL blocks, and the `ebql`
//! commands of shell blocks split into words as `sh` would split them.
//! The convention is described in README "Testing the README".

use std::collections::HashMap;

/// What a marker asks for a block (no marker: [`Action::Default`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// `query` with `-c` runs, other queries are explained.
    Default,
    Run,
    Explain,
    Skip,
    /// A bpftrace one-liner shown beside a query: not run.
    Bpftrace,
}

#[derive(Clone, Debug)]
pub struct Marker {
    pub action: Action,
    pub reason: Option<String>,
    /// `sub=OLD=>NEW`: text replaced before the block is run or explained.
    pub subs: Vec<(String, String)>,
    /// `traffic`: loopback TCP connections while the block runs.
    pub traffic: bool,
    /// `headline=NAME` (on a query) or `bpftrace=NAME` (on its one-liner).
    pub name: Option<String>,
}

impl Default for Marker {
    fn default() -> Self {
        Marker {
            action: Action::Default,
            reason: None,
            subs: Vec::new(),
            traffic: false,
            name: None,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Block {
    /// `README.md:123` (the fence's line).
    pub place: String,
    /// The fence's info string (`sh`, `sql`, `python`, or empty).
    pub lang: String,
    pub text: String,
    pub marker: Marker,
}

const MARKER: &str = "<!-- ebql-test:";

/// Parses `ITEM, ITEM…[: REASON]` (the text between `ebql-test:` and `-->`).
pub fn parse_marker(body: &str, place: &str) -> Marker {
    let (items, reason) = match body.split_once(": ") {
        Some((items, reason)) => (items, Some(reason.trim().to_string())),
        None => (body, None),
    };
    let mut m = Marker {
        reason,
        ..Marker::default()
    };
    let set = |m: &mut Marker, a: Action| {
        assert!(
            m.action == Action::Default,
            "{place}: marker names two actions: {body}"
        );
        m.action = a;
    };
    for item in items.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match item {
            "run" => set(&mut m, Action::Run),
            "explain" => set(&mut m, Action::Explain),
            "skip" => set(&mut m, Action::Skip),
            "bpftrace" => set(&mut m, Action::Bpftrace),
            "traffic" => m.traffic = true,
            _ => {
                if let Some(s) = item.strip_prefix("sub=") {
                    let (old, new) = s
                        .split_once("=>")
                        .unwrap_or_else(|| panic!("{place}: `sub=OLD=>NEW` expected: {item}"));
                    m.subs.push((old.to_string(), new.to_string()));
                } else if let Some(n) = item.strip_prefix("headline=") {
                    m.name = Some(n.to_string());
                } else if let Some(n) = item.strip_prefix("bpftrace=") {
                    set(&mut m, Action::Bpftrace);
                    m.name = Some(n.to_string());
                } else {
                    panic!("{place}: unknown item `{item}` in marker: {body}");
                }
            }
        }
    }
    if matches!(m.action, Action::Skip | Action::Explain) {
        assert!(
            m.reason.as_deref().is_some_and(|r| !r.is_empty()),
            "{place}: `skip` and `explain` markers need a reason (`skip: WHY`)"
        );
    }
    m
}

/// The fenced code blocks of a Markdown file, each with the marker on the
/// line before its fence (if any).
pub fn blocks(file: &str, text: &str) -> Vec<Block> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut pending: Option<(Marker, usize)> = None;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim();
        if let Some(rest) = line.strip_prefix(MARKER) {
            let body = rest
                .strip_suffix("-->")
                .unwrap_or_else(|| panic!("{file}:{}: marker must end on its line", i + 1));
            pending = Some((parse_marker(body.trim(), &format!("{file}:{}", i + 1)), i));
        } else if let Some(info) = line.strip_prefix("```") {
            let start = i;
            let indent = lines[i].len() - lines[i].trim_start().len();
            let mut body = Vec::new();
            i += 1;
            while i < lines.len() && lines[i].trim() != "```" {
                let l = lines[i];
                body.push(if l.len() >= indent && l[..indent].trim().is_empty() {
                    &l[indent..]
                } else {
                    l.trim_start()
                });
                i += 1;
            }
            let marker = match pending.take() {
                Some((m, at)) => {
                    assert_eq!(
                        at + 1,
                        start,
                        "{file}:{}: a marker must be on the line right before a fence",
                        at + 1
                    );
                    m
                }
                None => Marker::default(),
            };
            out.push(Block {
                place: format!("{file}:{}", start + 1),
                lang: info.trim().to_string(),
                text: body.join("\n"),
                marker,
            });
        } else if !line.is_empty() {
            if let Some((_, at)) = pending {
                panic!("{file}:{}: marker not followed by a fenced block", at + 1);
            }
        }
        i += 1;
    }
    assert!(pending.is_none(), "{file}: marker at the end of the file");
    out
}

/// The statements of a SQL block: split at a `;` that ends a line or at a
/// blank line, `--` comment lines dropped; `CREATE VIEW …;` definitions
/// stay with the query after them.
pub fn statements(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut views = String::new();
    let mut flush = |cur: &mut String| {
        let s = cur.trim().trim_end_matches(';').trim().to_string();
        if s.to_ascii_uppercase().starts_with("CREATE VIEW") {
            views.push_str(&s);
            views.push_str(";\n");
        } else if !s.is_empty() {
            out.push(format!("{views}{s}"));
            views.clear();
        }
        cur.clear();
    };
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with("--") {
            continue;
        }
        if t.is_empty() {
            flush(&mut cur);
            continue;
        }
        cur.push_str(line);
        cur.push('\n');
        if t.ends_with(';') {
            flush(&mut cur);
        }
    }
    flush(&mut cur);
    out
}

/// One `ebql …` command of a shell block.
#[derive(Clone, Debug)]
pub struct ShellCommand {
    /// As written (its lines joined), for messages.
    pub text: String,
    /// Words after `ebql`, up to the first `|`, `>`, `<`, `;`, `&` or `#`.
    pub args: Vec<String>,
}

/// The `ebql` commands of a shell block: lines starting with `ebql ` or
/// `$ ebql `, continued while a quote is open or a line ends in `\`;
/// `NAME=value` lines set `$NAME`. Output is not a command: in a block
/// with `$ ` prompts, the lines without one; elsewhere a line `ebql WORD:
/// …` (the stats line, a report's heading).
pub fn commands(text: &str) -> Vec<ShellCommand> {
    let lines: Vec<&str> = text.lines().collect();
    let mut vars = HashMap::new();
    let mut out = Vec::new();
    // With a prompt, only the prompted lines are commands: the rest is output.
    let prompted = lines.iter().any(|l| l.trim_start().starts_with("$ "));
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim_start();
        let line = match line.strip_prefix("$ ") {
            Some(l) => l,
            None if prompted => {
                i += 1;
                continue;
            }
            None => line,
        };
        if let Some((name, value)) = assignment(line) {
            if let Ok(words) = shell_words(value, &vars) {
                vars.insert(name.to_string(), words.concat());
            }
        } else if line.starts_with("ebql ")
            && !line
                .split_whitespace()
                .nth(1)
                .is_some_and(|w| w.ends_with(':'))
        {
            let mut cmd = line.to_string();
            loop {
                match shell_words(&cmd, &vars) {
                    Ok(words) => {
                        out.push(ShellCommand {
                            text: cmd.clone(),
                            args: words[1..].to_vec(),
                        });
                        break;
                    }
                    Err(()) => {
                        i += 1;
                        assert!(i < lines.len(), "unterminated command: {cmd}");
                        cmd.push('\n');
                        cmd.push_str(lines[i]);
                    }
                }
            }
        }
        i += 1;
    }
    out
}

fn assignment(line: &str) -> Option<(&str, &str)> {
    let (name, value) = line.split_once('=')?;
    let ok = !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    ok.then_some((name, value))
}

/// Splits `text` into words as `sh` does (quotes, backslashes, `$NAME` of
/// `vars`; an unknown `$NAME` stays as written), up to the first unquoted
/// operator. `Err` while a quote is open or the text ends in a backslash.
pub fn shell_words(text: &str, vars: &HashMap<String, String>) -> Result<Vec<String>, ()> {
    let chars: Vec<char> = text.chars().collect();
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut i = 0;
    let expand = |i: &mut usize, word: &mut String| {
        let start = *i + 1;
        let mut end = start;
        while end < chars.len() && (chars[end].is_ascii_alphanumeric() || chars[end] == '_') {
            end += 1;
        }
        let name: String = chars[start..end].iter().collect();
        match vars.get(&name) {
            Some(v) if !name.is_empty() => word.push_str(v),
            _ => {
                word.push('$');
                word.push_str(&name);
            }
        }
        *i = end;
    };
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\'' => {
                in_word = true;
                let close = chars[i + 1..].iter().position(|&c| c == '\'').ok_or(())?;
                word.extend(&chars[i + 1..i + 1 + close]);
                i += close + 2;
            }
            '"' => {
                in_word = true;
                i += 1;
                loop {
                    match chars.get(i) {
                        None => return Err(()),
                        Some('"') => break,
                        Some('\\') if matches!(chars.get(i + 1), Some('"' | '\\' | '$')) => {
                            word.push(chars[i + 1]);
                            i += 2;
                        }
                        Some('\\') if chars.get(i + 1) == Some(&'\n') => i += 2,
                        Some('$') => expand(&mut i, &mut word),
                        Some(&c) => {
                            word.push(c);
                            i += 1;
                        }
                    }
                }
                i += 1;
            }
            '\\' => match chars.get(i + 1) {
                None => return Err(()),
                Some('\n') => i += 2,
                Some(&c) => {
                    in_word = true;
                    word.push(c);
                    i += 2;
                }
            },
            '$' => {
                in_word = true;
                expand(&mut i, &mut word);
            }
            '|' | '>' | '<' | ';' | '&' => break,
            '#' if !in_word => break,
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
                i += 1;
            }
            c => {
                in_word = true;
                word.push(c);
                i += 1;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

/// A command as one line: continuation backslashes dropped and every run of
/// whitespace one space (what the headline comparison counts).
pub fn one_line(text: &str) -> String {
    text.replace("\\\n", " ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// GitHub's anchor of a heading: lower case, punctuation other than `-`
/// and `_` dropped, spaces as `-`.
pub fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown file's headings (outside code blocks),
/// numbered `-1`, `-2`… when repeated, as GitHub does.
pub fn anchors(text: &str) -> Vec<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            let base = slug(&line[hashes..]);
            let n = seen.entry(base.clone()).or_insert(0);
            out.push(if *n == 0 {
                base.clone()
            } else {
                format!("{base}-{n}")
            });
            *n += 1;
        }
    }
    out
}

#[test]
fn shell_words_split_as_sh_does() {
    let vars = HashMap::from([("P".to_string(), "usdt:/x:p".to_string())]);
    let w = shell_words(
        r#"ebql q -c "perl -e '1 for 1..3e7'" -f folded "SELECT 1 FROM $P:a" | flamegraph.pl"#,
        &vars,
    )
    .unwrap();
    assert_eq!(
        w,
        [
            "ebql",
            "q",
            "-c",
            "perl -e '1 for 1..3e7'",
            "-f",
            "folded",
            "SELECT 1 FROM usdt:/x:p:a"
        ]
    );
    assert!(shell_words("ebql query 'SELECT", &vars).is_err());
    assert!(shell_words("ebql query -d 1 \\", &vars).is_err());
    assert_eq!(
        shell_words("ebql query \\\n  'a $pid' # x", &vars).unwrap(),
        ["ebql", "query", "a $pid"]
    );
    assert_eq!(
        commands("$ ebql check 'SELECT a\n  FROM b'\nwindow 1: agree\nebql replay: 9 statements")
            .len(),
        1
    );
    assert_eq!(
        statements("-- c\nSELECT 1\nFROM a;\n\nSELECT 2;\nSELECT 3"),
        ["SELECT 1\nFROM a", "SELECT 2", "SELECT 3"]
    );
    assert_eq!(
        slug("Kafka: `--output kafka://HOST:PORT/TOPIC`"),
        "kafka---output-kafkahostporttopic"
    );
    assert_eq!(
        slug("Block I/O sizes and latency"),
        "block-io-sizes-and-latency"
    );
}
