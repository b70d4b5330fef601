//! What several subcommands share: how they fail ([`Failure`]), the
//! Ctrl-C/SIGTERM flag, the busy line on stderr during slow set-up steps,
//! I/O errors as eBQL errors.

use ebql::sink::FormatRefused;
use ebql::Error;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How a subcommand fails: an error of the engine (its own exit code), or
/// a usage error the command line finds before anything runs (exit 2, as
/// for a bad query): a format the results do not fit, an unknown event, a
/// query file that is not there.
#[derive(Debug)]
pub(super) enum Failure {
    /// The engine's error.
    Engine(Error),
    /// What the user asked for cannot be; with what to do instead.
    Usage {
        problem: String,
        hint: Option<String>,
    },
}

impl Failure {
    pub(super) fn usage(problem: String, hint: Option<String>) -> Failure {
        Failure::Usage { problem, hint }
    }

    /// 2 for usage errors, the engine error's own code otherwise
    /// (0 ok, 1 runtime failure, 2 bad query, 3 disagreement, 4 failed windows).
    pub(super) fn exit_code(&self) -> i32 {
        match self {
            Failure::Engine(e) => e.exit_code(),
            Failure::Usage { .. } => 2,
        }
    }

    /// The message for stderr, ending in a newline.
    pub(super) fn render(&self) -> String {
        match self {
            Failure::Engine(e) => e.render(),
            Failure::Usage {
                problem,
                hint: Some(hint),
            } => format!("error: {problem}\nhint: {hint}\n"),
            Failure::Usage {
                problem,
                hint: None,
            } => format!("error: {problem}\n"),
        }
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure::Engine(e)
    }
}

impl From<FormatRefused> for Failure {
    fn from(r: FormatRefused) -> Failure {
        Failure::usage(r.problem, Some(r.hint))
    }
}

/// An I/O error while doing `what`, as a runtime error (exit 1).
pub(super) fn io_err(what: String, e: std::io::Error) -> Error {
    Error::Runtime(ebql_runtime::RuntimeError::Sys { what, source: e })
}

/// Set by Ctrl-C or SIGTERM.
/// The bearer token in `file` (`--token-file`), its surrounding
/// whitespace trimmed; `None` without a file.
///
/// Errors: the file cannot be read.
pub(super) fn read_token(file: Option<&std::path::Path>) -> Result<Option<String>, Error> {
    file.map(|f| {
        std::fs::read_to_string(f)
            .map(|t| t.trim().to_string())
            .map_err(|e| io_err(format!("reading {}", f.display()), e))
    })
    .transpose()
}

pub(super) fn interrupt_flag() -> Result<Arc<AtomicBool>, Error> {
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, flag.clone())
            .map_err(|e| io_err("installing signal handlers".into(), e))?;
    }
    Ok(flag)
}

/// While a set-up step runs (BTF loading, big maps, `ebql check`'s reference
/// plan), a line on stderr says what is happening and for how long, when
/// stderr is a terminal and the step takes more than [`Busy::QUIET`]; the
/// line is erased when the step ends (on drop).
pub(super) struct Busy {
    done: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Busy {
    /// Steps quicker than this show nothing.
    const QUIET: Duration = Duration::from_millis(300);

    pub(super) fn start(what: &'static str) -> Busy {
        use std::io::IsTerminal;
        let done = Arc::new(AtomicBool::new(false));
        let thread = std::io::stderr().is_terminal().then(|| {
            let done = done.clone();
            std::thread::spawn(move || {
                let started = Instant::now();
                let mut shown = false;
                while !done.load(Ordering::Relaxed) {
                    if started.elapsed() >= Busy::QUIET {
                        let _ = write!(
                            std::io::stderr(),
                            "\r\x1b[Kebql: {what}… {:.1}s",
                            started.elapsed().as_secs_f64()
                        );
                        shown = true;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                if shown {
                    let _ = write!(std::io::stderr(), "\r\x1b[K");
                }
            })
        });
        Busy { done, thread }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
