//! The client address and port of a server's connection, for a wire
//! relation's rows ([`super::wire`]) when its capture runs on the system
//! call hooks, which do not see the socket (on the socket tracepoints the
//! capture reads the peer with each call: `wire::records`). The socket behind descriptor `fd` of
//! process `pid` (`/proc/<pid>/fd/<fd>`, a link to `socket:[<inode>]`),
//! asked for its peer (getpeername(2)) through a copy of the descriptor
//! (pidfd_getfd(2), Linux 5.6). Where that copy is refused (an older kernel,
//! a ptrace policy), the socket is found by its inode in the process's
//! network namespace's TCP tables (`/proc/<pid>/net/tcp` and `tcp6`,
//! proc(5)), which costs milliseconds however few sockets there are: the
//! kernel walks every bucket of its established-connections hash (8 ms for
//! the pair on the project's VM, 262,144 buckets), once per new connection.
//!
//! Looked up in user space when a batch of statements is decoded, not at
//! the system call: a connection closed by then, and a Unix-domain socket
//! (whose client has no address), give NULL. Each connection costs one
//! `readlink` per batch; the peer is asked only for a socket not seen
//! before (a descriptor reused by a new connection has a new inode).
//!
//! A server with a process per connection (PostgreSQL's backends) keeps a
//! descriptor for one client all its life: the lookup is the statement's
//! client. A server with a thread per connection (MariaDB) reuses a
//! closed connection's descriptor for the next one, possibly within the
//! batch whose statements are being decoded: a descriptor's client is
//! given only once its socket was already the same at the batch before
//! (a connection's first batch, or the batch where its descriptor changed
//! hands, gives NULL: never another connection's client).

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;

/// A connection's client: its address and port (an IPv4 client of an
/// IPv6 socket as its IPv4 address, [`client`]).
pub(super) type Peer = SocketAddr;

/// What is known of one (pid, fd).
struct Known {
    inode: u64,
    peer: Option<Peer>,
    /// Checked against `/proc` in this batch.
    fresh: bool,
    /// Its statements are certainly this socket's ([`Peers`]' rule).
    certain: bool,
}

/// Clients of the connections seen, by (pid, fd).
pub(super) struct Peers {
    known: HashMap<(u32, i32), Known>,
    /// The server keeps a process per connection (see the module doc).
    process_per_connection: bool,
}

impl Peers {
    /// No connection known yet, for a server with a process per connection or not.
    pub(super) fn new(process_per_connection: bool) -> Peers {
        Peers {
            known: HashMap::new(),
            process_per_connection,
        }
    }

    /// Starts a batch: every connection is checked again (once) before its
    /// client is given.
    pub(super) fn new_batch(&mut self) {
        // Connections not seen for a batch are forgotten: their descriptors may be reused.
        self.known.retain(|_, k| k.fresh);
        for k in self.known.values_mut() {
            k.fresh = false;
        }
    }

    /// The client of `fd` in process `pid`, if it is a TCP socket still open.
    pub(super) fn peer(&mut self, pid: u32, fd: i32) -> Option<&Peer> {
        let stale = self.known.get(&(pid, fd)).is_none_or(|k| !k.fresh);
        if stale {
            match socket_inode(pid, fd) {
                None => {
                    self.known.remove(&(pid, fd));
                    return None;
                }
                Some(inode) => {
                    let same = self.known.get(&(pid, fd)).is_some_and(|k| k.inode == inode);
                    if same {
                        let k = self.known.get_mut(&(pid, fd)).expect("present");
                        // The same socket as at the batch before: no other connection had the descriptor since.
                        (k.fresh, k.certain) = (true, true);
                    } else {
                        let peer = socket_peer(pid, fd, inode);
                        self.known.insert(
                            (pid, fd),
                            Known {
                                inode,
                                peer,
                                fresh: true,
                                certain: self.process_per_connection,
                            },
                        );
                    }
                }
            }
        }
        self.known
            .get(&(pid, fd))
            .filter(|k| k.certain)
            .and_then(|k| k.peer.as_ref())
    }
}

/// The inode of the socket `fd` of `pid` is, if it is one.
fn socket_inode(pid: u32, fd: i32) -> Option<u64> {
    let link = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).ok()?;
    link.to_str()?
        .strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// The remote end of `pid`'s descriptor `fd`, if it is the socket `inode`
/// and a TCP one: asked of a copy of the descriptor, else looked up in the
/// TCP tables when the copy is refused (module doc).
fn socket_peer(pid: u32, fd: i32, inode: u64) -> Option<Peer> {
    let copy = match copy_descriptor(pid, fd) {
        Ok(copy) => copy,
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) => {
            return tcp_peer(pid, inode)
        }
        // The process or its descriptor is gone: no client.
        Err(_) => return None,
    };
    // The descriptor may have changed hands since it was read as `inode`.
    let file = std::fs::File::from(copy);
    if !file.metadata().is_ok_and(|m| m.ino() == inode) {
        return None;
    }
    // A Unix-domain socket's address is not an IP one: an error, so no client.
    let remote = TcpStream::from(OwnedFd::from(file)).peer_addr().ok()?;
    Some(client(remote))
}

/// A copy, in this process, of `pid`'s descriptor `fd` (pidfd_open(2) and
/// pidfd_getfd(2), Linux 5.6; the caller needs ptrace access to `pid`).
fn copy_descriptor(pid: u32, fd: i32) -> io::Result<OwnedFd> {
    let owned = |ret: libc::c_long| {
        if ret < 0 {
            Err(io::Error::last_os_error())
        } else {
            // SAFETY: the system call returned a new descriptor that nothing else owns.
            Ok(unsafe { OwnedFd::from_raw_fd(ret as i32) })
        }
    };
    // SAFETY: pidfd_open takes a pid and flags, and returns a descriptor or -1.
    let pidfd = owned(unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) })?;
    // SAFETY: pidfd_getfd takes a pidfd, a descriptor number of that process and flags.
    owned(unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) })
}

/// A client as the rows give it: an IPv4 client of a dual-stack listener
/// (`::ffff:10.0.0.10`) as its IPv4 address, as PostgreSQL shows it.
pub(super) fn client(addr: SocketAddr) -> Peer {
    match addr.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), addr.port()),
            None => addr,
        },
        IpAddr::V4(_) => addr,
    }
}

/// The remote end of the TCP socket `inode` in `pid`'s network namespace,
/// from its TCP tables.
fn tcp_peer(pid: u32, inode: u64) -> Option<Peer> {
    ["tcp", "tcp6"].iter().find_map(|table| {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).ok()?;
        text.lines().skip(1).find_map(|line| remote_of(line, inode))
    })
}

/// The remote address of a `/proc/net/tcp{,6}` line if its inode is `inode`:
/// `sl local rem st tx:rx tr:when retrnsmt uid timeout inode …`, addresses
/// as `HEX:PORT` with the address in the kernel's 32-bit words (host byte
/// order, little-endian here), the port in big-endian hex.
fn remote_of(line: &str, inode: u64) -> Option<Peer> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    if fields.get(9)?.parse::<u64>().ok()? != inode {
        return None;
    }
    let (addr, port) = fields.get(2)?.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    // Each word printed as a u32 of the host: its bytes in memory are the address's.
    let words: Vec<[u8; 4]> = (0..addr.len() / 8)
        .map(|i| u32::from_str_radix(addr.get(i * 8..i * 8 + 8)?, 16).ok())
        .map(|w| w.map(u32::to_ne_bytes))
        .collect::<Option<_>>()?;
    let ip = match words.as_slice() {
        [w] => IpAddr::V4(Ipv4Addr::from(*w)),
        [_, _, _, _] => {
            let mut bytes = [0u8; 16];
            for (i, w) in words.iter().enumerate() {
                bytes[i * 4..i * 4 + 4].copy_from_slice(w);
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some(client(SocketAddr::new(ip, port)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines as Linux 6.18 writes them: the address words in host order.
    #[test]
    fn remote_addresses_are_read_from_the_tcp_tables() {
        let v4 = "   3: 0100007F:1538 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000   104        0 91234 1 0000000000000000 20 4 30 10 -1";
        let at = |text: &str| Some(text.parse::<SocketAddr>().unwrap());
        assert_eq!(remote_of(v4, 91234), at("127.0.0.1:54000"));
        assert_eq!(remote_of(v4, 91235), None);
        let v6 = "   0: 00000000000000000000000001000000:1538 00000000000000000000000001000000:A0B2 01 00000000:00000000 00:00000000 00000000   104        0 777 1 0000000000000000 20 4 30 10 -1";
        assert_eq!(remote_of(v6, 777), at("[::1]:41138"));
        let mapped = "   1: 0000000000000000FFFF00000100007F:1538 0000000000000000FFFF00000A00000A:0050 01 00000000:00000000 00:00000000 00000000   104        0 778 1 0000000000000000 20 4 30 10 -1";
        assert_eq!(remote_of(mapped, 778), at("10.0.0.10:80"));
    }

    /// With a thread per connection, a socket's client is given from the
    /// second batch it is seen in; with a process per connection at once.
    #[test]
    fn a_shared_process_gives_a_client_once_its_socket_was_seen_before() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&server);
        let me = std::process::id();
        let want = client.local_addr().unwrap();
        let mut per_process = Peers::new(true);
        per_process.new_batch();
        assert_eq!(per_process.peer(me, fd), Some(&want));
        let mut shared = Peers::new(false);
        shared.new_batch();
        assert_eq!(
            shared.peer(me, fd),
            None,
            "first batch: another connection may have had it"
        );
        assert_eq!(shared.peer(me, fd), None, "still the first batch");
        shared.new_batch();
        assert_eq!(shared.peer(me, fd), Some(&want));
    }

    /// The descriptor's copy and the TCP tables give the same client, IPv4
    /// and IPv6; a Unix-domain socket, or a descriptor that is no longer the
    /// socket it was read as, has none.
    #[test]
    fn a_sockets_client_is_asked_of_a_copy_of_its_descriptor() {
        let me = std::process::id();
        for host in ["127.0.0.1:0", "[::1]:0"] {
            let listener = std::net::TcpListener::bind(host).unwrap();
            let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (server, _) = listener.accept().unwrap();
            let fd = server.as_raw_fd();
            let inode = socket_inode(me, fd).unwrap();
            let copy = copy_descriptor(me, fd).expect("pidfd_getfd of this process");
            assert_eq!(std::fs::File::from(copy).metadata().unwrap().ino(), inode);
            let want = Some(client.local_addr().unwrap());
            assert_eq!(socket_peer(me, fd, inode), want, "{host}");
            assert_eq!(tcp_peer(me, inode), want, "{host}");
            assert_eq!(
                socket_peer(me, fd, inode + 1),
                None,
                "another socket's inode"
            );
        }
        let (unix, _other) = std::os::unix::net::UnixStream::pair().unwrap();
        let fd = unix.as_raw_fd();
        assert_eq!(socket_peer(me, fd, socket_inode(me, fd).unwrap()), None);
    }

    /// A descriptor that is not a socket, or a process that is gone, has no client.
    #[test]
    fn what_is_not_an_open_tcp_socket_has_no_client() {
        let mut peers = Peers::new(true);
        peers.new_batch();
        assert_eq!(peers.peer(std::process::id(), 0), None);
        assert_eq!(peers.peer(u32::MAX, 3), None);
    }
}
