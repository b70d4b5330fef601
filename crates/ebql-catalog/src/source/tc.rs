//! Packets at the traffic-control hook: `tc:<interface>:ingress|egress`
//! (program type SCHED_CLS, attached with a TCX link, read-only: the program
//! never changes a packet and always lets it go on, `TCX_NEXT`).
//!
//! Columns are `struct __sk_buff` fields the verifier lets a SCHED_CLS
//! program read (include/uapi/linux/bpf.h), as u32s at their context offset
//! ([`Access::Ctx`]); the system attributes are only `time` and `cpu`: a
//! packet has no task context at this hook.
//!
//! Designed for, not built yet: the parsed header columns (IPv4/IPv6
//! addresses, L4 protocol, ports, TCP flags) and a bounded payload prefix,
//! read with `bpf_skb_load_bytes` into the probe's stack.

use super::{Access, Attach, EventKind};
use crate::{CatalogError, EventName, EventSchema, FieldKind, SystemAttr, TraceField};

/// `<interface>:ingress|egress`.
pub(crate) fn parse_rest(rest: &str, input: &str) -> Result<EventName, CatalogError> {
    match rest.split_once([':', '/']) {
        Some((ifname, dir @ ("ingress" | "egress"))) if !ifname.is_empty() && ifname.len() < 16 => Ok(EventName::new(EventKind::Tc, ifname, dir)),
        _ => Err(CatalogError::BadEventName { input: input.to_string(), hint: "expected `tc:<interface>:ingress` or `tc:<interface>:egress`, e.g. tc:eth0:ingress".into() }),
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

/// The interface index of `ifname` in this network namespace, if it exists.
pub fn ifindex(ifname: &str) -> Option<u32> {
    let text = std::fs::read_to_string(format!("/sys/class/net/{ifname}/ifindex")).ok()?;
    text.trim().parse().ok()
}

/// The schema of the packet table.
///
/// Errors: [`CatalogError::UnknownEvent`] when there is no such interface
/// in this network namespace (with the closest interface name, if close).
pub(crate) fn schema(name: &EventName) -> Result<EventSchema, CatalogError> {
    if ifindex(&name.category).is_none() {
        let names = interfaces();
        let suggestion = crate::closest(&name.category, names.iter().map(String::as_str)).map(|n| format!("tc:{n}:{}", name.name));
        return Err(CatalogError::UnknownEvent { name: name.table_name(), suggestion });
    }
    let fields = SKB_FIELDS
        .iter()
        .map(|&(n, offset, _)| TraceField { name: n.into(), c_type: "__u32".into(), offset, size: 4, kind: FieldKind::Int { signed: false }, access: Access::Ctx })
        .collect();
    Ok(EventSchema { event: name.clone(), attach: Attach::Tc { ifname: name.category.clone(), egress: name.name == "egress" }, fields, attrs: vec![SystemAttr::Time, SystemAttr::Cpu] })
}

/// Interface names of this network namespace, sorted.
fn interfaces() -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir("/sys/class/net").map(|d| d.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect()).unwrap_or_default();
    out.sort();
    out
}

/// Both hooks of every interface whose `<ifname>:<direction>` matches `pattern`.
pub(crate) fn list(pattern: Option<&str>) -> Result<Vec<EventName>, CatalogError> {
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
        assert_eq!(s.attach, Attach::Tc { ifname: "lo".into(), egress: true });
        assert_eq!(s.attrs, vec![SystemAttr::Time, SystemAttr::Cpu]);
        assert_eq!(s.field("ifindex").unwrap().offset, 40);
        assert!(list(Some("lo:*")).unwrap().len() == 2);
        assert!(matches!(schema(&EventName::parse("tc:no_such_if0:ingress").unwrap()), Err(CatalogError::UnknownEvent { .. })));
    }
}
