//! The capture's calls read straight from its ring-buffer records: no
//! Arrow columns are built for bytes the decoder reads once (building
//! them was ~15% of a busy capture's CPU in a profile under sysbench's
//! read_write, most of it copying each call's bytes into a binary column).

use crate::executor::passthrough::PassThrough;
use crate::executor::peers::client;
use ebql_compiler::contract::{bytes_value, uint_at, OutputLayout, Stored, BYTES_HEADER};
use ebql_compiler::wire::{AF_INET, AF_INET6, PEER_FAMILY, PEER_PORT, PEER_V4, PEER_V6};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// One captured system call, as the capture's columns name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Call<'a> {
    /// The call's exit (CLOCK_MONOTONIC ns).
    pub(super) time: u64,
    /// The process (tgid).
    pub(super) pid: u32,
    /// The socket's descriptor (the call's first argument).
    pub(super) fd: u64,
    /// The system call number.
    pub(super) id: u64,
    /// Bytes the call moved (its return value, above 0).
    pub(super) ret: u64,
    /// The call's first bytes (empty when the read failed).
    pub(super) data: &'a [u8],
    /// The call's last bytes, when it moved more than the prefix holds.
    pub(super) tail: &'a [u8],
    /// The socket's peer when the call was made, if the capture reads it
    /// (the socket tracepoints) and it is an IP one: the connection's client.
    pub(super) peer: Option<SocketAddr>,
}

/// Where each of the capture's columns lies in its records.
#[derive(Debug, Clone)]
pub(super) struct CallFields {
    /// Bytes from one record to the next.
    size: usize,
    /// (offset, bytes) of `time`, `pid`, `fd`, `id`, `ret`.
    ints: [(usize, usize); 5],
    /// (offset, bound) of `data` and `tail`.
    data: (usize, u32),
    tail: (usize, u32),
    /// Where the socket's peer lies, when the capture reads it.
    peer: Option<PeerFields>,
    /// Bytes of a record up to the end of its last integer and of its
    /// `bytes()` values' headers: a record's used bytes hold at least these.
    fixed: usize,
}

/// Where the capture's columns of the socket's peer lie in its records
/// ([`ebql_compiler::wire::PEER_FAMILY`] and the columns after it).
#[derive(Debug, Clone, Copy)]
struct PeerFields {
    /// (offset, bytes) of the address family, the port and the IPv4 address.
    family: (usize, usize),
    port: (usize, usize),
    v4: (usize, usize),
    /// (offset, bound) of the IPv6 address (`bytes()`), on kernels with IPv6.
    v6: Option<(usize, u32)>,
}

impl PeerFields {
    /// The peer of record `r`, when its socket is an IP one. The port and
    /// the IPv4 address are as `struct sock_common` keeps them: network
    /// byte order, the address's bytes in memory in its order. An IPv4
    /// client of an IPv6 socket (`::ffff:a.b.c.d`) is its IPv4 address.
    fn peer(&self, r: &[u8]) -> Option<SocketAddr> {
        let at = |(off, n): (usize, usize)| uint_at(r, off, n);
        let port = u16::from_be(at(self.port) as u16);
        let ip = match at(self.family) as u16 {
            AF_INET => IpAddr::V4(Ipv4Addr::from((at(self.v4) as u32).to_le_bytes())),
            AF_INET6 => {
                let (off, n) = self.v6?;
                let bytes: [u8; 16] = bytes_value(r.get(off..)?, n)?.try_into().ok()?;
                IpAddr::V6(Ipv6Addr::from(bytes))
            }
            // A Unix-domain socket's client has no address.
            _ => return None,
        };
        Some(client(SocketAddr::new(ip, port)))
    }
}

impl CallFields {
    /// The fields of `layout`'s records that the capture's columns
    /// (`direct`: its plain projection of the kernel columns) are; `None`
    /// when a column is missing or not stored as the capture stores it
    /// (integers; `bytes()` values).
    pub(super) fn of(layout: &OutputLayout, direct: &PassThrough) -> Option<CallFields> {
        let (record_size, columns) = layout.inner_stream()?;
        let field = |name: &str| {
            let (_, i) = direct.columns().find(|(n, _)| *n == name)?;
            columns.get(i).copied()
        };
        let int = |name: &str| match field(name)? {
            (off, Stored::Int { bytes, .. }) => Some((off as usize, bytes as usize)),
            _ => None,
        };
        let bytes = |name: &str| match field(name)? {
            (off, Stored::ReadBytes(n)) => Some((off as usize, n)),
            _ => None,
        };
        let ints = [
            int("time")?,
            int("pid")?,
            int("fd")?,
            int("id")?,
            int("ret")?,
        ];
        let (data, tail) = (bytes("data")?, bytes("tail")?);
        // The socket tracepoints' capture reads the peer; the system call hooks' cannot.
        let peer = match int(PEER_FAMILY) {
            Some(family) => Some(PeerFields {
                family,
                port: int(PEER_PORT)?,
                v4: int(PEER_V4)?,
                v6: bytes(PEER_V6),
            }),
            None => None,
        };
        let header = BYTES_HEADER as usize;
        let peer_ends = peer.iter().flat_map(|p| {
            [p.family, p.port, p.v4]
                .map(|(off, n)| off + n)
                .into_iter()
                .chain(p.v6.map(|(off, _)| off + header))
        });
        let fixed = ints
            .iter()
            .map(|&(off, n)| off + n)
            .chain([data.0 + header, tail.0 + header])
            .chain(peer_ends)
            .max()
            .unwrap_or(0);
        Some(CallFields {
            size: record_size as usize,
            ints,
            data,
            tail,
            peer,
            fixed,
        })
    }

    /// Whether the records hold each call's socket peer ([`Call::peer`]).
    pub(super) fn has_peer(&self) -> bool {
        self.peer.is_some()
    }

    /// Bytes from one record to the next in a buffer of drained records.
    pub(super) fn size(&self) -> usize {
        self.size
    }

    /// Records in `records` (whole records, back to back).
    pub(super) fn count(&self, records: &[u8]) -> usize {
        records.len() / self.size
    }

    /// The whole record of `call`, as the probe writes it (a test's input).
    #[cfg(test)]
    pub(super) fn record(&self, call: &Call) -> Vec<u8> {
        let mut rec = vec![0u8; self.size];
        let values = [call.time, u64::from(call.pid), call.fd, call.id, call.ret];
        for (&(off, n), v) in self.ints.iter().zip(values) {
            rec[off..off + n].copy_from_slice(&v.to_le_bytes()[..n]);
        }
        if let (Some(p), Some(peer)) = (self.peer, call.peer) {
            let (family, ip6) = match peer.ip() {
                IpAddr::V4(v4) => {
                    let (off, n) = p.v4;
                    let v = u64::from(u32::from_le_bytes(v4.octets()));
                    rec[off..off + n].copy_from_slice(&v.to_le_bytes()[..n]);
                    (AF_INET, None)
                }
                IpAddr::V6(v6) => (AF_INET6, Some(v6.octets())),
            };
            for ((off, n), v) in [(p.family, family), (p.port, peer.port().to_be())] {
                rec[off..off + n].copy_from_slice(&u64::from(v).to_le_bytes()[..n]);
            }
            if let (Some((off, _)), Some(ip6)) = (p.v6, ip6) {
                rec[off..off + 4].copy_from_slice(&16u32.to_le_bytes());
                let at = off + BYTES_HEADER as usize;
                rec[at..at + 16].copy_from_slice(&ip6);
            }
        }
        for ((off, bound), bytes) in [(self.data, call.data), (self.tail, call.tail)] {
            assert!(
                bytes.len() <= bound as usize,
                "more bytes than the record holds"
            );
            rec[off..off + 4].copy_from_slice(&(bytes.len() as u32).to_le_bytes());
            let at = off + BYTES_HEADER as usize;
            rec[at..at + bytes.len()].copy_from_slice(bytes);
        }
        rec
    }

    /// The call of record `r` (a whole record, or its used bytes as the
    /// ring buffer holds it); `None` when `r` is too short to hold the
    /// capture's fields, which the probe never writes.
    pub(super) fn call<'a>(&self, r: &'a [u8]) -> Option<Call<'a>> {
        if r.len() < self.fixed {
            return None;
        }
        let [time, pid, fd, id, ret] = self.ints.map(|(off, n)| uint_at(r, off, n));
        let bytes = |(off, n): (usize, u32)| bytes_value(&r[off..], n).unwrap_or(&[]);
        Some(Call {
            time,
            // The kernel's tgid and a positive return value: the casts keep them whole.
            pid: pid as u32,
            fd,
            id,
            ret,
            data: bytes(self.data),
            tail: bytes(self.tail),
            peer: self.peer.and_then(|p| p.peer(r)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{capture_of, postgres_capture};
    use super::*;
    use ebql_compiler::choose::HookChoice;

    /// The capture's columns are fields of its records on every hook it
    /// can run on: the stage reads no capture any other way.
    #[test]
    fn every_capture_hook_has_its_columns_in_its_records() {
        for hook in [HookChoice::Auto, HookChoice::RawTp, HookChoice::Tracefs] {
            let (c, direct) = postgres_capture(hook);
            assert!(
                CallFields::of(&c.code.layout, &direct).is_some(),
                "{hook:?}"
            );
        }
    }

    /// The capture of `SELECT * FROM postgres.statements`: its fields and
    /// a record written where the layout says, read back whole.
    #[test]
    fn a_record_reads_back_as_the_call_it_holds() {
        let (c, direct) = postgres_capture(HookChoice::Auto);
        let fields = CallFields::of(&c.code.layout, &direct).expect("the capture's fields");
        let mut rec = vec![0u8; fields.size * 2];
        let put = |rec: &mut [u8], (off, n): (usize, usize), v: u64| {
            rec[off..off + n].copy_from_slice(&v.to_le_bytes()[..n]);
        };
        let second = &mut rec[fields.size..];
        for (field, v) in fields.ints.iter().zip([1_000, 42, 7, 45, 5]) {
            put(second, *field, v);
        }
        let (off, _) = fields.data;
        put(second, (off, 4), 5);
        second[off + BYTES_HEADER as usize..][..5].copy_from_slice(b"Q\0\0\0\x04");
        // The tail's read failed (its NULL flag): no bytes.
        second[fields.tail.0 + 4] = 1;
        assert_eq!(fields.count(&rec), 2);
        let calls: Vec<Call> = rec
            .chunks_exact(fields.size())
            .map(|r| fields.call(r).expect("a whole record"))
            .collect();
        assert_eq!(
            calls[1],
            Call {
                time: 1_000,
                pid: 42,
                fd: 7,
                id: 45,
                ret: 5,
                data: b"Q\0\0\0\x04",
                tail: b"",
                peer: None,
            }
        );
        assert_eq!(calls[0].data, b"", "an all-zero record holds no bytes");
        // As the ring buffer holds it: the used bytes only.
        let used = &rec[fields.size..][..off + BYTES_HEADER as usize + 5];
        assert_eq!(fields.call(used), Some(calls[1]));
        assert_eq!(fields.call(&used[..fields.fixed - 1]), None);
    }

    /// The capture on the socket tracepoints reads each call's peer: an
    /// IPv4 one, an IPv6 one, an IPv4 client of an IPv6 socket (as its IPv4
    /// address) read back from a record; a Unix-domain socket has none.
    #[test]
    fn a_records_peer_is_the_calls_client() {
        let (c, direct) = postgres_capture(HookChoice::Auto);
        let fields = CallFields::of(&c.code.layout, &direct).expect("the capture's fields");
        assert!(
            fields.has_peer(),
            "the socket tracepoints' capture reads sk"
        );
        let call = |peer: Option<&str>| Call {
            time: 1,
            pid: 2,
            fd: 3,
            id: 45,
            ret: 1,
            data: b"Q",
            tail: b"",
            peer: peer.map(|p| p.parse().unwrap()),
        };
        for peer in ["10.1.2.3:5432", "[2001:db8::7]:40000", "[::1]:1"] {
            let rec = fields.record(&call(Some(peer)));
            assert_eq!(fields.call(&rec).unwrap().peer, call(Some(peer)).peer);
        }
        let p = fields.peer.unwrap();
        let mut mapped = fields.record(&call(Some("[::1]:80")));
        let v6 = p.v6.expect("a kernel with IPv6").0 + BYTES_HEADER as usize;
        mapped[v6..v6 + 16]
            .copy_from_slice(&"::ffff:10.0.0.9".parse::<Ipv6Addr>().unwrap().octets());
        assert_eq!(
            fields.call(&mapped).unwrap().peer,
            Some("10.0.0.9:80".parse().unwrap())
        );
        let mut unix = fields.record(&call(Some("10.1.2.3:5432")));
        unix[p.family.0] = 1; // AF_UNIX
        assert_eq!(fields.call(&unix).unwrap().peer, None);
    }

    /// The system call hooks do not see the socket, and a query that reads
    /// no client column does not need it: no peer in their records.
    #[test]
    fn the_peer_is_captured_only_where_it_is_read_and_seen() {
        for hook in [HookChoice::RawTp, HookChoice::Tracefs] {
            let (c, direct) = postgres_capture(hook);
            assert!(
                !CallFields::of(&c.code.layout, &direct).unwrap().has_peer(),
                "{hook:?}"
            );
        }
        let no_client = "SELECT query, latency_ns FROM mysql.statements WHERE rows > 1";
        let (c, direct) = capture_of(no_client, HookChoice::Auto);
        assert!(!CallFields::of(&c.code.layout, &direct).unwrap().has_peer());
        let (c, direct) = capture_of("SELECT client_port FROM mysql.statements", HookChoice::Auto);
        assert!(CallFields::of(&c.code.layout, &direct).unwrap().has_peer());
    }
}
