//! Finding the framing of a connection whose beginning was not seen (or
//! whose framing was lost): a resync point is a client chunk that begins
//! with a command packet (sequence id 0, a known command byte, a length
//! that command can have) and, alone or with the next client chunks and no
//! server chunk in between, ends exactly where whole command packets end.
//!
//! A candidate may span chunks because servers read a packet's header and
//! its payload with two system calls (MariaDB 10.11: `recvfrom` of 4 bytes,
//! then of the payload's length). Its packets are held (copied) until the
//! candidate is decided; only then are they decoded as commands.

use super::conn::{read_cap, Conn, Ctx, Phase};
use super::framer::{Cursor, Event, Expect, Packet};
use super::wire;
use crate::Chunk;

/// Client chunks a candidate may span, at most.
const MAX_CHUNKS: u64 = 8;
/// Packets a candidate may hold, at most.
const MAX_PACKETS: usize = 8;

/// A command packet of a candidate, held until the candidate is decided.
#[derive(Debug)]
struct Held {
    seq: u8,
    last_seq: u8,
    len: u64,
    head: Vec<u8>,
    time_ns: u64,
}

/// A resync candidate: the client chunks read since it began.
#[derive(Debug, Default)]
pub(super) struct Candidate {
    /// Chunks it consumed (counted as skipped if it fails).
    pub chunks: u64,
    packets: Vec<Held>,
}

/// How a chunk left the candidate.
#[derive(Debug, PartialEq, Eq)]
enum Try {
    /// Not command packets.
    Fail,
    /// A packet is still incomplete.
    Wait,
    /// Whole command packets, ending with the chunk.
    Found,
}

/// Whether the server answers the command (all but these three do).
fn answered(cmd: u8) -> bool {
    !matches!(
        cmd,
        wire::COM_QUIT | wire::COM_STMT_CLOSE | wire::COM_STMT_SEND_LONG_DATA
    )
}

impl Conn {
    /// A client chunk while the framing is unknown.
    pub(super) fn unsynced_read(&mut self, chunk: &Chunk<'_>, ctx: &mut Ctx<'_>) {
        let continued = self.cand.chunks > 0;
        let mut r = self.try_chunk(chunk, ctx);
        if r == Try::Fail && continued {
            // The candidate begun before failed; this chunk may begin one.
            self.cand.chunks -= 1;
            self.drop_candidate(ctx);
            r = self.try_chunk(chunk, ctx);
        }
        match r {
            Try::Found => self.resync(ctx),
            Try::Wait if self.cand.chunks < MAX_CHUNKS => {}
            _ => self.drop_candidate(ctx),
        }
    }

    /// Gives up the candidate: its chunks were skipped.
    pub(super) fn drop_candidate(&mut self, ctx: &mut Ctx<'_>) {
        ctx.counters.chunks_skipped += self.cand.chunks;
        self.cand.chunks = 0;
        self.cand.packets.clear();
        self.rd.reset();
    }

    /// Feeds a client chunk to the candidate (beginning one if none is).
    fn try_chunk(&mut self, chunk: &Chunk<'_>, ctx: &Ctx<'_>) -> Try {
        if self.cand.chunks == 0 {
            self.rd.reset();
        }
        self.cand.chunks += 1;
        let mut cur = Cursor::new(chunk.data, chunk.len);
        let cap = read_cap(ctx.max_text);
        while let Some(ev) = self.rd.next(&mut cur, &cap, Expect::seq(0, None)) {
            let Event::Packet(p) = ev else {
                return Try::Fail;
            };
            let after_answered = self
                .cand
                .packets
                .last()
                .is_some_and(|h| answered(h.head[0]));
            if p.seq != 0
                || !wire::command_fits(p.head, p.len, true)
                || after_answered
                || self.cand.packets.len() >= MAX_PACKETS
            {
                return Try::Fail;
            }
            self.cand.packets.push(Held {
                seq: p.seq,
                last_seq: p.last_seq,
                len: p.len,
                head: p.head.to_vec(),
                time_ns: chunk.time_ns,
            });
        }
        if self.rd.is_idle() && !self.cand.packets.is_empty() {
            Try::Found
        } else {
            Try::Wait
        }
    }

    /// The candidate is a resync point: decode its packets as commands.
    fn resync(&mut self, ctx: &mut Ctx<'_>) {
        self.st.phase = Phase::Command;
        self.st.pending = None;
        self.st.wr_lost = false;
        self.wr.reset();
        self.cand.chunks = 0;
        let held = std::mem::take(&mut self.cand.packets);
        let time = ctx.time_ns;
        for h in &held {
            ctx.time_ns = h.time_ns;
            let p = Packet {
                seq: h.seq,
                last_seq: h.last_seq,
                len: h.len,
                head: &h.head,
            };
            // Plausible commands with sequence id 0: always accepted.
            let _ = self.st.on_read(&p, &mut self.wr, ctx);
        }
        ctx.time_ns = time;
    }
}
