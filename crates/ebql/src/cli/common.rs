//! What several subcommands share: the Ctrl-C/SIGTERM flag, the busy line
//! on stderr during slow set-up steps, I/O errors as eBQL errors.

use ebql::Error;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Runs a query into a file sink until --duration, Ctrl-C or SIGTERM, then finishes the sink.
pub(super) fn io_err(what: String, e: std::io::Error) -> Error {
    Error::Runtime(ebql_runtime::RuntimeError::Sys { what, source: e })
}

/// Set by Ctrl-C or SIGTERM.
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
