//! Connections of server processes that exited, closed in the decoder.
//!
//! The capture hooks the server's socket reads and writes, never a close,
//! so a decoder's connection would outlive its socket. PostgreSQL runs a
//! process per connection: without this, every connection's state stayed
//! for the whole run (memory growing with connection churn), and a request
//! whose response was never written (its client gone mid-statement, the
//! server's write failing) was dropped without a count. A connection
//! whose process exited is closed: its pending requests count as
//! `unfinished` ([`ebql_wire::Decoder::close`]).
//!
//! A process is closed one check after it was found exited, so that
//! every call it made before it exited has been fed: calls wait in the
//! ring buffer (or in their window) for a while before they are fed, and
//! a connection closed before its last response is fed would count that
//! response unmatched. At the end of the run every call has been fed, and
//! the exited processes are closed at once. A thread-per-connection server
//! (MariaDB) reuses a closed socket's descriptor, and the decoder starts a
//! connection afresh at its handshake.

use ebql_wire::Decoder;
use std::time::{Duration, Instant};

/// How often the decoder's processes are checked: a read of
/// `/proc/<pid>/stat` per process.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// Which of a decoder's processes exited, checked after feeds.
#[derive(Debug, Default)]
pub(super) struct Exits {
    /// When the processes were last checked.
    checked: Option<Instant>,
    /// Processes found exited at that check, closed at the next one.
    exited: Vec<u32>,
}

impl Exits {
    /// After a feed, at most every [`CHECK_EVERY`]: closes in `decoder` the
    /// connections of processes found exited at the previous check (every
    /// call they made has been fed since), and notes those exited now.
    pub(super) fn after_feed(&mut self, decoder: &mut dyn Decoder, now: Instant) {
        if self
            .checked
            .is_some_and(|t| now.duration_since(t) < CHECK_EVERY)
        {
            return;
        }
        self.checked = Some(now);
        let due = std::mem::take(&mut self.exited);
        close_conns_of(decoder, &due);
        self.exited = exited(decoder);
    }

    /// At the end of the run, every call fed: closes the connections of
    /// every process that exited.
    pub(super) fn at_end(&mut self, decoder: &mut dyn Decoder) {
        self.exited.clear();
        let gone = exited(decoder);
        close_conns_of(decoder, &gone);
    }
}

/// The processes of `decoder`'s connections that exited, sorted.
fn exited(decoder: &dyn Decoder) -> Vec<u32> {
    let mut pids: Vec<u32> = decoder.connections().iter().map(|c| c.pid).collect();
    pids.sort_unstable();
    pids.dedup();
    pids.retain(|&pid| !running(pid));
    pids
}

/// Closes `decoder`'s connections of the processes `pids` (sorted).
fn close_conns_of(decoder: &mut dyn Decoder, pids: &[u32]) {
    if pids.is_empty() {
        return;
    }
    for conn in decoder.connections() {
        if pids.binary_search(&conn.pid).is_ok() {
            decoder.close(conn);
        }
    }
}

/// Whether process `pid` is running: a zombie has closed its sockets
/// (proc(5): `/proc/<pid>/stat`, the state after the command's `)`).
fn running(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    !matches!(state, Some('Z' | 'X') | None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ebql_wire::postgres::PgDecoder;
    use ebql_wire::{Chunk, ConnKey, Direction};

    /// A simple Query on `conn`, its response not written.
    fn request(d: &mut PgDecoder, conn: ConnKey) {
        let mut q = vec![b'Q'];
        q.extend_from_slice(&13u32.to_be_bytes());
        q.extend_from_slice(b"SELECT 1\0");
        let chunk = Chunk {
            conn,
            dir: Direction::Read,
            time_ns: 1,
            len: q.len() as u64,
            data: &q,
            tail: b"",
        };
        d.feed(&chunk, &mut Vec::new());
    }

    /// A child that exited (reaped): its pid.
    fn exited_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    #[test]
    fn a_running_process_is_running_and_a_reaped_one_is_not() {
        assert!(running(std::process::id()));
        assert!(!running(exited_pid()));
    }

    /// An exited process's connection is closed one check after it was
    /// found exited (its pending request then counts as unfinished); a
    /// running process's stays, and so does any before a check is due.
    #[test]
    fn an_exited_processs_connections_close_one_check_later() {
        let mut d = PgDecoder::new();
        let (gone, live) = (
            ConnKey {
                pid: exited_pid(),
                fd: 5,
            },
            ConnKey {
                pid: std::process::id(),
                fd: 6,
            },
        );
        // A connection opened before the capture: the decoder waits for its framing.
        for conn in [gone, live] {
            request(&mut d, conn);
        }
        let mut exits = Exits::default();
        let t0 = Instant::now();
        exits.after_feed(&mut d, t0);
        assert_eq!(d.connections().len(), 2, "found exited, not yet closed");
        exits.after_feed(&mut d, t0 + CHECK_EVERY / 2);
        assert_eq!(d.connections().len(), 2, "no check due");
        exits.after_feed(&mut d, t0 + CHECK_EVERY);
        assert_eq!(d.connections(), vec![live]);
        exits.at_end(&mut d);
        assert_eq!(d.connections(), vec![live], "a running process's stays");
    }

    /// At the end, an exited process's connection closes at once, and its
    /// request awaiting a response counts as unfinished.
    #[test]
    fn at_the_end_an_exited_processs_requests_count_unfinished() {
        let mut d = PgDecoder::new();
        let conn = ConnKey {
            pid: exited_pid(),
            fd: 5,
        };
        // A startup, then a query: the connection's framing is known.
        let mut startup = 0u32.to_be_bytes().to_vec();
        startup.extend_from_slice(&196608u32.to_be_bytes());
        startup.extend_from_slice(b"user\0u\0\0");
        let n = startup.len() as u32;
        startup[..4].copy_from_slice(&n.to_be_bytes());
        let chunk = Chunk {
            conn,
            dir: Direction::Read,
            time_ns: 0,
            len: startup.len() as u64,
            data: &startup,
            tail: b"",
        };
        d.feed(&chunk, &mut Vec::new());
        request(&mut d, conn);
        Exits::default().at_end(&mut d);
        assert!(d.connections().is_empty());
        assert_eq!(d.counters().unfinished, 1);
    }
}
