//! Packet framing for one direction of one connection: a 3-byte
//! little-endian payload length and a 1-byte sequence id before each
//! payload; a payload of 0xffffff bytes continues in the next packet (MySQL
//! documentation, "MySQL Packets", "Sending More Than 16Mb").
//!
//! The framer is fed the chunks of its direction in order and hands out
//! logical packets (the payloads of continued packets joined) as they
//! complete, each with a captured prefix of its payload. Bytes a chunk
//! moved but the probe did not capture are skipped by the lengths; a
//! header that falls (even partly) in them loses the framing
//! ([`Event::Lost`]). Nothing is allocated per packet: a payload that lies
//! whole in one chunk's captured bytes is handed out in place; one split
//! across chunks is gathered in a reused buffer, at most `cap` bytes.

use super::wire::MAX_PACKET;

/// One chunk's bytes, consumed as the framer reads them: `data` captured,
/// positions from `data.len()` to `len` moved but not captured.
pub(super) struct Cursor<'a> {
    data: &'a [u8],
    len: u64,
    pos: u64,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of a chunk.
    pub fn new(data: &'a [u8], len: u64) -> Self {
        Cursor {
            data,
            len: len.max(data.len() as u64),
            pos: 0,
        }
    }

    /// Captured bytes from the position on (empty when in the missing part).
    fn captured(&self) -> &'a [u8] {
        usize::try_from(self.pos)
            .ok()
            .and_then(|p| self.data.get(p..))
            .unwrap_or_default()
    }
}

/// A logical packet: its payload's captured prefix and its length.
#[derive(Clone, Copy, Debug)]
pub(super) struct Packet<'p> {
    /// Sequence id of its first packet.
    pub seq: u8,
    /// Sequence id of its last packet (the first's, unless continued).
    pub last_seq: u8,
    /// The payload's length (continued packets joined).
    pub len: u64,
    /// The payload's first bytes: up to the first byte not captured, at
    /// most the framer's cap.
    pub head: &'p [u8],
}

impl Packet<'_> {
    /// The payload's first byte, when captured.
    pub fn first(&self) -> Option<u8> {
        self.head.first().copied()
    }

    /// The head is not the whole payload.
    pub fn truncated(&self) -> bool {
        (self.head.len() as u64) < self.len
    }
}

/// What the framer found next in a chunk.
pub(super) enum Event<'p> {
    /// A logical packet ended in this chunk.
    Packet(Packet<'p>),
    /// A continued packet's header fell in bytes not captured, or a
    /// sequence id was wrong: the framing is lost (the framer was reset,
    /// the rest of the chunk is skipped).
    Lost,
    /// The header of a new logical packet fell (even partly) in bytes not
    /// captured: the framing is lost as with [`Event::Lost`]. `header_at`
    /// is where that header began, from the chunk's first byte (negative
    /// when its first bytes came with the previous chunk).
    Gap { header_at: i64 },
}

/// Sequence ids a new logical packet may carry: checked at its first
/// header, so bytes that are not a header (a chunk lost before them) lose
/// the framing at once instead of swallowing the chunks that follow.
#[derive(Clone, Copy, Debug)]
pub(super) struct Expect(Option<[Option<u8>; 2]>);

impl Expect {
    /// Any sequence id.
    pub const ANY: Expect = Expect(None);

    /// `a`, or `b` when given.
    pub fn seq(a: u8, b: Option<u8>) -> Expect {
        Expect(Some([Some(a), b]))
    }

    fn allows(self, seq: u8) -> bool {
        self.0.is_none_or(|s| s.contains(&Some(seq)))
    }
}

/// Buffers larger than this are given back once their packet is done.
const KEEP_BUFFER: usize = 64 * 1024;

/// One direction's framing state between chunks.
#[derive(Debug, Default)]
pub(super) struct Framer {
    hdr: [u8; 4],
    hdr_len: u8,
    in_payload: bool,
    /// Payload bytes left in the current physical packet.
    remaining: u32,
    /// The current physical packet is 0xffffff bytes: the payload continues.
    cont: bool,
    /// A logical packet has begun and not ended.
    open: bool,
    seq: u8,
    last_seq: u8,
    total: u64,
    buf: Vec<u8>,
    /// A byte of this logical packet was not captured: gather no more.
    gap: bool,
    cap: Option<usize>,
}

impl Framer {
    /// At a packet boundary: no partial header or payload pending.
    pub fn is_idle(&self) -> bool {
        !self.open && !self.in_payload && self.hdr_len == 0
    }

    /// Forgets any partial packet: the next byte fed starts a header.
    pub fn reset(&mut self) {
        self.hdr_len = 0;
        self.in_payload = false;
        self.remaining = 0;
        self.cont = false;
        self.open = false;
        self.gap = false;
        self.cap = None;
        self.buf.clear();
    }

    /// The next event in the chunk under `cur`, or `None` when the chunk
    /// is consumed. `cap_for` gives, from a payload's first byte, how many
    /// of its bytes to keep; `expect`, the sequence ids a new packet may
    /// carry.
    pub fn next<'s, 'a: 's>(
        &'s mut self,
        cur: &mut Cursor<'a>,
        cap_for: &dyn Fn(u8) -> usize,
        expect: Expect,
    ) -> Option<Event<'s>> {
        loop {
            if !self.in_payload {
                if self.hdr_len == 0 && !self.open {
                    if let Some(p) = fast_packet(cur, cap_for) {
                        if !expect.allows(p.seq) {
                            cur.pos = cur.len;
                            return Some(Event::Lost);
                        }
                        return Some(Event::Packet(p));
                    }
                }
                if cur.pos >= cur.len {
                    return None;
                }
                let avail = cur.captured();
                if avail.is_empty() {
                    let header_at = (!self.open).then(|| cur.pos as i64 - i64::from(self.hdr_len));
                    self.reset();
                    cur.pos = cur.len;
                    return Some(
                        header_at.map_or(Event::Lost, |header_at| Event::Gap { header_at }),
                    );
                }
                let n = (4 - usize::from(self.hdr_len)).min(avail.len());
                let at = usize::from(self.hdr_len);
                self.hdr[at..at + n].copy_from_slice(&avail[..n]);
                self.hdr_len += n as u8;
                cur.pos += n as u64;
                if self.hdr_len < 4 {
                    continue;
                }
                self.hdr_len = 0;
                let plen = u32::from_le_bytes([self.hdr[0], self.hdr[1], self.hdr[2], 0]);
                let seq = self.hdr[3];
                if self.open {
                    if seq != self.last_seq.wrapping_add(1) {
                        self.reset();
                        cur.pos = cur.len;
                        return Some(Event::Lost);
                    }
                } else {
                    if !expect.allows(seq) {
                        self.reset();
                        cur.pos = cur.len;
                        return Some(Event::Lost);
                    }
                    self.open = true;
                    self.seq = seq;
                    self.total = 0;
                    if self.buf.capacity() > KEEP_BUFFER {
                        self.buf = Vec::new();
                    }
                    self.buf.clear();
                    self.gap = false;
                    self.cap = None;
                }
                self.last_seq = seq;
                self.remaining = plen;
                self.cont = plen == MAX_PACKET;
                self.in_payload = true;
                self.total += u64::from(plen);
            }
            if self.remaining > 0 {
                let avail = cur.captured();
                let n = avail.len().min(self.remaining as usize);
                if n > 0 {
                    if !self.gap {
                        let cap = *self.cap.get_or_insert_with(|| cap_for(avail[0]));
                        let take = n.min(cap.saturating_sub(self.buf.len()));
                        self.buf.extend_from_slice(&avail[..take]);
                    }
                    cur.pos += n as u64;
                    self.remaining -= n as u32;
                }
                if self.remaining > 0 && cur.pos < cur.len {
                    let skip = u64::from(self.remaining).min(cur.len - cur.pos);
                    cur.pos += skip;
                    self.remaining -= skip as u32;
                    self.gap = true;
                }
                if self.remaining > 0 {
                    return None;
                }
            }
            self.in_payload = false;
            if self.cont {
                continue;
            }
            self.open = false;
            return Some(Event::Packet(Packet {
                seq: self.seq,
                last_seq: self.last_seq,
                len: self.total,
                head: &self.buf,
            }));
        }
    }
}

/// A whole single packet (not continued) lying in the captured bytes at
/// the cursor: handed out in place.
fn fast_packet<'a>(cur: &mut Cursor<'a>, cap_for: &dyn Fn(u8) -> usize) -> Option<Packet<'a>> {
    let avail = cur.captured();
    let h = avail.get(..4)?;
    let plen = u32::from_le_bytes([h[0], h[1], h[2], 0]);
    if plen == MAX_PACKET {
        return None;
    }
    let payload = avail.get(4..4 + plen as usize)?;
    let keep = payload
        .first()
        .map_or(0, |&b| cap_for(b))
        .min(payload.len());
    cur.pos += 4 + u64::from(plen);
    Some(Packet {
        seq: h[3],
        last_seq: h[3],
        len: u64::from(plen),
        head: &payload[..keep],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(f: &mut Framer, data: &[u8], len: u64) -> Vec<(u8, u64, Vec<u8>)> {
        let mut cur = Cursor::new(data, len);
        let mut v = Vec::new();
        while let Some(e) = f.next(&mut cur, &|_| 8, Expect::ANY) {
            match e {
                Event::Packet(p) => v.push((p.seq, p.len, p.head.to_vec())),
                Event::Lost | Event::Gap { .. } => {
                    v.push((0xff, u64::MAX, Vec::new()));
                    break;
                }
            }
        }
        v
    }

    #[test]
    fn split_and_cut() {
        let mut f = Framer::default();
        let bytes = b"\x05\x00\x00\x00\x03abcd\x02\x00\x00\x01xy";
        assert!(all(&mut f, &bytes[..2], 2).is_empty());
        assert!(!f.is_idle());
        assert_eq!(all(&mut f, &bytes[2..7], 5), vec![]);
        assert_eq!(
            all(&mut f, &bytes[7..], 7),
            vec![(0, 5, b"\x03abcd".to_vec()), (1, 2, b"xy".to_vec())]
        );
        assert!(f.is_idle());
        // Payload cut by the capture: skipped by its length.
        assert_eq!(all(&mut f, &bytes[..6], 9), vec![(0, 5, b"\x03a".to_vec())]);
        // A header in the missing bytes: lost.
        assert_eq!(
            all(&mut f, &bytes[..9], 15),
            vec![(0, 5, b"\x03abcd".to_vec()), (0xff, u64::MAX, vec![])]
        );
        assert!(f.is_idle());
    }

    #[test]
    fn header_in_the_gap() {
        let gap = |f: &mut Framer, data: &[u8], len: u64| {
            let mut cur = Cursor::new(data, len);
            loop {
                match f.next(&mut cur, &|_| 8, Expect::ANY) {
                    Some(Event::Packet(_)) => {}
                    Some(Event::Gap { header_at }) => return Some(header_at),
                    Some(Event::Lost) | None => return None,
                }
            }
        };
        let bytes = b"\x05\x00\x00\x00\x03abcd\x02\x00\x00\x01xy";
        let mut f = Framer::default();
        assert_eq!(gap(&mut f, &bytes[..11], 15), Some(9));
        assert!(f.is_idle());
        assert_eq!(gap(&mut f, &bytes[..6], 15), Some(9));
        // The header's first bytes came with the previous chunk.
        assert_eq!(gap(&mut f, &bytes[..11], 11), None);
        assert_eq!(gap(&mut f, &[], 4), Some(-2));
    }

    #[test]
    fn continued_packets() {
        let mut f = Framer::default();
        let mut bytes = vec![0xff, 0xff, 0xff, 0];
        bytes.extend(std::iter::repeat_n(b'q', MAX_PACKET as usize));
        bytes.extend_from_slice(b"\x01\x00\x00\x01z");
        let got = all(&mut f, &bytes, bytes.len() as u64);
        assert_eq!(
            got,
            vec![(0, u64::from(MAX_PACKET) + 1, b"qqqqqqqq".to_vec())]
        );
        // Wrong sequence id in the continuation.
        let n = bytes.len();
        bytes[n - 2] = 7;
        assert_eq!(all(&mut f, &bytes, n as u64)[0].0, 0xff);
        // A sequence id not expected for a new packet.
        let mut cur = Cursor::new(b"\x01\x00\x00\x05\x0e", 5);
        assert!(matches!(
            f.next(&mut cur, &|_| 8, Expect::seq(0, Some(3))),
            Some(Event::Lost)
        ));
        assert!(f.next(&mut cur, &|_| 8, Expect::ANY).is_none());
    }
}
