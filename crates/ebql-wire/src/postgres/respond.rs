//! The server's responses matched to the requests awaiting them, oldest
//! first (PostgreSQL documentation, 55.2 "Message Flow"): which response
//! answers which request, which completes a statement and makes its row.

use std::sync::Arc;

use super::backend;
use super::message::Message;
use super::session::{Desync, Pending, Session};
use super::table::Prepared;
use crate::{Counters, Kind, Statement, StatementError};

impl Session {
    /// The next response byte is the one-byte answer to an SSLRequest or
    /// GSSENCRequest.
    pub fn awaits_handshake(&self) -> bool {
        matches!(self.pending.front(), Some(Pending::Handshake))
    }

    /// The one-byte answer: `Ok(true)` when encryption follows (`S`, `G`),
    /// `Ok(false)` when refused (`N`).
    pub fn handshake(&mut self, answer: u8) -> Result<bool, Desync> {
        self.pop();
        match answer {
            b'S' | b'G' => Ok(true),
            b'N' => Ok(false),
            _ => Err(Desync),
        }
    }

    /// A response the server wrote, in the chunk at `time_ns`.
    /// `mid_request`: the client's current message is not all read yet (the
    /// server answers none before it is).
    pub fn response(
        &mut self,
        m: &Message<'_>,
        time_ns: u64,
        mid_request: bool,
        counters: &mut Counters,
        out: &mut Vec<Statement>,
    ) -> Result<(), Desync> {
        let typ = m.typ;
        // ParameterStatus, NoticeResponse, NotificationResponse may come
        // at any time (55.2.7 "Asynchronous Operations").
        if matches!(typ, b'S' | b'N' | b'A') {
            return Ok(());
        }
        while matches!(self.pending.front(), Some(Pending::CopyEnd)) {
            self.pop();
        }
        if typ == b'E' {
            return self.error(m, time_ns, mid_request, counters, out);
        }
        let Some(front) = self.pending.front_mut() else {
            return self.unmatched(mid_request, counters);
        };
        match front {
            Pending::Handshake | Pending::CopyEnd => return Err(Desync),
            Pending::Startup => match typ {
                b'R' | b'K' | b'v' => {}
                b'Z' => self.ready(m, time_ns, out)?,
                _ => return Err(Desync),
            },
            Pending::Query(q) => match typ {
                b'T' | b'D' | b'H' | b'W' | b'd' | b'c' | b'I' => {}
                b'G' => self.copy_starts(),
                b'C' => {
                    if q.error.is_none() {
                        match backend::tag(m.body) {
                            Some((tag, rows)) => {
                                q.tag = Some(tag);
                                if let Some(n) = rows {
                                    q.rows = Some(q.rows.unwrap_or(0).saturating_add(n));
                                }
                            }
                            None => {
                                q.tag = None;
                                q.rows_lost = true;
                            }
                        }
                    }
                }
                b'Z' => self.ready(m, time_ns, out)?,
                _ => return Err(Desync),
            },
            Pending::FunctionCall => match typ {
                b'V' => {}
                b'Z' => self.ready(m, time_ns, out)?,
                _ => return Err(Desync),
            },
            Pending::Sync => match typ {
                b'Z' => self.ready(m, time_ns, out)?,
                _ => return Err(Desync),
            },
            Pending::Parse { .. } => match typ {
                b'1' => {
                    if let Some(Pending::Parse { stmt, .. }) = self.pop() {
                        self.statements.insert(&stmt.key, Arc::clone(&stmt));
                    }
                }
                _ => return Err(Desync),
            },
            Pending::Bind { .. } => match typ {
                b'2' => {
                    if let Some(Pending::Bind { portal, stmt, .. }) = self.pop() {
                        let stmt = self.statement(stmt);
                        self.portals.insert(&portal, stmt);
                    }
                }
                _ => return Err(Desync),
            },
            Pending::Describe => match typ {
                b't' => {}
                b'T' | b'n' => {
                    self.pop();
                }
                _ => return Err(Desync),
            },
            Pending::Close { .. } => match typ {
                b'3' => {
                    if let Some(Pending::Close { portal, name }) = self.pop() {
                        if portal {
                            self.portals.remove(&name);
                        } else {
                            self.statements.remove(&name);
                        }
                    }
                }
                _ => return Err(Desync),
            },
            Pending::Execute { datarows, .. } => match typ {
                b'D' => *datarows += 1,
                b'G' => self.copy_starts(),
                b'H' | b'W' | b'd' | b'c' => {}
                b'C' | b'I' | b's' => {
                    let (tag, rows) = match typ {
                        b'C' => match backend::tag(m.body) {
                            Some((tag, rows)) => (Some(tag), rows),
                            None => (None, None),
                        },
                        b's' => (None, Some(*datarows)),
                        _ => (None, None),
                    };
                    self.finish_execute(time_ns, tag, rows, None, out, counters);
                }
                _ => return Err(Desync),
            },
        }
        Ok(())
    }

    /// The Execute in front of the queue answered (its CommandComplete,
    /// EmptyQueryResponse, PortalSuspended or ErrorResponse at `time_ns`):
    /// its row, with the text of the statement its portal binds.
    fn finish_execute(
        &mut self,
        time_ns: u64,
        tag: Option<String>,
        rows: Option<u64>,
        error: Option<StatementError>,
        out: &mut Vec<Statement>,
        counters: &mut Counters,
    ) {
        if let Some(Pending::Execute {
            start_ns, portal, ..
        }) = self.pop()
        {
            let stmt = self.portals.get(&portal);
            out.push(self.row(
                start_ns,
                time_ns,
                Kind::Prepared,
                stmt.as_deref(),
                tag,
                rows,
                error,
                counters,
            ));
        }
    }

    /// A response when no request waits: requests read before the capture
    /// or lost with the framing. While a request is still being read, the
    /// decoder's framing of the reads must be wrong (a resynchronization
    /// on bytes inside a message): lost.
    fn unmatched(&mut self, mid_request: bool, counters: &mut Counters) -> Result<(), Desync> {
        if mid_request {
            return Err(Desync);
        }
        counters.responses_unmatched += 1;
        Ok(())
    }

    /// The statement of that name, or one of unknown text.
    fn statement(&mut self, name: Box<[u8]>) -> Arc<Prepared> {
        self.statements.get(&name).unwrap_or_else(|| {
            Arc::new(Prepared {
                key: name,
                text: None,
                truncated: false,
            })
        })
    }

    /// ReadyForQuery: ends the Query, Sync, FunctionCall or startup in front.
    fn ready(
        &mut self,
        m: &Message<'_>,
        time_ns: u64,
        out: &mut Vec<Statement>,
    ) -> Result<(), Desync> {
        let status = backend::ready_status(m.body).map_err(|()| Desync)?;
        if let Some(Pending::Query(q)) = self.pop() {
            out.push(self.query_row(*q, time_ns));
        }
        if status == Some(b'I') {
            // No transaction is open: every portal was dropped at its end.
            self.portals.clear();
        }
        Ok(())
    }

    /// CopyInResponse: a COPY FROM STDIN began. The server ignores the
    /// Syncs read up to the client's CopyDone or CopyFail.
    fn copy_starts(&mut self) {
        let mut i = 1;
        while i < self.pending.len() {
            match self.pending[i] {
                Pending::CopyEnd => {
                    self.pending.remove(i);
                    return;
                }
                Pending::Sync => {
                    self.pending.remove(i);
                }
                _ => i += 1,
            }
        }
        self.copy_in = true;
    }

    /// ErrorResponse: fails the request in front. In the extended
    /// protocol, the server then skips every request up to the next Sync
    /// (55.2.3): they get no response and make no row.
    fn error(
        &mut self,
        m: &Message<'_>,
        time_ns: u64,
        mid_request: bool,
        counters: &mut Counters,
        out: &mut Vec<Statement>,
    ) -> Result<(), Desync> {
        let (error, fatal) = backend::error(m.body);
        let Some(front) = self.pending.front_mut() else {
            // A FATAL error on an idle connection (the server is shutting
            // it down) answers no request.
            if fatal {
                return Ok(());
            }
            return self.unmatched(mid_request, counters);
        };
        // An error ends a COPY FROM STDIN: later CopyData are dropped.
        self.copy_in = false;
        let mut skip = true;
        match front {
            Pending::Handshake | Pending::CopyEnd => return Err(Desync),
            Pending::Query(q) => {
                q.error = Some(error);
                q.tag = None;
                q.rows = None;
                skip = false;
                if fatal {
                    if let Some(Pending::Query(q)) = self.pop() {
                        out.push(self.query_row(*q, time_ns));
                    }
                }
            }
            // The function's error, or the commit's at Sync: no row, and
            // ReadyForQuery follows. A failed authentication: the server
            // closes the connection.
            Pending::FunctionCall | Pending::Sync | Pending::Startup => {
                skip = false;
                if fatal || matches!(front, Pending::Startup) {
                    self.pop();
                }
            }
            Pending::Parse { .. } => {
                if let Some(Pending::Parse { start_ns, stmt }) = self.pop() {
                    let kind = Kind::PrepareFailed;
                    out.push(self.row(
                        start_ns,
                        time_ns,
                        kind,
                        Some(&stmt),
                        None,
                        None,
                        Some(error),
                        counters,
                    ));
                }
            }
            Pending::Bind { .. } => {
                if let Some(Pending::Bind { start_ns, stmt, .. }) = self.pop() {
                    let stmt = self.statement(stmt);
                    let kind = Kind::PrepareFailed;
                    out.push(self.row(
                        start_ns,
                        time_ns,
                        kind,
                        Some(&stmt),
                        None,
                        None,
                        Some(error),
                        counters,
                    ));
                }
            }
            Pending::Execute { .. } => {
                self.finish_execute(time_ns, None, None, Some(error), out, counters);
            }
            Pending::Describe | Pending::Close { .. } => {
                self.pop();
            }
        }
        if fatal {
            // The server closes the connection: nothing else will answer.
            self.drop_pending(counters);
        } else if skip {
            while let Some(p) = self.pending.front() {
                if matches!(p, Pending::Sync) {
                    return Ok(());
                }
                self.pop();
            }
            self.discard = true;
        }
        Ok(())
    }
}
