//! Responses longer than the capture: finishing a result set whose packet
//! headers fell in bytes not captured, from the last bytes of the server's
//! writes ([`Chunk::tail`]).
//!
//! The probe keeps a prefix of each call's bytes ([`Chunk::data`]) and,
//! of longer calls, their last bytes ([`Chunk::tail`]). A result set of
//! more rows than the prefix holds loses the server's framing at the first
//! row header not captured. The response is then finished from the tail,
//! when and only when that is certain:
//!
//! * the framing was lost at a new packet's header in a server write that
//!   has a tail, in the command phase, inside a result set (its column
//!   count was seen), and exactly one command is outstanding: the command
//!   was not read while another still waited
//!   ([`Pending::overlapped`](super::response::Pending::overlapped));
//! * from then on the connection is inside a response whose packets were
//!   not captured ([`Unseen`]): each server write is consumed (its bytes
//!   not captured are counted by [`Chunk::missing`] as always, the write
//!   counts neither as skipped nor as a desync) until one's last bytes (its
//!   tail, or its data when captured whole) are exactly one terminal
//!   packet ([`terminal`]): a header whose length makes the packet end at
//!   the write's end, and a payload that is an EOF (0xfe, 5 bytes), an OK
//!   sent as 0xfe (CLIENT_DEPRECATE_EOF), or an ERR (0xff, code, `#`,
//!   SQLSTATE). EOF and OK forms are checked against the negotiated
//!   capabilities when the handshake was seen. A row packet is never such
//!   a packet: text rows begin with a length-encoded integer, never 0xff
//!   and 0xfe only for values of 16 MiB and more; binary rows begin with
//!   0x00. Bytes that parse as two different terminal packets are none;
//! * that packet is handed to the result set's state machine as if every
//!   byte had been captured: its status flags decide. No
//!   SERVER_MORE_RESULTS_EXISTS: the response is complete, its row is the
//!   one full capture makes (kind, text, statement id, error, user,
//!   database, start at the command, end at this write) except `rows`,
//!   `None` (the rows were not counted). SERVER_MORE_RESULTS_EXISTS, or a
//!   5-byte EOF that may be the one ending the metadata (the framing was
//!   lost before the rows began): the packet ended the write, so the next
//!   write begins the next packet and the framing resumes there, its
//!   sequence id checked;
//! * a client chunk before such a write means the end was not recognized:
//!   the decoder falls back to what losing the framing did before
//!   (the command is dropped, a desync counted, the writes consumed counted
//!   as skipped), and so does a new Handshake or the connection's close.
//!
//! Residual risk: a write that is not the response's last whose final
//! bytes happen to form such a packet. The server's network layer (MariaDB
//! and MySQL `net_write_buff`/`net_flush`) writes a response through a
//! buffer sent whenever it fills, at a byte count that has nothing to do
//! with packet boundaries, or a packet larger than the buffer straight
//! from its payload (a row), and after the response's last packet it
//! flushes and reads the next command. A write other than the last ends
//! at a 0xfe/0xff packet's end only when it is the metadata's EOF (handled
//! above: taken as that EOF, the next write must continue the framing) or
//! when row bytes mimic a header whose length reaches exactly the write's
//! end, followed by a valid EOF/OK/ERR payload. The terminal packet's
//! sequence id cannot be checked exactly (how many packets were not
//! captured is unknown); it is checked against the bytes between the lost
//! header and it (each packet at least 4 bytes), which rejects mimicry
//! only in short gaps.

use super::conn::{Conn, Ctx, Unseen};
use super::framer::Packet;
use super::response::Step;
use super::wire::{lenenc, u16_at, CLIENT_DEPRECATE_EOF, MAX_PACKET};
use crate::{Chunk, Counters};

impl Unseen {
    /// A terminal packet at `at` in the current write, with sequence id
    /// `seq`, can follow the lost header: the packets from the lost one
    /// up to it (their count known modulo 256) fit in the bytes between.
    fn fits(&self, at: u64, seq: u8) -> bool {
        let between = at as i64 - self.header_at;
        let packets = match seq.wrapping_sub(self.seq) {
            0 => 256,
            n => i64::from(n),
        };
        between >= 4 * packets
    }
}

/// A terminal packet at the end of some bytes.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Terminal<'a> {
    /// Where its header begins in the bytes.
    pub at: usize,
    pub seq: u8,
    pub payload: &'a [u8],
}

/// The one terminal packet (EOF, OK with a 0xfe header, ERR) that ends
/// exactly at the end of `end`, found by its header; `None` when there is
/// none or more than one reading. `caps`: the negotiated capabilities, when
/// known (CLIENT_DEPRECATE_EOF: OK form only; without it: EOF only).
pub(super) fn terminal(end: &[u8], caps: Option<u64>) -> Option<Terminal<'_>> {
    let deprecate = caps.map(|c| c & CLIENT_DEPRECATE_EOF != 0);
    let mut found = None;
    for n in 1..=end.len().saturating_sub(4).min(MAX_PACKET as usize - 1) {
        let at = end.len() - 4 - n;
        // The header byte first: rows' bytes rarely are 0xfe or 0xff, and
        // this runs at every offset of every long response's tail.
        if end[at + 4] < 0xfe {
            continue;
        }
        let h = &end[at..at + 4];
        if u32::from_le_bytes([h[0], h[1], h[2], 0]) as usize != n {
            continue;
        }
        let payload = &end[at + 4..];
        let ok = match payload[0] {
            0xfe if n == 5 => deprecate != Some(true),
            0xfe => deprecate != Some(false) && ok_form(payload),
            0xff => err_form(payload),
            _ => false,
        };
        if ok {
            if found.is_some() {
                return None;
            }
            found = Some(Terminal {
                at,
                seq: h[3],
                payload,
            });
        }
    }
    found
}

/// An OK packet's fields (after its header byte) fit in `p`.
fn ok_form(p: &[u8]) -> bool {
    let mut at = 1;
    lenenc(p, &mut at).is_some() && lenenc(p, &mut at).is_some() && at + 4 <= p.len()
}

/// An ERR packet of the 4.1 protocol: code (not MariaDB's progress
/// report), `#`, five-character SQLSTATE.
fn err_form(p: &[u8]) -> bool {
    p.len() >= 9
        && u16_at(p, 1).is_some_and(|c| c != 0xffff)
        && p[3] == b'#'
        && p[4..9].iter().all(u8::is_ascii_alphanumeric)
}

impl Conn {
    /// The server's framing was lost at a header at `header_at` in
    /// `chunk`: whether the response can be followed to its end by the
    /// writes' tails (the connection is then inside it).
    pub(super) fn begin_unseen(&mut self, chunk: &Chunk<'_>, header_at: i64) -> bool {
        let Some(pend) = self.st.pending.as_ref() else {
            return false;
        };
        if chunk.tail.is_empty()
            || self.st.phase != super::conn::Phase::Command
            || pend.overlapped
            || !pend.in_result_set()
        {
            return false;
        }
        self.st.unseen = Some(Unseen {
            before_rows: pend.before_rows(),
            header_at,
            seq: pend.next_seq,
            writes: 0,
        });
        true
    }

    /// A server write while inside a response not captured.
    pub(super) fn unseen_write(&mut self, chunk: &Chunk<'_>, ctx: &mut Ctx<'_>) {
        if let Some(u) = self.st.unseen.as_mut() {
            u.writes += 1;
        }
        self.unseen_end(chunk, ctx);
    }

    /// Whether `chunk` (a server write) ends the response not captured:
    /// if so, the response is finished (or, more packets following, the
    /// framing resumes with the next write).
    pub(super) fn unseen_end(&mut self, chunk: &Chunk<'_>, ctx: &mut Ctx<'_>) {
        let Some(mut u) = self.st.unseen else {
            return;
        };
        let end = if !chunk.tail.is_empty() {
            Some((chunk.tail, chunk.len - chunk.tail.len() as u64))
        } else if chunk.data.len() as u64 == chunk.len {
            Some((chunk.data, 0))
        } else {
            None
        };
        let found = end.and_then(|(bytes, from)| {
            terminal(bytes, self.st.caps).filter(|t| u.fits(from + t.at as u64, t.seq))
        });
        let Some(t) = found else {
            u.header_at -= chunk.len as i64;
            self.st.unseen = Some(u);
            return;
        };
        self.st.unseen = None;
        let Some(pend) = self.st.pending.as_mut() else {
            return;
        };
        let p = Packet {
            seq: t.seq,
            last_seq: t.seq,
            len: t.payload.len() as u64,
            head: t.payload,
        };
        match pend.after_uncaptured(&p, self.st.caps, u.before_rows) {
            Step::Done => self.st.complete(ctx),
            // The packet ended the write: the next begins a packet, with
            // the next sequence id (checked as the framing resumes).
            Step::More => {}
            Step::Invalid => {
                self.st.unseen = Some(u);
                self.give_up_unseen(ctx.counters);
            }
        }
    }

    /// The response's end was not recognized: what losing the server's
    /// framing did without tails (the command dropped, a desync, the
    /// writes consumed since skipped; server chunks skipped until the next
    /// command).
    pub(super) fn give_up_unseen(&mut self, counters: &mut Counters) {
        let Some(u) = self.st.unseen.take() else {
            return;
        };
        counters.desyncs += 1;
        counters.chunks_skipped += u.writes;
        self.st.pending = None;
        self.st.wr_lost = true;
        self.wr.reset();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(seq: u8, payload: &[u8]) -> Vec<u8> {
        let mut v = (payload.len() as u32).to_le_bytes()[..3].to_vec();
        v.push(seq);
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn terminal_forms() {
        let eof = b"\xfe\x00\x00\x22\x00";
        let ok = b"\xfe\x00\x00\x22\x00\x00\x00";
        let err = b"\xff\x7a\x04#42S02Table 'shop.nope' doesn't exist";
        let mut end = vec![b'x'; 40];
        end.extend(packet(9, eof));
        let t = terminal(&end, None).unwrap();
        assert_eq!((t.at, t.seq, t.payload), (40, 9, &eof[..]));
        assert!(terminal(&end, Some(CLIENT_DEPRECATE_EOF)).is_none());
        assert!(terminal(&end, Some(0)).is_some());
        let mut end = vec![b'x'; 3];
        end.extend(packet(200, ok));
        assert_eq!(terminal(&end, None).unwrap().seq, 200);
        assert!(terminal(&end, Some(CLIENT_DEPRECATE_EOF)).is_some());
        assert!(terminal(&end, Some(0)).is_none());
        let end = packet(3, err);
        assert_eq!(terminal(&end, Some(0)).unwrap().payload, &err[..]);
        // Not terminal packets: a row, a progress report, an ERR without
        // SQLSTATE, an EOF one byte short of the end, bytes shorter than a
        // header.
        for bad in [
            packet(4, b"\x03abc"),
            packet(4, b"\xff\xff\xff\x01\x00\x00\x00\x00\x00\x00"),
            packet(4, b"\xff\x15\x04Access denied"),
            [packet(4, eof), vec![0]].concat(),
            vec![0xfe, 0, 0],
        ] {
            assert!(terminal(&bad, None).is_none(), "{bad:?}");
        }
        // Two readings: none.
        let twice = packet(7, b"\xff\x01\x00#HY000\x05\x00\x00\x07\xfe\x00\x00\x02\x00");
        assert_eq!(terminal(&twice[4..], None).unwrap().at, 9);
        assert!(terminal(&twice, None).is_none());
    }

    #[test]
    fn sequence_ids_fit_the_gap() {
        let u = Unseen {
            before_rows: false,
            header_at: 100,
            seq: 10,
            writes: 0,
        };
        assert!(u.fits(104, 11));
        assert!(!u.fits(104, 12));
        assert!(u.fits(140, 20));
        assert!(!u.fits(140, 10)); // 256 packets at least
        assert!(u.fits(100 + 1024, 10));
    }
}
