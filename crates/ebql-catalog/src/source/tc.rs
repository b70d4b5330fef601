//! Packets at the traffic-control hook: `tc:<interface>:ingress|egress`
//! (program type SCHED_CLS, attached with a TCX link, read-only: the program
//! never changes a packet and always lets it go on, `TCX_NEXT`).
//!
//! Columns are, first, `struct __sk_buff` fields the verifier lets a
//! SCHED_CLS program read (include/uapi/linux/bpf.h), as u32s at their
//! context offset ([`Access::Ctx`]); then the packet's parsed headers and a
//! payload prefix ([`Access::Packet`], [`PACKET_COLUMNS`]), which the probe
//! reads once per packet with `bpf_skb_load_bytes` into its stack (works on
//! non-linear packets too). The system attributes are only `time` and
//! `cpu`: a packet has no task context at this hook.
//!
//! Parsing assumes an Ethernet frame (veth, Ethernet, loopback): the
//! ethertype at byte 12, the IP header at byte 14. VLAN tags and IPv6
//! extension headers are not followed (`l4proto` is then the tag's ethertype
//! or the extension's next-header value, with zero ports).

use super::access::Access;
pub use super::access::PacketField;
use super::attach::Attach;
use super::interface::Source;
use super::kind::{EventKind, Feature, ProgType};
use crate::{Catalog, CatalogError, EventName, EventSchema, FieldKind, SystemAttr, TraceField};

/// The packet source: `tc:<interface>:ingress|egress`.
pub struct Tc;

impl Source for Tc {
    fn kinds(&self) -> &'static [EventKind] {
        &[EventKind::Tc]
    }

    fn spellings(&self, _: EventKind) -> &'static [&'static str] {
        &["tc"]
    }

    fn parse_rest(&self, _: EventKind, rest: &str, input: &str) -> Result<EventName, CatalogError> {
        parse_rest(rest, input)
    }

    fn list(
        &self,
        _: &Catalog,
        _: EventKind,
        pattern: Option<&str>,
    ) -> Result<Vec<EventName>, CatalogError> {
        list(pattern)
    }

    fn schema(&self, _: &Catalog, name: &EventName) -> Result<EventSchema, CatalogError> {
        schema(name)
    }

    fn program_type(&self, _: EventKind) -> ProgType {
        ProgType::SchedCls
    }

    fn features(&self, _: EventKind) -> &'static [Feature] {
        &[Feature::TcHook]
    }

    /// A packet at the TC hook has no task context.
    fn in_task_context(&self, _: EventKind) -> bool {
        false
    }

    /// `TCX_NEXT` (= `TC_ACT_UNSPEC`, -1): the packet goes on to the next
    /// program or the default action, untouched (include/uapi/linux/bpf.h).
    fn exit_value(&self, _: EventKind) -> i32 {
        -1
    }
}

/// `<interface>:ingress|egress`.
fn parse_rest(rest: &str, input: &str) -> Result<EventName, CatalogError> {
    match rest.split_once([':', '/']) {
        Some((ifname, dir @ ("ingress" | "egress"))) if !ifname.is_empty() && ifname.len() < 16 => {
            Ok(EventName::new(EventKind::Tc, ifname, dir))
        }
        _ => Err(CatalogError::BadEventName {
            input: input.to_string(),
            hint:
                "expected `tc:<interface>:ingress` or `tc:<interface>:egress`, e.g. tc:eth0:ingress"
                    .into(),
        }),
    }
}

/// The `struct __sk_buff` fields exposed: (name, offset, meaning).
pub const SKB_FIELDS: [(&str, u32, &str); 7] = [
    ("len", 0, "bytes of the packet, link-layer header included"),
    ("pkt_type", 4, "PACKET_HOST 0, BROADCAST 1, MULTICAST 2, OTHERHOST 3, OUTGOING 4"),
    ("mark", 8, "the packet's mark"),
    ("protocol", 16, "ethertype in network byte order as the kernel keeps it (IPv4 0x0800 reads 8, IPv6 0x86dd reads 56710)"),
    ("priority", 32, "queueing priority"),
    ("ingress_ifindex", 36, "interface the packet arrived on (0 for locally sent packets)"),
    ("ifindex", 40, "interface the packet is on"),
];

/// Longest payload prefix a packet row carries, in bytes.
pub const PAYLOAD_PREFIX: u32 = 64;

/// The parsed packet columns: (name, field, C type, meaning). `payload` is
/// a string (`char[64]`): its bytes up to the first NUL, invalid UTF-8
/// shown as U+FFFD; `payload_caplen` says how many bytes were captured.
pub const PACKET_COLUMNS: [(&str, PacketField, &str, &str); 14] = [
    (
        "ethertype",
        PacketField::Ethertype,
        "__u16",
        "ethertype of the frame (2048 IPv4, 34525 IPv6, 2054 ARP)",
    ),
    (
        "saddr",
        PacketField::Saddr,
        "__u32",
        "IPv4 source address as a number (a.b.c.d = a<<24 | b<<16 | c<<8 | d); 0 when not IPv4",
    ),
    (
        "daddr",
        PacketField::Daddr,
        "__u32",
        "IPv4 destination address as a number; 0 when not IPv4",
    ),
    (
        "saddr6_hi",
        PacketField::Saddr6Hi,
        "__u64",
        "IPv6 source address, first 8 bytes as a big-endian number; 0 when not IPv6",
    ),
    (
        "saddr6_lo",
        PacketField::Saddr6Lo,
        "__u64",
        "IPv6 source address, last 8 bytes",
    ),
    (
        "daddr6_hi",
        PacketField::Daddr6Hi,
        "__u64",
        "IPv6 destination address, first 8 bytes",
    ),
    (
        "daddr6_lo",
        PacketField::Daddr6Lo,
        "__u64",
        "IPv6 destination address, last 8 bytes",
    ),
    (
        "l4proto",
        PacketField::L4proto,
        "__u8",
        "IPv4 protocol / IPv6 next header (6 TCP, 17 UDP, 1 ICMP); 0 when not IP",
    ),
    (
        "sport",
        PacketField::Sport,
        "__u16",
        "TCP/UDP source port; 0 otherwise",
    ),
    (
        "dport",
        PacketField::Dport,
        "__u16",
        "TCP/UDP destination port; 0 otherwise",
    ),
    (
        "tcpflags",
        PacketField::TcpFlags,
        "__u8",
        "TCP flags (FIN 1, SYN 2, RST 4, PSH 8, ACK 16); 0 otherwise",
    ),
    (
        "payload_len",
        PacketField::PayloadLen,
        "__u32",
        "payload bytes (after the TCP/UDP header, else after the IP header) by the IP length",
    ),
    (
        "payload_caplen",
        PacketField::PayloadCaplen,
        "__u32",
        "payload bytes captured in `payload` (at most 64)",
    ),
    (
        "payload",
        PacketField::Payload,
        "char[64]",
        "first payload bytes as text, up to the first NUL",
    ),
];

impl PacketField {
    /// The column's field description (offset 0: the access says where).
    pub fn field(name: &str, f: PacketField, c_type: &str) -> TraceField {
        let (size, kind) = match c_type {
            "__u8" => (1, FieldKind::Int { signed: false }),
            "__u16" => (2, FieldKind::Int { signed: false }),
            "__u32" => (4, FieldKind::Int { signed: false }),
            "__u64" => (8, FieldKind::Int { signed: false }),
            _ => (
                PAYLOAD_PREFIX,
                FieldKind::CharArray {
                    len: PAYLOAD_PREFIX,
                },
            ),
        };
        TraceField {
            name: name.into(),
            c_type: c_type.into(),
            offset: 0,
            size,
            kind,
            access: Access::Packet(f),
        }
    }
}

/// The interface index of `ifname` in this network namespace, if it exists.
pub fn ifindex(ifname: &str) -> Option<u32> {
    let text = std::fs::read_to_string(format!("/sys/class/net/{ifname}/ifindex")).ok()?;
    text.trim().parse().ok()
}

/// The schema of the packet table.
///
/// Errors: [`CatalogError::UnknownEvent`] when there is no such interface
/// in this network namespace (with the closest interface name, if close).
fn schema(name: &EventName) -> Result<EventSchema, CatalogError> {
    if ifindex(&name.category).is_none() {
        let names = interfaces();
        let suggestion = crate::closest(&name.category, names.iter().map(String::as_str))
            .map(|n| format!("tc:{n}:{}", name.name));
        return Err(CatalogError::UnknownEvent {
            name: name.table_name(),
            suggestion,
        });
    }
    let fields = SKB_FIELDS
        .iter()
        .map(|&(n, offset, _)| TraceField {
            name: n.into(),
            c_type: "__u32".into(),
            offset,
            size: 4,
            kind: FieldKind::Int { signed: false },
            access: Access::Ctx,
        })
        .chain(
            PACKET_COLUMNS
                .iter()
                .map(|&(n, f, c_type, _)| PacketField::field(n, f, c_type)),
        )
        .collect();
    Ok(EventSchema {
        event: name.clone(),
        attach: Attach::Tc {
            ifname: name.category.clone(),
            egress: name.name == "egress",
        },
        fields,
        attrs: vec![SystemAttr::Time, SystemAttr::Cpu],
    })
}

/// Interface names of this network namespace, sorted.
fn interfaces() -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir("/sys/class/net")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// Both hooks of every interface whose `<ifname>:<direction>` matches `pattern`.
fn list(pattern: Option<&str>) -> Result<Vec<EventName>, CatalogError> {
    let mut out = Vec::new();
    for ifname in interfaces() {
        for dir in ["ingress", "egress"] {
            if pattern.is_none_or(|g| crate::glob_match(g, &format!("{ifname}:{dir}"))) {
                out.push(EventName::new(EventKind::Tc, ifname.clone(), dir));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_has_both_hooks_and_no_task_attributes() {
        let s = schema(&EventName::parse("tc:lo:egress").unwrap()).unwrap();
        assert_eq!(
            s.attach,
            Attach::Tc {
                ifname: "lo".into(),
                egress: true
            }
        );
        assert_eq!(s.attrs, vec![SystemAttr::Time, SystemAttr::Cpu]);
        assert_eq!(s.field("ifindex").unwrap().offset, 40);
        assert_eq!(
            s.field("dport").unwrap().access,
            Access::Packet(PacketField::Dport)
        );
        assert_eq!(s.field("dport").unwrap().size, 2);
        assert_eq!(
            s.field("payload").unwrap().kind,
            FieldKind::CharArray {
                len: PAYLOAD_PREFIX
            }
        );
        assert!(list(Some("lo:*")).unwrap().len() == 2);
        assert!(matches!(
            schema(&EventName::parse("tc:no_such_if0:ingress").unwrap()),
            Err(CatalogError::UnknownEvent { .. })
        ));
    }
}
