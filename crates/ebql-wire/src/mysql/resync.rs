//! Finding the framing of a connection whose beginning was not seen (or
//! whose client framing was lost): a resync point is a client chunk that
//! begins with a command packet (sequence id 0, a command that fits:
//! [`wire::command_fits`]) and, alone or with the next client chunks and no
//! server chunk in between, ends exactly where whole command packets end.
//!
//! A candidate may span chunks because servers read a packet's header and
//! its payload with two system calls (MariaDB 10.11: `recvfrom` of 4 bytes,
//! then of the payload's length). The client chunks read while searching
//! are kept (at most [`MAX_CHUNKS`], each at most [`MAX_KEPT`] bytes): the
//! earliest chunk is the candidate's start; when it fails (or a server
//! write shows it never completed) it is dropped and the search resumes
//! at the next kept chunk. A server write ends the search: if a start then
//! parses as whole commands, they are decoded and the write is their
//! response; otherwise every kept chunk was skipped.

use super::candidate::Kept;
use super::conn::{read_cap, Conn, Ctx, Phase};
use super::framer::{Cursor, Event, Expect, Framer, Packet};
use super::wire;
use crate::Chunk;

/// Client chunks a candidate may span, at most.
const MAX_CHUNKS: usize = 8;
/// Bytes kept of a chunk while searching (the rest treated as not captured).
const MAX_KEPT: usize = 64 * 1024;
/// Packets a candidate may hold, at most.
const MAX_PACKETS: usize = 8;

/// A command packet of a candidate.
#[derive(Debug)]
struct Held {
    seq: u8,
    last_seq: u8,
    len: u64,
    head: Vec<u8>,
    time_ns: u64,
}

/// How the kept chunks parse from the first.
enum Try {
    /// Not command packets.
    Fail,
    /// A packet is still incomplete.
    Wait,
    /// Whole command packets, ending with the last chunk.
    Found(Vec<Held>),
}

/// Whether the server answers the command (all but these three do).
fn answered(cmd: u8) -> bool {
    !matches!(
        cmd,
        wire::COM_QUIT | wire::COM_STMT_CLOSE | wire::COM_STMT_SEND_LONG_DATA
    )
}

/// Parses `kept` as command packets from its first byte.
fn parse(kept: &[Kept], max_text: usize) -> Try {
    let mut framer = Framer::default();
    let cap = read_cap(max_text);
    let mut held: Vec<Held> = Vec::new();
    for k in kept {
        let mut cur = Cursor::new(&k.data, k.len);
        while let Some(ev) = framer.next(&mut cur, &cap, Expect::seq(0, None)) {
            let Event::Packet(p) = ev else {
                return Try::Fail;
            };
            let after_answered = held.last().is_some_and(|h| answered(h.head[0]));
            if !wire::command_fits(p.head, p.len, true)
                || after_answered
                || held.len() >= MAX_PACKETS
            {
                return Try::Fail;
            }
            held.push(Held {
                seq: p.seq,
                last_seq: p.last_seq,
                len: p.len,
                head: p.head.to_vec(),
                time_ns: k.time_ns,
            });
        }
    }
    if framer.is_idle() && !held.is_empty() {
        Try::Found(held)
    } else {
        Try::Wait
    }
}

impl Conn {
    /// A client chunk while the framing is unknown.
    pub(super) fn unsynced_read(&mut self, chunk: &Chunk<'_>, ctx: &mut Ctx<'_>) {
        let keep = chunk.data.len().min(MAX_KEPT);
        self.cand.kept.push(Kept {
            data: chunk.data[..keep].to_vec(),
            len: chunk.len,
            time_ns: chunk.time_ns,
        });
        self.search(false, ctx);
    }

    /// A server chunk while the framing is unknown: ends the search.
    /// Whether the framing was found (the chunk is then decoded).
    pub(super) fn unsynced_write(&mut self, ctx: &mut Ctx<'_>) -> bool {
        if !self.cand.kept.is_empty() {
            self.search(true, ctx);
        }
        self.st.phase == Phase::Command
    }

    /// Looks for a resync point from the earliest kept chunk on; `write`:
    /// a server chunk follows, so an incomplete candidate failed.
    fn search(&mut self, write: bool, ctx: &mut Ctx<'_>) {
        while !self.cand.kept.is_empty() {
            match parse(&self.cand.kept, ctx.max_text) {
                Try::Found(held) => return self.resync(held, ctx),
                Try::Wait if !write && self.cand.kept.len() < MAX_CHUNKS => return,
                Try::Wait | Try::Fail => {
                    self.cand.kept.remove(0);
                    ctx.counters.chunks_skipped += 1;
                }
            }
        }
    }

    /// Gives up the search: its chunks were skipped.
    pub(super) fn drop_candidate(&mut self, ctx: &mut Ctx<'_>) {
        ctx.counters.chunks_skipped += self.cand.chunks();
        self.cand.kept.clear();
    }

    /// A resync point: decode its packets as commands.
    fn resync(&mut self, held: Vec<Held>, ctx: &mut Ctx<'_>) {
        self.cand.kept.clear();
        self.st.phase = Phase::Command;
        self.st.pending = None;
        self.st.wr_lost = false;
        self.rd.reset();
        self.wr.reset();
        let time = ctx.time_ns;
        for h in &held {
            ctx.time_ns = h.time_ns;
            let p = Packet {
                seq: h.seq,
                last_seq: h.last_seq,
                len: h.len,
                head: &h.head,
            };
            // Commands that fit, with sequence id 0: always accepted.
            let _ = self.st.on_read(&p, &mut self.wr, ctx);
        }
        ctx.time_ns = time;
    }
}
