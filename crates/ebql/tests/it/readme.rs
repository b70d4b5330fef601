//! Issue 20, item 10: every query of README.md and docs/*.md is run, as
//! rustdoc runs examples (README "Testing the README" has the convention).
//! SQL blocks and queries without `-c` are compiled with `ebql explain`;
//! `ebql query -c CMD …` commands (and blocks marked `run`) run for 2 s
//! and must give a non-empty result; markers say why a block is only
//! explained or skipped. Also: the five headline cookbook queries are no
//! longer than the bpftrace one-liners beside them, and every link between
//! the documents resolves.

mod doc;

use crate::common::*;
use doc::{Action, Block, ShellCommand};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const EBQL: &str = env!("CARGO_BIN_EXE_ebql");

/// The cookbook's headline tasks (issue 20, item 10).
const HEADLINES: [&str; 5] = [
    "syscalls",
    "read-latency",
    "opens",
    "flamegraph",
    "tcp-dport",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// README.md and docs/*.md, as (name relative to the root, text).
fn documents() -> Vec<(String, String)> {
    let mut names = vec!["README.md".to_string()];
    let mut docs: Vec<String> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    docs.sort();
    names.extend(docs);
    names
        .into_iter()
        .map(|n| {
            let text = std::fs::read_to_string(root().join(&n)).unwrap();
            (n, text)
        })
        .collect()
}

fn all_blocks() -> Vec<Block> {
    documents()
        .iter()
        .flat_map(|(name, text)| doc::blocks(name, text))
        .collect()
}

#[derive(Default)]
struct Tally {
    run: Vec<String>,
    explained: Vec<String>,
    /// Explained where a marker says why it does not run.
    explained_instead: Vec<String>,
    skipped: Vec<String>,
    failures: Vec<String>,
}

fn substitute(text: &str, subs: &[(String, String)]) -> String {
    subs.iter()
        .fold(text.to_string(), |t, (old, new)| t.replace(old, new))
}

/// `ebql explain -e SQL`: compiles the query (no attach).
fn explain(sql: &str) -> Result<(), String> {
    let out = Command::new(EBQL)
        .args(["explain", "-e", sql])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    if out.status.success() && !out.stdout.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "explain exited {:?}: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// An `ebql` command as written but for `sub=`, the duration (2 s) and the
/// output (a file in `dir`); its results must not be empty.
fn run_query(args: &[String], dir: &Path, traffic: bool) -> Result<(), String> {
    let mut argv: Vec<String> = vec!["query".into()];
    let mut output: Option<PathBuf> = None;
    let mut format = "table".to_string();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-d" | "--duration" => {
                it.next();
            }
            "-o" | "--output" => {
                let name = Path::new(it.next().unwrap())
                    .file_name()
                    .unwrap()
                    .to_owned();
                output = Some(dir.join(name));
            }
            // The stats line is checked below.
            "-q" | "--quiet" => {}
            "-f" | "--format" => {
                format = it.next().unwrap().clone();
                argv.extend(["-f".to_string(), format.clone()]);
            }
            _ => argv.push(a.clone()),
        }
    }
    let output = output.unwrap_or_else(|| dir.join("out"));
    let _ = std::fs::remove_file(&output);
    let _ = std::fs::remove_dir_all(&output);
    // The query is the last word: options go before it.
    let sql = argv.pop().unwrap();
    argv.extend(["-d".into(), "2s".into(), "-o".into()]);
    argv.push(output.to_string_lossy().into_owned());
    argv.push(sql);
    let stop = Arc::new(AtomicBool::new(false));
    let chatter = traffic.then(|| loopback_traffic(stop.clone()));
    let started = Instant::now();
    // Files, not pipes: a command that outlives eBQL cannot hold them open.
    let err_path = dir.join("stderr");
    let mut child = Command::new(EBQL)
        .args(&argv)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    stop.store(true, Ordering::Relaxed);
    if let Some(h) = chatter {
        h.join().unwrap();
    }
    let err = std::fs::read_to_string(&err_path).unwrap_or_default();
    if !status.success() {
        return Err(format!("exited {:?}: {}", status.code(), err.trim()));
    }
    // The stats line: the query matched events (a global aggregate has a
    // row even when it saw nothing).
    let matched = err
        .lines()
        .filter_map(|l| l.strip_prefix("ebql: stats "))
        .filter_map(|j| serde_json::from_str::<serde_json::Value>(j).ok())
        .find_map(|v| v["events_matched"].as_u64());
    match matched {
        Some(n) if n > 0 => {}
        _ => return Err(format!("no event matched: {}", err.trim())),
    }
    let bytes = read_output(&output);
    let text = String::from_utf8_lossy(&bytes);
    let rows = match format.as_str() {
        "table" | "live" => text.lines().filter(|l| l.starts_with('|')).count() >= 2,
        "csv" => text.lines().count() >= 2,
        _ => !bytes.is_empty(),
    };
    if rows {
        Ok(())
    } else {
        Err(format!(
            "no result rows ({format}): {text:?}; stderr: {}",
            err.trim()
        ))
    }
}

/// A file's bytes, or every file's of a directory (`-f parquet -o DIR`).
fn read_output(path: &Path) -> Vec<u8> {
    if path.is_dir() {
        std::fs::read_dir(path)
            .unwrap()
            .flat_map(|e| std::fs::read(e.unwrap().path()).unwrap_or_default())
            .collect()
    } else {
        std::fs::read(path).unwrap_or_default()
    }
}

/// Connects to a listener on 127.0.0.1 and sends a little, over and over,
/// until `stop`: TCP packets and connection state changes on `lo`.
fn loopback_traffic(stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            if let Ok(mut c) = TcpStream::connect(addr) {
                let _ = c.write_all(b"ebql readme test\n");
            }
            while let Ok((mut s, _)) = listener.accept() {
                let mut buf = [0u8; 64];
                let _ = s.read(&mut buf);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    })
}

/// The query of `ebql query|check|serve …`: `-e SQL` or the last word.
fn query_of(args: &[String]) -> Option<String> {
    if let Some(i) = args.iter().position(|a| a == "-e" || a == "--execute") {
        return args.get(i + 1).cloned();
    }
    let last = args.last()?;
    (!last.starts_with('-')).then(|| last.replace("$pid", "1"))
}

fn do_command(block: &Block, cmd: &ShellCommand, dir: &Path, tally: &mut Tally) {
    let m = &block.marker;
    let mut what = format!("{}: {}", block.place, doc::one_line(&cmd.text));
    for (old, new) in &m.subs {
        what.push_str(&format!("\n      with `{old}` as `{new}`"));
    }
    if let (Some(r), Action::Run | Action::Default) = (&m.reason, m.action) {
        what.push_str(&format!(": {r}"));
    }
    let args: Vec<String> = cmd.args.iter().map(|a| substitute(a, &m.subs)).collect();
    if m.action == Action::Skip {
        tally.skipped.push(format!(
            "{what}\n      reason: {}",
            m.reason.as_deref().unwrap()
        ));
        return;
    }
    let sub = args.first().map(String::as_str).unwrap_or("");
    match sub {
        "query" | "q" | "check" | "serve" => {
            let with_command = args.iter().any(|a| a == "-c" || a == "--command");
            let run = match m.action {
                Action::Run => true,
                Action::Default => with_command,
                _ => false,
            };
            if run {
                if sub == "check" || sub == "serve" {
                    tally.failures.push(format!(
                        "{what}\n      `run` is for `ebql query`; mark it `explain: WHY`"
                    ));
                    return;
                }
                match run_query(&args[1..], dir, m.traffic) {
                    Ok(()) => tally.run.push(what),
                    Err(e) => tally.failures.push(format!("{what}\n      {e}")),
                }
                return;
            }
            let Some(sql) = query_of(&args[1..]) else {
                tally.failures.push(format!(
                    "{what}\n      no query to explain: mark it `skip: WHY`"
                ));
                return;
            };
            match explain(&sql) {
                Ok(()) if m.action == Action::Explain => tally.explained_instead.push(format!(
                    "{what}\n      reason: {}",
                    m.reason.as_deref().unwrap()
                )),
                Ok(()) => tally.explained.push(what),
                Err(e) => tally.failures.push(format!("{what}\n      {e}")),
            }
        }
        "explain" | "events" | "describe" | "man" | "completions" => {
            let out = Command::new(EBQL)
                .args(&args)
                .stdin(Stdio::null())
                .output()
                .unwrap();
            if out.status.success() && !out.stdout.is_empty() {
                tally.run.push(what);
            } else {
                tally.failures.push(format!(
                    "{what}\n      exited {:?}: {}",
                    out.status.code(),
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
        }
        _ => tally.failures.push(format!(
            "{what}\n      the test does not run `ebql {sub}`: mark the block `skip: WHY`"
        )),
    }
}

fn do_block(block: &Block, dir: &Path, tally: &mut Tally) {
    let m = &block.marker;
    if m.action == Action::Bpftrace {
        return;
    }
    match block.lang.as_str() {
        "sql" => {
            for stmt in doc::statements(&block.text) {
                let what = format!("{}: {}", block.place, doc::one_line(&stmt));
                match m.action {
                    Action::Skip => tally
                        .skipped
                        .push(format!("{what}\n      reason: {}", m.reason.as_deref().unwrap())),
                    Action::Run => tally.failures.push(format!(
                        "{what}\n      a SQL block is only explained; write it as an `ebql query` command to run it"
                    )),
                    _ => match explain(&substitute(&stmt, &m.subs)) {
                        Ok(()) if m.action == Action::Explain => {
                            tally.explained_instead.push(format!(
                                "{what}\n      reason: {}",
                                m.reason.as_deref().unwrap()
                            ))
                        }
                        Ok(()) => tally.explained.push(what),
                        Err(e) => tally.failures.push(format!("{what}\n      {e}")),
                    },
                }
            }
        }
        "" | "sh" | "console" | "bash" => {
            let cmds = doc::commands(&block.text);
            if cmds.is_empty() && m.action == Action::Skip {
                let reason = m.reason.as_deref().unwrap();
                tally.skipped.push(format!(
                    "{}: {}\n      reason: {reason}",
                    block.place,
                    doc::one_line(&block.text)
                ));
            } else if cmds.is_empty() && m.action != Action::Default {
                tally.failures.push(format!(
                    "{}: marked block without an `ebql` command",
                    block.place
                ));
            }
            for cmd in &cmds {
                do_command(block, cmd, dir, tally);
            }
        }
        // Run by crates/ebql-python/tests/test_readme.py.
        "python" => assert!(
            matches!(m.action, Action::Default | Action::Skip),
            "{}: a Python block is run or skipped",
            block.place
        ),
        _ => {
            assert!(
                m.action == Action::Default,
                "{}: markers are for sh, sql and python blocks",
                block.place
            );
        }
    }
}

#[test]
fn every_documented_query_runs_or_compiles() {
    require_root();
    let _k = kernel_lock();
    let dir = std::env::temp_dir().join(format!("ebql-readme-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut tally = Tally::default();
    for block in all_blocks() {
        do_block(&block, &dir, &mut tally);
    }
    let _ = std::fs::remove_dir_all(&dir);
    let list = |items: &[String]| -> String {
        items.iter().map(|s| format!("  {s}\n")).collect::<String>()
    };
    println!(
        "readme: {} run, {} explained, {} explained instead of run (reason given), {} skipped (reason given), {} failed",
        tally.run.len(),
        tally.explained.len(),
        tally.explained_instead.len(),
        tally.skipped.len(),
        tally.failures.len()
    );
    println!("run:\n{}", list(&tally.run));
    println!(
        "explained instead of run:\n{}",
        list(&tally.explained_instead)
    );
    println!("skipped:\n{}", list(&tally.skipped));
    assert!(
        tally.failures.is_empty(),
        "{} documented queries failed:\n{}",
        tally.failures.len(),
        list(&tally.failures)
    );
    // Guard against the extraction silently finding nothing.
    assert!(tally.run.len() >= 20, "only {} ran", tally.run.len());
    assert!(
        tally.explained.len() >= 40,
        "only {} explained",
        tally.explained.len()
    );
}

#[test]
fn headline_queries_are_no_longer_than_bpftrace() {
    let blocks = all_blocks();
    let named = |action: Action, name: &str| -> Vec<&Block> {
        blocks
            .iter()
            .filter(|b| {
                b.marker.name.as_deref() == Some(name)
                    && (b.marker.action == Action::Bpftrace) == (action == Action::Bpftrace)
            })
            .collect()
    };
    let mut report = Vec::new();
    for name in HEADLINES {
        let ours = named(Action::Default, name);
        let theirs = named(Action::Bpftrace, name);
        assert_eq!(ours.len(), 1, "one `headline={name}` block expected");
        assert_eq!(theirs.len(), 1, "one `bpftrace={name}` block expected");
        let cmds = doc::commands(&ours[0].text);
        assert_eq!(cmds.len(), 1, "{}: one command", ours[0].place);
        let ours = doc::one_line(&ours[0].text);
        let theirs = doc::one_line(&theirs[0].text);
        assert!(
            theirs.starts_with("bpftrace "),
            "{name}: not a bpftrace line: {theirs}"
        );
        let (a, b) = (ours.chars().count(), theirs.chars().count());
        println!("{name}: eBQL {a} characters, bpftrace {b}");
        if a > b {
            report.push(format!(
                "{name}: eBQL {a} > bpftrace {b}\n  {ours}\n  {theirs}"
            ));
        }
    }
    assert!(report.is_empty(), "{}", report.join("\n"));
}

#[test]
fn links_between_the_documents_resolve() {
    let docs = documents();
    let mut broken = Vec::new();
    for (name, text) in &docs {
        let here = Path::new(name).parent().unwrap_or(Path::new(""));
        let mut fenced = false;
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
            }
            if fenced {
                continue;
            }
            for target in line.split("](").skip(1).filter_map(|s| s.split(')').next()) {
                if target.contains("://") {
                    continue;
                }
                let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
                let path = if file.is_empty() {
                    PathBuf::from(name)
                } else {
                    here.join(file)
                };
                let full = root().join(&path);
                if !full.exists() {
                    broken.push(format!("{name}:{}: no file {}", n + 1, path.display()));
                    continue;
                }
                if anchor.is_empty() {
                    continue;
                }
                let Ok(t) = std::fs::read_to_string(&full) else {
                    continue;
                };
                if !doc::anchors(&t).iter().any(|a| a == anchor) {
                    broken.push(format!("{name}:{}: no heading for #{anchor}", n + 1));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}
