//! A command waiting for its response, and the state machines that follow
//! the response's packets to its end (MySQL documentation, "Command Phase":
//! COM_QUERY Response, COM_STMT_PREPARE Response, COM_STMT_EXECUTE
//! Response; "Generic Response Packets": OK, ERR, EOF).

use super::framer::Packet;
use super::wire::{
    self, err_packet, lenenc, ok_packet, terminator_status, u16_at, u32_at, CLIENT_DEPRECATE_EOF,
    MAX_PACKET, SERVER_MORE_RESULTS_EXISTS, SERVER_STATUS_CURSOR_EXISTS,
};
use crate::StatementError;

/// What the command asked, as far as the statement row needs it.
#[derive(Debug)]
pub(super) enum Request {
    /// COM_QUERY.
    Query { text: Vec<u8>, truncated: bool },
    /// COM_STMT_PREPARE.
    Prepare { text: Vec<u8>, truncated: bool },
    /// COM_STMT_EXECUTE or MariaDB's COM_STMT_BULK_EXECUTE: the
    /// statement id, when captured.
    Execute { id: Option<u32> },
    /// COM_INIT_DB: the database it switches to.
    InitDb { name: Option<String> },
    /// COM_CHANGE_USER: who and where the connection becomes.
    ChangeUser {
        user: Option<String>,
        database: Option<String>,
    },
    /// COM_RESET_CONNECTION: prepared statements are gone afterwards.
    ResetConnection,
    /// Any other command: its response is followed, no row.
    Other,
}

/// How the response to a command is shaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// OK, ERR, or result sets, possibly several (COM_QUERY, COM_STMT_EXECUTE).
    Results(Res),
    /// COM_STMT_PREPARE_OK and its definitions, or ERR.
    Prepare(Prep),
    /// One packet, whatever it is (OK, ERR, EOF, COM_STATISTICS' string).
    Single,
    /// Packets up to a 0xfe terminator or an ERR (COM_FIELD_LIST,
    /// COM_STMT_FETCH, COM_BINLOG_DUMP).
    UntilEnd,
    /// Authentication exchanges up to OK or ERR (COM_CHANGE_USER).
    Auth,
}

/// Where a result is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Res {
    /// Its first packet: OK, ERR, LOCAL INFILE request or column count.
    Start,
    /// Column definitions left.
    Columns(u64),
    /// After the column definitions: the EOF ending them, or rows.
    MetaEnd,
    /// Rows, up to the terminator.
    Rows,
    /// The client sends a file (LOCAL INFILE), up to an empty packet.
    Infile,
}

/// Where a prepare response is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Prep {
    Start,
    /// Parameter definitions left, then the columns'.
    Params {
        left: u16,
        cols: u16,
    },
    /// The EOF after the parameter definitions (when EOFs are sent).
    ParamsEof {
        cols: u16,
    },
    /// Column definitions left.
    Cols {
        left: u16,
    },
    /// The EOF after the last definitions.
    FinalEof,
}

/// What a packet did to the response.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// More packets belong to the response.
    More,
    /// The response is complete.
    Done,
    /// The packet cannot be part of this response: the framing is wrong.
    Invalid,
}

/// A command read, waiting for (the rest of) its response.
#[derive(Debug)]
pub(super) struct Pending {
    pub req: Request,
    /// When the server read the command's last byte.
    pub start_ns: u64,
    /// Sequence id the next packet of the exchange must carry.
    pub next_seq: u8,
    shape: Shape,
    /// Rows returned or affected, summed over the results.
    pub rows: u64,
    /// A result (OK or result set) was seen: `rows` means something.
    pub results: bool,
    /// COM_STMT_EXECUTE opened a cursor: rows come with COM_STMT_FETCH.
    pub cursor: bool,
    pub error: Option<StatementError>,
    /// The schema session tracking reported.
    pub schema: Option<String>,
    /// A COM_STMT_PREPARE_OK arrived: the statement's id.
    pub prepared: Option<u32>,
    /// The prepare's definitions are all there and the capabilities are
    /// unknown: an EOF may or may not follow. The response is complete;
    /// a 5-byte EOF with the next sequence id still belongs to it.
    pub tail: bool,
    /// Another command was still waiting when this one was read (pipelined
    /// commands, or a response lost): the server's writes may hold more
    /// than this command's response.
    pub overlapped: bool,
    /// Packets of the response were not captured ([`super::uncaptured`]):
    /// its rows were not counted.
    pub uncounted: bool,
}

impl Pending {
    /// A command that expects a response (`None` for COM_QUIT,
    /// COM_STMT_CLOSE, COM_STMT_SEND_LONG_DATA), read at `start_ns`, its
    /// last packet's sequence id `last_seq`.
    pub fn new(cmd: u8, req: Request, start_ns: u64, last_seq: u8) -> Option<Pending> {
        let shape = match cmd {
            wire::COM_QUIT | wire::COM_STMT_CLOSE | wire::COM_STMT_SEND_LONG_DATA => return None,
            wire::COM_QUERY
            | wire::COM_PROCESS_INFO
            | wire::COM_STMT_EXECUTE
            | wire::COM_STMT_BULK_EXECUTE => Shape::Results(Res::Start),
            wire::COM_STMT_PREPARE => Shape::Prepare(Prep::Start),
            wire::COM_FIELD_LIST
            | wire::COM_STMT_FETCH
            | wire::COM_BINLOG_DUMP
            | wire::COM_BINLOG_DUMP_GTID => Shape::UntilEnd,
            wire::COM_CHANGE_USER => Shape::Auth,
            _ => Shape::Single,
        };
        Some(Pending {
            req,
            start_ns,
            next_seq: last_seq.wrapping_add(1),
            shape,
            rows: 0,
            results: false,
            cursor: false,
            error: None,
            schema: None,
            prepared: None,
            tail: false,
            overlapped: false,
            uncounted: false,
        })
    }

    /// Inside a result set: its column count was seen, its end was not.
    pub fn in_result_set(&self) -> bool {
        matches!(
            self.shape,
            Shape::Results(Res::Columns(_) | Res::MetaEnd | Res::Rows)
        )
    }

    /// Inside a result set whose metadata may still be followed by the
    /// EOF ending it (definitions left, or that EOF not yet seen).
    pub fn before_rows(&self) -> bool {
        matches!(self.shape, Shape::Results(Res::Columns(_) | Res::MetaEnd))
    }

    /// The terminal packet `p` ends the packets of a result set that were
    /// not captured; `before_rows`: the metadata's EOF may be among them
    /// or be `p` itself (then `p` is taken as that EOF, as if every byte
    /// had been captured). The rows are not counted from here on.
    pub fn after_uncaptured(
        &mut self,
        p: &Packet<'_>,
        caps: Option<u64>,
        before_rows: bool,
    ) -> Step {
        self.uncounted = true;
        self.shape = Shape::Results(if before_rows { Res::MetaEnd } else { Res::Rows });
        self.on_server(p, caps)
    }

    /// The exchange waits for the client: LOCAL INFILE data, or an
    /// authentication reply during COM_CHANGE_USER.
    pub fn accepts_client(&self) -> bool {
        matches!(self.shape, Shape::Results(Res::Infile) | Shape::Auth)
    }

    /// A client packet of the exchange (its sequence id already checked).
    pub fn on_client(&mut self, p: &Packet<'_>) {
        if self.shape == Shape::Results(Res::Infile) && p.len == 0 {
            self.shape = Shape::Results(Res::Start); // the server's OK or ERR follows
        }
        self.next_seq = p.last_seq.wrapping_add(1);
    }

    /// A server packet of the response (its sequence id already checked).
    /// `caps`: the negotiated capabilities, when the handshake was seen.
    pub fn on_server(&mut self, p: &Packet<'_>, caps: Option<u64>) -> Step {
        self.next_seq = p.last_seq.wrapping_add(1);
        match self.shape {
            Shape::Results(r) => self.result(r, p, caps),
            Shape::Prepare(s) => self.prepare(s, p, caps),
            Shape::Single => match p.first() {
                Some(0xff) => self.error(p),
                Some(0x00) => {
                    self.ok(p, caps);
                    Step::Done
                }
                _ => Step::Done,
            },
            Shape::UntilEnd => match p.first() {
                Some(0xfe) if p.len < u64::from(MAX_PACKET) => Step::Done,
                Some(0xff) => self.error(p),
                Some(_) => Step::More,
                None if p.len == 0 => Step::More,
                None => Step::Invalid,
            },
            Shape::Auth => match p.first() {
                Some(0x00) => {
                    self.ok(p, caps);
                    Step::Done
                }
                Some(0xff) => self.error(p),
                _ => Step::More,
            },
        }
    }

    /// An ERR packet: the error (Done), or MariaDB's progress report (More).
    fn error(&mut self, p: &Packet<'_>) -> Step {
        match err_packet(p.head) {
            Some(e) => {
                self.error = Some(e);
                Step::Done
            }
            None => Step::More,
        }
    }

    /// An OK packet's affected rows, status and schema; `None` when its
    /// fields were not captured.
    fn ok(&mut self, p: &Packet<'_>, caps: Option<u64>) -> Option<u16> {
        let ok = ok_packet(p.head, caps, !p.truncated())?;
        if let Some(s) = ok.schema {
            self.schema = Some(wire::string(s));
        }
        self.rows = self.rows.saturating_add(ok.affected);
        self.results = true;
        Some(ok.status)
    }

    /// A result's end: another result follows or the response is done.
    fn end_result(&mut self, status: u16) -> Step {
        self.results = true;
        if status & SERVER_MORE_RESULTS_EXISTS != 0 {
            self.shape = Shape::Results(Res::Start);
            Step::More
        } else {
            Step::Done
        }
    }

    fn result(&mut self, r: Res, p: &Packet<'_>, caps: Option<u64>) -> Step {
        let first = p.first();
        if first.is_none() && !matches!(r, Res::Columns(_)) {
            return Step::Invalid; // cannot tell what the packet is
        }
        // 0xfe with a payload shorter than 0xffffff: EOF, or OK as a
        // terminator (a text row starting with 0xfe is at least that long).
        let end = first == Some(0xfe) && p.len < u64::from(MAX_PACKET);
        match r {
            Res::Start => match first {
                Some(0x00) => match self.ok(p, caps) {
                    Some(status) => self.end_result(status),
                    None => Step::Invalid,
                },
                Some(0xff) => self.error(p),
                Some(0xfb) if matches!(self.req, Request::Query { .. }) => {
                    self.shape = Shape::Results(Res::Infile);
                    Step::More
                }
                Some(0xfb..=0xfe) => Step::Invalid,
                _ => {
                    let mut at = 0;
                    let Some(n) = lenenc(p.head, &mut at).filter(|&n| n > 0) else {
                        return Step::Invalid;
                    };
                    // MariaDB's CACHE_METADATA, MySQL's OPTIONAL_RESULTSET_METADATA:
                    // one byte after the count, 0 when no definitions follow.
                    let skip_meta = p.len == at as u64 + 1 && p.head.get(at) == Some(&0);
                    self.results = true;
                    self.shape = Shape::Results(if skip_meta {
                        Res::MetaEnd
                    } else {
                        Res::Columns(n)
                    });
                    Step::More
                }
            },
            Res::Columns(left) => {
                self.shape = Shape::Results(if left <= 1 {
                    Res::MetaEnd
                } else {
                    Res::Columns(left - 1)
                });
                Step::More
            }
            Res::MetaEnd if end => {
                // Status not captured: whether a cursor was opened or
                // more results follow cannot be told.
                let Some(status) = terminator_status(p.head, p.len) else {
                    return Step::Invalid;
                };
                if status & SERVER_STATUS_CURSOR_EXISTS != 0
                    && matches!(self.req, Request::Execute { .. })
                {
                    self.cursor = true;
                    Step::Done
                } else if p.len < 7 {
                    // The EOF ending the definitions (5 bytes; an OK is at least 7).
                    self.shape = Shape::Results(Res::Rows);
                    Step::More
                } else {
                    self.end_result(status)
                }
            }
            Res::Rows if end => match terminator_status(p.head, p.len) {
                Some(status) => self.end_result(status),
                None => Step::Invalid,
            },
            Res::MetaEnd | Res::Rows => {
                if first == Some(0xff) {
                    return self.error(p);
                }
                self.rows = self.rows.saturating_add(1);
                self.shape = Shape::Results(Res::Rows);
                Step::More
            }
            Res::Infile => Step::Invalid,
        }
    }

    fn prepare(&mut self, s: Prep, p: &Packet<'_>, caps: Option<u64>) -> Step {
        // EOF packets after the definitions: sent, not sent, or unknown
        // (the handshake was not seen).
        let eofs = caps.map(|c| c & CLIENT_DEPRECATE_EOF == 0);
        let is_eof = p.first() == Some(0xfe) && p.len == 5;
        let next = match s {
            Prep::Start => {
                match p.first() {
                    Some(0xff) => return self.error(p),
                    Some(0x00) if p.len >= 9 => {}
                    _ => return Step::Invalid,
                }
                let (Some(id), Some(cols), Some(params)) =
                    (u32_at(p.head, 1), u16_at(p.head, 5), u16_at(p.head, 7))
                else {
                    return Step::Invalid;
                };
                self.prepared = Some(id);
                // MySQL's OPTIONAL_RESULTSET_METADATA: byte 12, 0 = no definitions.
                if p.len >= 13 && p.head.get(12) == Some(&0) {
                    return Step::Done;
                }
                first_block(params, cols)
            }
            Prep::Params { left, cols } => Some(if left > 1 {
                Prep::Params {
                    left: left - 1,
                    cols,
                }
            } else if cols > 0 {
                Prep::ParamsEof { cols }
            } else {
                Prep::FinalEof
            }),
            Prep::ParamsEof { cols } => {
                if is_eof {
                    Some(Prep::Cols { left: cols })
                } else if eofs == Some(true) {
                    return Step::Invalid;
                } else {
                    // No EOF after all: this is the first column definition.
                    Some(if cols > 1 {
                        Prep::Cols { left: cols - 1 }
                    } else {
                        Prep::FinalEof
                    })
                }
            }
            Prep::Cols { left } => Some(if left > 1 {
                Prep::Cols { left: left - 1 }
            } else {
                Prep::FinalEof
            }),
            Prep::FinalEof if is_eof => None,
            Prep::FinalEof => return Step::Invalid,
        };
        // Under CLIENT_DEPRECATE_EOF the EOF states are skipped.
        let next = match (next, eofs) {
            (Some(Prep::ParamsEof { cols }), Some(false)) => Some(Prep::Cols { left: cols }),
            (Some(Prep::FinalEof), Some(false)) => None,
            (n, _) => n,
        };
        match next {
            None => Step::Done,
            Some(n) => {
                // Capabilities unknown: the response may end here or with an EOF.
                self.tail = n == Prep::FinalEof && eofs.is_none();
                self.shape = Shape::Prepare(n);
                Step::More
            }
        }
    }
}

/// The state after COM_STMT_PREPARE_OK: definitions of `params`
/// parameters, then of `cols` columns.
fn first_block(params: u16, cols: u16) -> Option<Prep> {
    if params > 0 {
        Some(Prep::Params { left: params, cols })
    } else if cols > 0 {
        Some(Prep::Cols { left: cols })
    } else {
        None
    }
}
