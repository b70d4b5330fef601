//! A started query as its readers share it: the Python iterator
//! ([`crate::query::Query`]) and the Arrow C streams it exports
//! ([`crate::stream`]) take windows from one channel, so each window is
//! handed out once. No Python here: a stream's consumer may read it from
//! any thread, without the GIL.

use std::process::ExitStatus;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ebql::arrow::record_batch::RecordBatch;
use ebql::command::GatedCommand;
use ebql::{QueryStats, RunningQuery};

/// How long one wait for a window lasts before the end conditions (and,
/// for Python readers, signals) are checked again.
const TICK: Duration = Duration::from_millis(100);

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What one wait for a window gave.
pub(crate) enum Poll {
    /// The next closed window.
    Batch(RecordBatch),
    /// Nothing within a tick; the query goes on.
    Waiting,
    /// The query has stopped and every window was handed out.
    End,
}

/// A running (or stopped) query, its windows, and the command it traces.
pub(crate) struct Run {
    /// `None` once stopped.
    running: Mutex<Option<RunningQuery>>,
    /// Closed windows; disconnects after the query thread has sent the last one.
    batches: Mutex<Receiver<RecordBatch>>,
    /// When `duration` runs out.
    deadline: Option<Instant>,
    /// Counters at stop.
    final_stats: Mutex<Option<QueryStats>>,
    /// The command of `command=`, released (running) once the query attached.
    command: Mutex<Option<GatedCommand>>,
    /// The command's pid.
    command_pid: Option<u32>,
    /// Its exit status, once seen.
    exited: Mutex<Option<ExitStatus>>,
}

impl Run {
    /// A query just attached (its command, if any, already released).
    pub(crate) fn new(
        mut running: RunningQuery,
        deadline: Option<Instant>,
        command: Option<GatedCommand>,
    ) -> Run {
        let batches = running.take_receiver().expect("receiver of a fresh query");
        Run {
            running: Mutex::new(Some(running)),
            batches: Mutex::new(batches),
            deadline,
            final_stats: Mutex::new(None),
            command_pid: command.as_ref().map(|c| c.pid()),
            command: Mutex::new(command),
            exited: Mutex::new(None),
        }
    }

    /// True until the query is stopped.
    pub(crate) fn is_running(&self) -> bool {
        lock(&self.running).is_some()
    }

    /// Counters so far, the final ones once stopped.
    pub(crate) fn stats(&self) -> QueryStats {
        match lock(&self.running).as_ref() {
            Some(q) => q.stats(),
            None => lock(&self.final_stats).unwrap_or_default(),
        }
    }

    /// The traced command's pid, if `command=` started one.
    pub(crate) fn command_pid(&self) -> Option<u32> {
        self.command_pid
    }

    /// The traced command's exit status, once it has exited.
    pub(crate) fn command_status(&self) -> Option<ExitStatus> {
        self.command_exited();
        *lock(&self.exited)
    }

    /// Stops the query if it still runs (its probes detached, the last,
    /// partial window emitted) and returns the final counters; the engine's
    /// error if it failed (once: later calls return the default counters).
    pub(crate) fn stop(&self) -> Result<QueryStats, ebql::Error> {
        let taken = lock(&self.running).take();
        if let Some(q) = taken {
            let stats = q.stop()?;
            *lock(&self.final_stats) = Some(stats);
        }
        Ok(lock(&self.final_stats).unwrap_or_default())
    }

    /// True when the command has exited (its status is kept).
    fn command_exited(&self) -> bool {
        if lock(&self.exited).is_some() {
            return true;
        }
        let status = lock(&self.command).as_mut().and_then(|c| c.try_wait());
        if status.is_some() {
            *lock(&self.exited) = status;
        }
        status.is_some()
    }

    /// True when the query should end: `duration` ran out, the command
    /// exited, or the query thread ended by itself (LIMIT reached, a failure).
    fn should_end(&self) -> bool {
        let finished = lock(&self.running)
            .as_ref()
            .is_some_and(|q| q.is_finished());
        finished || self.deadline.is_some_and(|d| Instant::now() >= d) || self.command_exited()
    }

    /// Waits up to a tick for the next window (blocking: call it without
    /// the GIL). Stops the query first when it should end, so the last
    /// window follows and then [`Poll::End`].
    pub(crate) fn poll(&self) -> Result<Poll, ebql::Error> {
        let running = self.is_running();
        if running && self.should_end() {
            self.stop()?;
        }
        let wait = match self.deadline {
            Some(d) if running => d.saturating_duration_since(Instant::now()).min(TICK),
            _ => TICK,
        };
        match lock(&self.batches).recv_timeout(wait) {
            Ok(batch) => Ok(Poll::Batch(batch)),
            Err(RecvTimeoutError::Timeout) => Ok(Poll::Waiting),
            Err(RecvTimeoutError::Disconnected) => {
                // Everything was sent: join the query thread for its error, if any.
                self.stop()?;
                Ok(Poll::End)
            }
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        // Detach first (RunningQuery's drop), then let the command run on:
        // dropping it waits for its exit, which a thread does for us.
        lock(&self.running).take();
        if let Some(c) = lock(&self.command).take() {
            std::thread::spawn(move || drop(c));
        }
    }
}
