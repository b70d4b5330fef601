//! `tc:<interface>:ingress|egress` on a veth pair the test creates (one end
//! in this network namespace, its peer in a namespace of its own) and
//! removes: a known number of UDP datagrams of known sizes, counted exactly.

mod common;

use common::*;
use std::net::UdpSocket;
use std::process::Command;

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("iproute2's ip");
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
}

/// A veth pair `<name>a` (here, 10.203.<n>.1/30) — `<name>b` (in netns `<name>`, 10.203.<n>.2/30); removed on drop.
struct Veth {
    name: String,
    here: String,
    peer_addr: String,
    local_addr: String,
}

impl Veth {
    fn new() -> Veth {
        let n = std::process::id() % 250 + 1;
        let name = format!("ebqltc{}", std::process::id() % 100_000);
        let (here, there) = (format!("{name}a"), format!("{name}b"));
        let (local_addr, peer_addr) = (format!("10.203.{n}.1"), format!("10.203.{n}.2"));
        ip(&["netns", "add", &name]);
        let v = Veth { name: name.clone(), here: here.clone(), peer_addr: peer_addr.clone(), local_addr: local_addr.clone() };
        ip(&["link", "add", &here, "type", "veth", "peer", "name", &there, "netns", &name]);
        ip(&["addr", "add", &format!("{local_addr}/30"), "dev", &here]);
        ip(&["link", "set", &here, "up"]);
        ip(&["-n", &name, "addr", "add", &format!("{peer_addr}/30"), "dev", &there]);
        ip(&["-n", &name, "link", "set", &there, "up"]);
        v
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", &self.here]).status();
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
    }
}

#[test]
fn egress_counts_every_datagram_by_length() {
    let _k = kernel_lock();
    require_root();
    let veth = Veth::new();
    // Frame length at the egress hook: Ethernet 14 + IPv4 20 + UDP 8 + payload.
    let sizes = [(333usize, 7u64), (1000, 3)];
    let sql = format!("SELECT len, COUNT(*) AS n FROM tc:{}:egress WHERE protocol = 8 GROUP BY len ORDER BY len", veth.here);
    let b = run_once(&sql, || {
        let s = UdpSocket::bind((veth.local_addr.as_str(), 0)).unwrap();
        for (size, count) in sizes {
            for _ in 0..count {
                s.send_to(&vec![b'x'; size], (veth.peer_addr.as_str(), 9999)).unwrap();
            }
        }
    });
    let got: Vec<(u64, u64)> = u64s(&b, "len").into_iter().zip(u64s(&b, "n")).collect();
    let want: Vec<(u64, u64)> = sizes.iter().map(|&(size, count)| (14 + 20 + 8 + size as u64, count)).collect();
    assert_eq!(got, want);
}

#[test]
fn ingress_sees_the_peer_port_unreachable_replies_and_a_missing_interface_is_an_error() {
    let _k = kernel_lock();
    require_root();
    let veth = Veth::new();
    // Datagrams to a closed port of the peer: its kernel answers each with an
    // ICMP port unreachable quoting our IPv4 + UDP header and the 100-byte
    // payload (14 + 20 + 8 + 20 + 8 + 100 bytes), which arrive at our ingress.
    // The socket is connected, so each reply is seen as ECONNREFUSED before
    // the next datagram goes out (4 stay under the kernel's ICMP burst of 6).
    let sql = format!("SELECT len, ifindex, COUNT(*) AS n FROM tc:{}:ingress WHERE protocol = 8 GROUP BY len, ifindex", veth.here);
    let b = run_once(&sql, || {
        let s = UdpSocket::bind((veth.local_addr.as_str(), 0)).unwrap();
        s.connect((veth.peer_addr.as_str(), 9)).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
        for _ in 0..4 {
            s.send(&[b'y'; 100]).unwrap();
            let e = s.recv(&mut [0u8; 16]).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}");
        }
    });
    let ifindex: u64 = std::fs::read_to_string(format!("/sys/class/net/{}/ifindex", veth.here)).unwrap().trim().parse().unwrap();
    let got: Vec<(u64, u64, u64)> = (0..b.num_rows()).map(|i| (u64s(&b, "len")[i], u64s(&b, "ifindex")[i], u64s(&b, "n")[i])).collect();
    assert_eq!(got, vec![(170, ifindex, 4)]);
    let err = ebql::Executor::new().compile("SELECT COUNT(*) FROM tc:ebql_nope0:ingress").map(|_| ()).unwrap_err().render();
    assert!(err.contains("ebql_nope0"), "{err}");
}
