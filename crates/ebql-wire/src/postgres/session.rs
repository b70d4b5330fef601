//! One connection's protocol state above the framing: who logged in, the
//! requests awaiting their responses (in order), the prepared statements
//! and portals. This file takes the requests; `respond.rs` the responses.

use std::collections::VecDeque;
use std::sync::Arc;

use super::frontend::{self, Request, Startup};
use super::limits::{
    MAX_PENDING, MAX_PENDING_BYTES, MAX_PORTALS, MAX_STATEMENTS, MAX_STATEMENT_BYTES,
};
use super::message::Message;
use super::table::{Prepared, Table};
use crate::{ConnKey, Counters, Kind, Statement, StatementError};

/// The framing is wrong (a message the protocol does not allow there):
/// the connection must be resynchronized.
#[derive(Debug)]
pub(super) struct Desync;

/// A simple Query awaiting its ReadyForQuery.
#[derive(Debug)]
pub(super) struct Query {
    pub start_ns: u64,
    pub text: Vec<u8>,
    pub truncated: bool,
    pub tag: Option<String>,
    pub rows: Option<u64>,
    /// A CommandComplete's tag was not captured whole: the sum is unknown.
    pub rows_lost: bool,
    pub error: Option<StatementError>,
}

/// A request awaiting its response, or a mark in the request stream.
#[derive(Debug)]
pub(super) enum Pending {
    /// SSLRequest or GSSENCRequest: a one-byte answer.
    Handshake,
    /// StartupMessage: authentication, parameters, key data, up to ReadyForQuery.
    Startup,
    /// Query: up to ReadyForQuery.
    Query(Box<Query>),
    /// FunctionCall: FunctionCallResponse, up to ReadyForQuery; no row.
    FunctionCall,
    /// Parse: ParseComplete, or an error (a `PrepareFailed` row).
    Parse { start_ns: u64, stmt: Arc<Prepared> },
    /// Bind: BindComplete, or an error (a `PrepareFailed` row).
    Bind {
        start_ns: u64,
        portal: Box<[u8]>,
        stmt: Box<[u8]>,
    },
    /// Describe: RowDescription or NoData (after a ParameterDescription).
    Describe,
    /// Execute: DataRows, then CommandComplete, EmptyQueryResponse,
    /// PortalSuspended or an error (a `Prepared` row).
    Execute {
        start_ns: u64,
        portal: Box<[u8]>,
        datarows: u64,
    },
    /// Close: CloseComplete.
    Close { portal: bool, name: Box<[u8]> },
    /// Sync: ReadyForQuery.
    Sync,
    /// Not a request: the client's CopyDone or CopyFail, which ends a
    /// COPY FROM STDIN (Syncs read before it are ignored by the server).
    CopyEnd,
}

impl Pending {
    /// Counted in [`Counters::unfinished`] when dropped unanswered.
    fn counts(&self) -> bool {
        !matches!(
            self,
            Pending::Handshake | Pending::Startup | Pending::CopyEnd
        )
    }
}

/// What a request did to the connection.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Flow {
    /// Carry on.
    Continue,
    /// A startup packet began a new connection on this key: the response
    /// direction starts afresh.
    Restarted,
}

/// One connection's state above the framing.
#[derive(Debug)]
pub(super) struct Session {
    pub conn: ConnKey,
    pub pending: VecDeque<Pending>,
    /// Text bytes held by `pending`.
    pub pending_bytes: usize,
    pub statements: Table,
    pub portals: Table,
    pub user: Option<String>,
    pub database: Option<String>,
    /// A StartupMessage began the session (or the decoder synchronized
    /// mid-stream): a further startup packet begins a new one.
    pub started: bool,
    /// The server skips every request up to the next Sync (an error in the
    /// extended protocol answered a request that no queued Sync follows).
    pub discard: bool,
    /// A COPY FROM STDIN runs and no CopyDone/CopyFail was read yet: the
    /// server ignores Sync and Flush.
    pub copy_in: bool,
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

impl Session {
    /// A connection not yet started.
    pub fn new(conn: ConnKey) -> Self {
        Session {
            conn,
            pending: VecDeque::new(),
            pending_bytes: 0,
            statements: Table::new(MAX_STATEMENTS, MAX_STATEMENT_BYTES),
            portals: Table::new(MAX_PORTALS, MAX_STATEMENT_BYTES),
            user: None,
            database: None,
            started: false,
            discard: false,
            copy_in: false,
        }
    }

    /// Drops the requests awaiting responses, counting them unfinished.
    pub fn drop_pending(&mut self, counters: &mut Counters) {
        counters.unfinished += self.pending.iter().filter(|p| p.counts()).count() as u64;
        self.pending.clear();
        self.pending_bytes = 0;
        self.discard = false;
        self.copy_in = false;
    }

    /// The framing was lost: pending requests are dropped, and what may
    /// have changed unseen is forgotten (the unnamed statement, replaced by
    /// any Parse; the portals, dropped at each transaction's end). Named
    /// statements are kept: the server refuses to reuse a name before a
    /// Close.
    pub fn desync(&mut self, counters: &mut Counters) {
        self.drop_pending(counters);
        self.statements.remove(b"");
        self.portals.clear();
    }

    /// No request awaits a response (marks aside).
    pub fn idle(&self) -> bool {
        self.pending.iter().all(|p| matches!(p, Pending::CopyEnd))
    }

    /// The reads are framed again after a loss, every request read before
    /// answered: what the lost requests did is unknown (a COPY or a skip
    /// to Sync they ended, the unnamed statement they replaced, the portals
    /// they bound).
    pub fn reads_resynced(&mut self) {
        self.pending.clear();
        self.copy_in = false;
        self.discard = false;
        self.statements.remove(b"");
        self.portals.clear();
    }

    /// Everything forgotten: a new connection on this key.
    fn restart(&mut self, counters: &mut Counters) {
        self.drop_pending(counters);
        *self = Session::new(self.conn);
    }

    /// Queues a request.
    fn push(&mut self, p: Pending, text: usize) -> Result<(), Desync> {
        if self.pending.len() >= MAX_PENDING || self.pending_bytes + text > MAX_PENDING_BYTES {
            return Err(Desync);
        }
        self.pending_bytes += text;
        self.pending.push_back(p);
        Ok(())
    }

    /// Pops the oldest request.
    pub fn pop(&mut self) -> Option<Pending> {
        let p = self.pending.pop_front()?;
        self.pending_bytes -= match &p {
            Pending::Query(q) => q.text.len(),
            Pending::Parse { stmt, .. } => stmt.text.as_ref().map_or(0, |t| t.len()),
            _ => 0,
        };
        Some(p)
    }

    /// A request the server read, completed by the chunk at `time_ns`.
    pub fn request(
        &mut self,
        m: &Message<'_>,
        time_ns: u64,
        counters: &mut Counters,
    ) -> Result<Flow, Desync> {
        let req = frontend::parse(m);
        if let Request::Startup(s) = req {
            let s = s.ok_or(Desync)?;
            let flow = if self.started {
                self.restart(counters);
                Flow::Restarted
            } else {
                Flow::Continue
            };
            match s {
                Startup::Ssl | Startup::Gss => self.push(Pending::Handshake, 0)?,
                Startup::Cancel => {}
                Startup::Session {
                    user,
                    database,
                    whole,
                } => {
                    self.user = user.map(lossy);
                    // "database: defaults to the user name" (55.7,
                    // StartupMessage), when the packet did not name one:
                    // a cut packet's database is unknown (NULL).
                    self.database = database.or(user.filter(|_| whole)).map(lossy);
                    self.started = true;
                    self.push(Pending::Startup, 0)?;
                }
            }
            return Ok(flow);
        }
        if self.copy_in {
            // COPY FROM STDIN (55.2.6): the server reads CopyData up to a
            // CopyDone or CopyFail, and ignores Sync and Flush. Any other
            // message fails the COPY (the ErrorResponse will tell) and is
            // consumed by it.
            match m.typ {
                b'd' | b'S' | b'H' => {}
                _ => self.copy_in = false,
            }
            return Ok(Flow::Continue);
        }
        if self.discard {
            if req == Request::Sync {
                self.discard = false;
                self.push(Pending::Sync, 0)?;
            }
            return Ok(Flow::Continue);
        }
        match req {
            // Handled above.
            Request::Startup(_) => {}
            Request::Query { text, truncated } => {
                let q = Query {
                    start_ns: time_ns,
                    text: text.to_vec(),
                    truncated,
                    tag: None,
                    rows: None,
                    rows_lost: false,
                    error: None,
                };
                self.push(Pending::Query(Box::new(q)), text.len())?;
            }
            Request::Parse {
                name,
                text,
                truncated,
            } => {
                let stmt = Arc::new(Prepared {
                    key: name.into(),
                    text: Some(text.into()),
                    truncated,
                });
                self.push(
                    Pending::Parse {
                        start_ns: time_ns,
                        stmt,
                    },
                    text.len(),
                )?;
            }
            Request::Bind { portal, stmt } => {
                let p = Pending::Bind {
                    start_ns: time_ns,
                    portal: portal.into(),
                    stmt: stmt.into(),
                };
                self.push(p, 0)?;
            }
            Request::Describe => self.push(Pending::Describe, 0)?,
            Request::Execute { portal } => {
                let p = Pending::Execute {
                    start_ns: time_ns,
                    portal: portal.into(),
                    datarows: 0,
                };
                self.push(p, 0)?;
            }
            Request::Close { portal, name } => {
                self.push(
                    Pending::Close {
                        portal,
                        name: name.into(),
                    },
                    0,
                )?;
            }
            Request::Sync => self.push(Pending::Sync, 0)?,
            Request::FunctionCall => self.push(Pending::FunctionCall, 0)?,
            Request::Other => {
                if matches!(m.typ, b'c' | b'f') && !self.pending.is_empty() {
                    self.push(Pending::CopyEnd, 0)?;
                }
            }
        }
        Ok(Flow::Continue)
    }

    /// A row of this connection.
    #[allow(clippy::too_many_arguments)]
    pub fn row(
        &self,
        start_ns: u64,
        end_ns: u64,
        kind: Kind,
        stmt: Option<&Prepared>,
        tag: Option<String>,
        rows: Option<u64>,
        error: Option<StatementError>,
        counters: &mut Counters,
    ) -> Statement {
        let text = stmt.and_then(|s| s.text.as_deref()).map(<[u8]>::to_vec);
        if text.is_none() {
            counters.unknown_prepared += 1;
        }
        Statement {
            conn: self.conn,
            start_ns,
            end_ns,
            kind,
            text,
            text_truncated: stmt.is_some_and(|s| s.truncated),
            name: stmt.and_then(Prepared::name),
            tag,
            rows,
            error,
            user: self.user.clone(),
            database: self.database.clone(),
        }
    }

    /// A simple Query's row.
    pub fn query_row(&self, q: Query, end_ns: u64) -> Statement {
        Statement {
            conn: self.conn,
            start_ns: q.start_ns,
            end_ns,
            kind: Kind::Simple,
            text: Some(q.text),
            text_truncated: q.truncated,
            name: None,
            tag: q.tag,
            rows: q.rows.filter(|_| !q.rows_lost),
            error: q.error,
            user: self.user.clone(),
            database: self.database.clone(),
        }
    }
}
