//! `tc:<interface>:ingress|egress` on a veth pair the test creates (one end
//! in this network namespace, its peer in a namespace of its own) and
//! removes: a known number of UDP datagrams of known sizes, counted exactly.


use crate::common::*;
use std::net::UdpSocket;
use std::process::Command;

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("iproute2's ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
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
        let v = Veth {
            name: name.clone(),
            here: here.clone(),
            peer_addr: peer_addr.clone(),
            local_addr: local_addr.clone(),
        };
        ip(&[
            "link", "add", &here, "type", "veth", "peer", "name", &there, "netns", &name,
        ]);
        ip(&["addr", "add", &format!("{local_addr}/30"), "dev", &here]);
        ip(&["link", "set", &here, "up"]);
        ip(&[
            "-n",
            &name,
            "addr",
            "add",
            &format!("{peer_addr}/30"),
            "dev",
            &there,
        ]);
        ip(&["-n", &name, "link", "set", &there, "up"]);
        v
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.here])
            .status();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

#[test]
fn egress_counts_every_datagram_by_length() {
    let _k = kernel_lock();
    require_root();
    let veth = Veth::new();
    // Frame length at the egress hook: Ethernet 14 + IPv4 20 + UDP 8 + payload.
    let sizes = [(333usize, 7u64), (1000, 3)];
    let sql = format!(
        "SELECT len, COUNT(*) AS n FROM tc:{}:egress WHERE protocol = 8 GROUP BY len ORDER BY len",
        veth.here
    );
    let b = run_once(&sql, || {
        let s = UdpSocket::bind((veth.local_addr.as_str(), 0)).unwrap();
        for (size, count) in sizes {
            for _ in 0..count {
                s.send_to(&vec![b'x'; size], (veth.peer_addr.as_str(), 9999))
                    .unwrap();
            }
        }
    });
    let got: Vec<(u64, u64)> = u64s(&b, "len").into_iter().zip(u64s(&b, "n")).collect();
    let want: Vec<(u64, u64)> = sizes
        .iter()
        .map(|&(size, count)| (14 + 20 + 8 + size as u64, count))
        .collect();
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
        s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        for _ in 0..4 {
            s.send(&[b'y'; 100]).unwrap();
            let e = s.recv(&mut [0u8; 16]).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}");
        }
    });
    let ifindex: u64 = std::fs::read_to_string(format!("/sys/class/net/{}/ifindex", veth.here))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let got: Vec<(u64, u64, u64)> = (0..b.num_rows())
        .map(|i| (u64s(&b, "len")[i], u64s(&b, "ifindex")[i], u64s(&b, "n")[i]))
        .collect();
    assert_eq!(got, vec![(170, ifindex, 4)]);
    let err = ebql::Executor::new()
        .compile("SELECT COUNT(*) FROM tc:ebql_nope0:ingress")
        .map(|_| ())
        .unwrap_err()
        .render();
    assert!(err.contains("ebql_nope0"), "{err}");
}

fn addr_u32(a: &str) -> u64 {
    u32::from(a.parse::<std::net::Ipv4Addr>().unwrap()) as u64
}

#[test]
fn egress_udp_rows_carry_addresses_ports_lengths_and_payload_prefixes_filtered_by_port_in_the_kernel(
) {
    let _k = kernel_lock();
    require_root();
    let veth = Veth::new();
    let sql = format!(
        "SELECT ethertype, saddr, daddr, l4proto, sport, dport, tcpflags, payload_len, payload_caplen, payload FROM tc:{}:egress WHERE dport = 9999",
        veth.here
    );
    let compiled = ebql::Executor::new()
        .compile(&sql)
        .unwrap_or_else(|e| panic!("{}", e.render()));
    assert!(
        compiled
            .split
            .kernel
            .filters
            .iter()
            .any(|(_, text)| text.contains("dport")),
        "dport filter not in the kernel: {:?}",
        compiled.split.kernel.filters
    );
    let long: String = (0..100).map(|i| (b'a' + (i % 26) as u8) as char).collect();
    let payloads = ["hello eBQL".to_string(), "x".to_string(), long.clone()];
    let mut sport = 0;
    let b = run_once(&sql, || {
        let s = UdpSocket::bind((veth.local_addr.as_str(), 0)).unwrap();
        sport = s.local_addr().unwrap().port() as u64;
        for p in &payloads {
            s.send_to(p.as_bytes(), (veth.peer_addr.as_str(), 9999))
                .unwrap();
        }
        // Another port: not selected.
        s.send_to(b"other", (veth.peer_addr.as_str(), 9998))
            .unwrap();
    });
    let mut got: Vec<(Vec<u64>, String)> = (0..b.num_rows())
        .map(|i| {
            let ints = [
                "ethertype",
                "saddr",
                "daddr",
                "l4proto",
                "sport",
                "dport",
                "tcpflags",
                "payload_len",
                "payload_caplen",
            ]
            .iter()
            .map(|c| u64s(&b, c)[i])
            .collect();
            (ints, strings(&b, "payload")[i].clone())
        })
        .collect();
    got.sort_by(|a, b| a.1.cmp(&b.1));
    let mut want: Vec<(Vec<u64>, String)> = payloads
        .iter()
        .map(|p| {
            let cap = p.len().min(64) as u64;
            (
                vec![
                    0x0800,
                    addr_u32(&veth.local_addr),
                    addr_u32(&veth.peer_addr),
                    17,
                    sport,
                    9999,
                    0,
                    p.len() as u64,
                    cap,
                ],
                p[..cap as usize].to_string(),
            )
        })
        .collect();
    want.sort_by(|a, b| a.1.cmp(&b.1));
    assert_eq!(got, want);
}

#[test]
fn payload_groups_in_the_kernel_ignore_bytes_after_a_nul() {
    let _k = kernel_lock();
    require_root();
    let veth = Veth::new();
    let sql = format!("SELECT payload, COUNT(*) AS n FROM tc:{}:egress WHERE l4proto = 17 AND dport = 9997 GROUP BY payload ORDER BY payload", veth.here);
    let compiled = ebql::Executor::new()
        .compile(&sql)
        .unwrap_or_else(|e| panic!("{}", e.render()));
    assert!(
        matches!(
            compiled.split.kernel.output,
            ebql_compiler::split::KernelOutput::Groups(_)
        ),
        "GROUP BY payload not in the kernel"
    );
    let b = run_once(&sql, || {
        let s = UdpSocket::bind((veth.local_addr.as_str(), 0)).unwrap();
        // "ab\0x" and "ab\0y" are both the string "ab".
        for (p, times) in [(&b"ab\0x"[..], 2), (b"ab\0y", 1), (b"cd", 3)] {
            for _ in 0..times {
                s.send_to(p, (veth.peer_addr.as_str(), 9997)).unwrap();
            }
        }
    });
    let got: Vec<(String, u64)> = strings(&b, "payload")
        .into_iter()
        .zip(u64s(&b, "n"))
        .collect();
    assert_eq!(got, vec![("ab".to_string(), 3), ("cd".to_string(), 3)]);
}

/// Runs `serve` on a thread that has entered the network namespace `netns`
/// (setns affects only the calling thread), e.g. to accept connections there.
fn in_netns<T: Send + 'static>(
    netns: &str,
    serve: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    use std::os::fd::AsRawFd;
    let ns = std::fs::File::open(format!("/var/run/netns/{netns}")).expect("netns file");
    std::thread::spawn(move || {
        // SAFETY: a valid namespace fd; only this thread changes namespace.
        assert_eq!(
            unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) },
            0,
            "setns: {}",
            std::io::Error::last_os_error()
        );
        serve()
    })
}

/// The framework study's TC program (paper 001, appendix: TCP packets with
/// their addresses and a payload prefix, the last 1,024 kept) as one query,
/// on a TCP connection across the veth pair: 1,030 requests of known text,
/// each one segment (TCP_NODELAY, and the next is sent after the server's
/// reply), so the query keeps exactly the last 1,024, newest first.
#[test]
fn the_study_tcp_program_keeps_the_last_1024_requests_with_addresses_ports_and_payloads() {
    use std::io::{Read, Write};
    let _k = kernel_lock();
    require_root();
    let veth = Veth::new();
    const REQUESTS: usize = 1030;
    let request = |i: usize| {
        format!("GET /item/{i:04} HTTP/1.1\r\nHost: ebql.test\r\nUser-Agent: ebql-tc-test/1 padding to exceed sixty-four bytes\r\n\r\n")
    };
    let listener_addr = format!("{}:8080", veth.peer_addr);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let server = in_netns(&veth.name, move || {
        let l = std::net::TcpListener::bind(&listener_addr).unwrap();
        ready_tx.send(()).unwrap();
        let (mut c, _) = l.accept().unwrap();
        let mut got = Vec::new();
        for i in 0..REQUESTS {
            let mut buf = vec![0u8; request(i).len()];
            c.read_exact(&mut buf).unwrap();
            got.push(String::from_utf8(buf).unwrap());
            c.write_all(b"ok").unwrap();
        }
        got
    });
    ready_rx.recv().unwrap();
    let sql = format!(
        "SELECT time, saddr, daddr, sport, dport, payload_len, payload FROM tc:{}:egress WHERE l4proto = 6 AND payload_len > 0 ORDER BY time DESC LIMIT 1024",
        veth.here
    );
    let mut client_port = 0u64;
    let b = run_once(&sql, || {
        let mut c = std::net::TcpStream::connect((veth.peer_addr.as_str(), 8080)).unwrap();
        c.set_nodelay(true).unwrap();
        client_port = c.local_addr().unwrap().port() as u64;
        for i in 0..REQUESTS {
            c.write_all(request(i).as_bytes()).unwrap();
            let mut ok = [0u8; 2];
            c.read_exact(&mut ok).unwrap();
        }
    });
    assert_eq!(
        server.join().unwrap(),
        (0..REQUESTS).map(request).collect::<Vec<_>>()
    );
    let rows: Vec<(u64, u64, u64, u64, u64, String)> = (0..b.num_rows())
        .map(|i| {
            (
                u64s(&b, "saddr")[i],
                u64s(&b, "daddr")[i],
                u64s(&b, "sport")[i],
                u64s(&b, "dport")[i],
                u64s(&b, "payload_len")[i],
                strings(&b, "payload")[i].clone(),
            )
        })
        .collect();
    let want: Vec<_> = (REQUESTS - 1024..REQUESTS)
        .rev()
        .map(|i| {
            (
                addr_u32(&veth.local_addr),
                addr_u32(&veth.peer_addr),
                client_port,
                8080,
                request(i).len() as u64,
                request(i)[..64].to_string(),
            )
        })
        .collect();
    assert_eq!(rows, want);
    let times = u64s(&b, "time");
    assert!(times.windows(2).all(|w| w[0] > w[1]), "rows newest first");
}

/// Makes this process attach TC programs through clsact while it lives
/// (tests of one binary hold the kernel lock, so no other test sees it).
struct ForceClsact;

impl ForceClsact {
    fn new() -> ForceClsact {
        std::env::set_var(ebql_runtime::attach::FORCE_CLSACT_ENV, "1");
        ForceClsact
    }
}

impl Drop for ForceClsact {
    fn drop(&mut self) {
        std::env::remove_var(ebql_runtime::attach::FORCE_CLSACT_ENV);
    }
}

/// `tc <args>`'s output.
fn tc(args: &[&str]) -> String {
    let out = Command::new("tc")
        .args(args)
        .output()
        .expect("iproute2's tc");
    assert!(
        out.status.success(),
        "tc {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn clsact_fallback_counts_exactly_and_removes_exactly_what_it_created() {
    let _k = kernel_lock();
    require_root();
    let veth = Veth::new();
    let _clsact = ForceClsact::new();
    let sql = format!(
        "SELECT COUNT(*) AS n FROM tc:{}:egress WHERE l4proto = 17 AND dport = 9996",
        veth.here
    );
    let run = |datagrams: u64| {
        let mut during = (String::new(), String::new());
        let b = run_once(&sql, || {
            let s = UdpSocket::bind((veth.local_addr.as_str(), 0)).unwrap();
            for _ in 0..datagrams {
                s.send_to(b"clsact", (veth.peer_addr.as_str(), 9996))
                    .unwrap();
            }
            during = (
                tc(&["qdisc", "show", "dev", &veth.here]),
                tc(&["filter", "show", "dev", &veth.here, "egress"]),
            );
        });
        (u64s(&b, "n"), during)
    };
    // No qdisc on the interface: the query creates clsact and its filter, and removes both.
    assert!(!tc(&["qdisc", "show", "dev", &veth.here]).contains("clsact"));
    let (n, (qdisc, filter)) = run(5);
    assert_eq!(n, vec![5]);
    assert!(qdisc.contains("clsact"), "{qdisc}");
    assert!(
        filter.contains("bpf") && filter.contains("direct-action"),
        "{filter}"
    );
    assert!(
        !tc(&["qdisc", "show", "dev", &veth.here]).contains("clsact"),
        "the qdisc eBQL created is left behind"
    );
    // A clsact qdisc someone else created stays; only the query's filter goes.
    tc(&["qdisc", "add", "dev", &veth.here, "clsact"]);
    let (n, (_, filter)) = run(3);
    assert_eq!(n, vec![3]);
    assert!(filter.contains("direct-action"), "{filter}");
    assert!(
        tc(&["qdisc", "show", "dev", &veth.here]).contains("clsact"),
        "a qdisc eBQL did not create was removed"
    );
    assert_eq!(
        tc(&["filter", "show", "dev", &veth.here, "egress"]).trim(),
        "",
        "the query's filter is left behind"
    );
}

#[test]
fn ipv6_udp_rows_carry_both_address_halves_and_syn_filters_compile_to_the_kernel() {
    let _k = kernel_lock();
    require_root();
    let veth = Veth::new();
    let n = std::process::id() % 0xffff;
    let (local, peer) = (format!("fd00:eb:{n:x}::1"), format!("fd00:eb:{n:x}::2"));
    ip(&[
        "-6",
        "addr",
        "add",
        &format!("{local}/64"),
        "dev",
        &veth.here,
        "nodad",
    ]);
    ip(&[
        "-n",
        &veth.name,
        "-6",
        "addr",
        "add",
        &format!("{peer}/64"),
        "dev",
        &format!("{}b", veth.name),
        "nodad",
    ]);
    let sql = format!(
        "SELECT ethertype, saddr, saddr6_hi, saddr6_lo, daddr6_hi, daddr6_lo, l4proto, sport, dport, payload_len, payload FROM tc:{}:egress WHERE ethertype = 34525 AND dport = 9995",
        veth.here
    );
    let mut sport = 0;
    let b = run_once(&sql, || {
        let s = UdpSocket::bind((local.as_str(), 0)).unwrap();
        sport = s.local_addr().unwrap().port() as u64;
        s.send_to(b"over IPv6", (peer.as_str(), 9995)).unwrap();
    });
    let halves = |a: &str| {
        let v = u128::from(a.parse::<std::net::Ipv6Addr>().unwrap());
        ((v >> 64) as u64, v as u64)
    };
    let ((sh, sl), (dh, dl)) = (halves(&local), halves(&peer));
    let cols = [
        "ethertype",
        "saddr",
        "saddr6_hi",
        "saddr6_lo",
        "daddr6_hi",
        "daddr6_lo",
        "l4proto",
        "sport",
        "dport",
        "payload_len",
    ];
    let rows: Vec<Vec<u64>> = (0..b.num_rows())
        .map(|i| cols.iter().map(|c| u64s(&b, c)[i]).collect())
        .collect();
    assert_eq!(
        rows,
        vec![vec![34525, 0, sh, sl, dh, dl, 17, sport, 9995, 9]]
    );
    assert_eq!(strings(&b, "payload"), vec!["over IPv6"]);
    // README's SYN counter: the flag test runs in the kernel.
    let syn = format!("SELECT dport, COUNT(*) AS syns FROM tc:{}:ingress WHERE l4proto = 6 AND tcpflags & 18 = 2 GROUP BY dport", veth.here);
    let c = ebql::Executor::new()
        .compile(&syn)
        .unwrap_or_else(|e| panic!("{}", e.render()));
    assert!(
        c.split
            .kernel
            .filters
            .iter()
            .any(|(_, t)| t.contains("tcpflags")),
        "{:?}",
        c.split.kernel.filters
    );
}
