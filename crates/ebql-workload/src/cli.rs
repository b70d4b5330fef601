//! Command-line front end of the workloads, shared by the `ebql-workload`
//! binary and the hidden `ebql workload …` subcommand.
//!
//! ```text
//! ebql-workload script
//! ebql-workload pread-loop [--threads N] [--seconds S] [--size BYTES] [--file-bytes BYTES] [--rate CALLS_PER_S_PER_THREAD] [--gate FIFO]
//! ebql-workload gate-exec --gate FIFO -- PROGRAM [ARGS...]
//! ```

use std::io::{self, BufWriter};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

use crate::{run_pread_loop, run_script, wait_gate, PreadLoop};

const USAGE: &str = "usage:
  ebql-workload script
      scripted mode: commands on stdin (open, openat, tmpfile, pread, nosys, readwrite, spawn, pagecache, close, pause, exit), one answer line each
  ebql-workload pread-loop [--threads N] [--seconds S] [--size BYTES] [--file-bytes BYTES] [--rate CALLS_PER_S_PER_THREAD] [--gate FIFO]
      pread64 micro-workload (defaults: 2 threads, 5 s, 128 bytes, 16 MiB file);
      prints 'ready <pid>', waits for one byte on FIFO if given, runs, prints per-fd counts
  ebql-workload gate-exec --gate FIFO -- PROGRAM [ARGS...]
      prints 'ready <pid>', waits for one byte on FIFO, then execs PROGRAM in the same process
data files go to $EBQL_WORKLOAD_DIR (default /var/tmp)";

fn parse<T: std::str::FromStr>(flag: &str, v: Option<String>) -> Result<T, String> {
    let v = v.ok_or_else(|| format!("{flag} needs a value"))?;
    v.parse().map_err(|_| format!("bad value for {flag}: {v}"))
}

fn pread_loop(args: Vec<String>) -> Result<(), String> {
    let mut cfg = PreadLoop::default();
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (a.clone(), None),
        };
        let mut val = || inline.clone().or_else(|| it.next());
        match flag.as_str() {
            "--threads" => cfg.threads = parse(&flag, val())?,
            "--seconds" => cfg.seconds = parse(&flag, val())?,
            "--size" => cfg.size = parse(&flag, val())?,
            "--file-bytes" => cfg.file_bytes = parse(&flag, val())?,
            "--rate" => cfg.rate = Some(parse(&flag, val())?),
            "--gate" => cfg.gate = Some(PathBuf::from(parse::<String>(&flag, val())?)),
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            _ => return Err(format!("unknown argument: {a}")),
        }
    }
    let stdout = io::stdout();
    run_pread_loop(&cfg, BufWriter::new(stdout.lock()))
        .map(|_| ())
        .map_err(|e| format!("pread-loop: {e}"))
}

fn gate_exec(args: Vec<String>) -> Result<(), String> {
    let mut gate = None;
    let mut it = args.into_iter();
    let mut cmd = Vec::new();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--gate" => gate = Some(PathBuf::from(it.next().ok_or("--gate needs a value")?)),
            "--" => {
                cmd.extend(it.by_ref());
                break;
            }
            _ => return Err(format!("unknown argument: {a}")),
        }
    }
    let gate = gate.ok_or("gate-exec needs --gate FIFO")?;
    if cmd.is_empty() {
        return Err("gate-exec needs a program after --".into());
    }
    {
        use std::io::Write;
        let mut out = io::stdout().lock();
        writeln!(out, "ready {}", std::process::id()).map_err(|e| e.to_string())?;
        out.flush().map_err(|e| e.to_string())?;
    }
    wait_gate(&gate).map_err(|e| format!("gate-exec: {e}"))?;
    let err = std::process::Command::new(&cmd[0]).args(&cmd[1..]).exec();
    Err(format!("gate-exec: cannot exec {}: {err}", cmd[0]))
}

/// Runs a workload subcommand (`args` without the program name); returns the exit code.
pub fn cli_main(args: &[String]) -> i32 {
    let sub = args.first().map(String::as_str);
    let rest: Vec<String> = args.iter().skip(1).cloned().collect();
    let r = match sub {
        Some("script") if rest.is_empty() => {
            let stdin = io::stdin();
            let stdout = io::stdout();
            run_script(stdin.lock(), stdout.lock()).map_err(|e| format!("script: {e}"))
        }
        Some("pread-loop") => pread_loop(rest),
        Some("gate-exec") => gate_exec(rest),
        Some("-h") | Some("--help") => {
            println!("{USAGE}");
            Ok(())
        }
        _ => Err(USAGE.to_string()),
    };
    match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{e}");
            2
        }
    }
}
