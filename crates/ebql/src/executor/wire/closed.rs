//! Connections whose socket the server closed, closed in the decoder.
//!
//! The capture hooks the server's socket reads and writes, never a close,
//! so a decoder's connection would outlive its socket: PostgreSQL runs a
//! process per connection, and every connection's state stayed for the
//! whole run (memory growing with connection churn); a request whose
//! response was never written (its client gone mid-statement, the
//! server's write failing) was dropped without a count. A connection whose
//! descriptor is no longer open in its process (`/proc/<pid>/fd/<fd>`
//! missing: closed, or the process exited) is closed, its pending requests
//! counted as `unfinished` ([`ebql_wire::Decoder::close`]). The pids are
//! the initial pid namespace's, which BPF reports and eBQL runs in.
//!
//! A connection is closed when found closed at two checks in a row, so
//! that every call made on it before it was closed has been fed (calls
//! wait in the ring buffer, or in their window, before they are fed; a
//! connection closed before its last response is fed would count that
//! response unmatched). A descriptor reused between the checks by a new
//! connection is open at the second and stays; the decoder starts that
//! connection afresh at its startup or handshake. At the end of the run
//! every call has been fed, and closed descriptors are closed at once.

use ebql_wire::{ConnKey, Decoder};
use std::io::ErrorKind;
use std::time::{Duration, Instant};

/// How often the decoder's connections are checked: an `lstat` of
/// `/proc/<pid>/fd/<fd>` per connection.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// Which of a decoder's connections were closed, checked after feeds.
#[derive(Debug, Default)]
pub(super) struct ClosedConns {
    /// When the connections were last checked.
    checked: Option<Instant>,
    /// Connections found closed at that check, sorted: closed at the next
    /// one if still closed.
    closed: Vec<ConnKey>,
}

impl ClosedConns {
    /// After a feed, at most every [`CHECK_EVERY`]: closes in `decoder` the
    /// connections found closed at this check and the previous one (every
    /// call made on them has been fed since), and notes those closed now.
    pub(super) fn after_feed(&mut self, decoder: &mut dyn Decoder, now: Instant) {
        if self
            .checked
            .is_some_and(|t| now.duration_since(t) < CHECK_EVERY)
        {
            return;
        }
        self.checked = Some(now);
        let before = std::mem::take(&mut self.closed);
        for conn in closed(decoder) {
            if before.binary_search(&conn).is_ok() {
                decoder.close(conn);
            } else {
                self.closed.push(conn);
            }
        }
    }

    /// At the end of the run, every call fed: closes every connection
    /// whose descriptor is closed.
    pub(super) fn at_end(&mut self, decoder: &mut dyn Decoder) {
        self.closed.clear();
        for conn in closed(decoder) {
            decoder.close(conn);
        }
    }
}

/// `decoder`'s connections whose descriptor is closed, sorted.
fn closed(decoder: &dyn Decoder) -> Vec<ConnKey> {
    let mut conns = decoder.connections();
    conns.retain(|&c| !open(c));
    conns.sort_unstable();
    conns
}

/// Whether `conn`'s descriptor is open in its process (proc(5):
/// `/proc/<pid>/fd/<fd>`; a zombie's descriptors are closed). Only a
/// missing entry counts as closed: where /proc cannot be read (no
/// permission), every connection stays open, as before.
fn open(conn: ConnKey) -> bool {
    let path = format!("/proc/{}/fd/{}", conn.pid, conn.fd);
    !matches!(std::fs::symlink_metadata(path), Err(e) if e.kind() == ErrorKind::NotFound)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ebql_wire::postgres::PgDecoder;
    use ebql_wire::{Chunk, Direction};
    use std::os::fd::AsRawFd;

    /// Feeds `bytes` read by the server on `conn`.
    fn read(d: &mut PgDecoder, conn: ConnKey, bytes: &[u8]) {
        let chunk = Chunk {
            conn,
            dir: Direction::Read,
            time_ns: 1,
            len: bytes.len() as u64,
            data: bytes,
            tail: b"",
        };
        d.feed(&chunk, &mut Vec::new());
    }

    /// A simple Query, its response not written.
    fn query() -> Vec<u8> {
        let mut q = vec![b'Q'];
        q.extend_from_slice(&13u32.to_be_bytes());
        q.extend_from_slice(b"SELECT 1\0");
        q
    }

    /// A child that exited (reaped): its pid.
    fn exited_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    #[test]
    fn an_open_descriptor_is_open_and_an_exited_processs_is_not() {
        let f = std::fs::File::open("/proc/self/stat").unwrap();
        let fd = f.as_raw_fd();
        let pid = std::process::id();
        assert!(open(ConnKey { pid, fd }));
        assert!(!open(ConnKey {
            pid: exited_pid(),
            fd
        }));
    }

    /// A closed connection is closed after two checks that found it
    /// closed; an open one stays, and so does any before a check is due.
    #[test]
    fn a_closed_connection_closes_at_its_second_check() {
        let f = std::fs::File::open("/proc/self/stat").unwrap();
        let live = ConnKey {
            pid: std::process::id(),
            fd: f.as_raw_fd(),
        };
        let gone = ConnKey {
            pid: exited_pid(),
            fd: 5,
        };
        let mut d = PgDecoder::new();
        for conn in [gone, live] {
            read(&mut d, conn, &query());
        }
        let mut closed_conns = ClosedConns::default();
        let t0 = Instant::now();
        closed_conns.after_feed(&mut d, t0);
        assert_eq!(d.connections().len(), 2, "found closed, not yet closed");
        closed_conns.after_feed(&mut d, t0 + CHECK_EVERY / 2);
        assert_eq!(d.connections().len(), 2, "no check due");
        closed_conns.after_feed(&mut d, t0 + CHECK_EVERY);
        assert_eq!(d.connections(), vec![live]);
        closed_conns.at_end(&mut d);
        assert_eq!(d.connections(), vec![live], "an open one stays");
    }

    /// At the end, a closed connection closes at once, and its request
    /// awaiting a response counts as unfinished.
    #[test]
    fn at_the_end_a_closed_connections_requests_count_unfinished() {
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
        let mut d = PgDecoder::new();
        read(&mut d, conn, &startup);
        read(&mut d, conn, &query());
        ClosedConns::default().at_end(&mut d);
        assert!(d.connections().is_empty());
        assert_eq!(d.counters().unfinished, 1);
    }
}
