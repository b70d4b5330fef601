//! How a column's value is read by the probe ([`Access`] and the pieces it
//! is made of: BTF field steps, USDT operands, packet fields). Shared by the
//! source modules (which build schemas) and the compiler (which emits the
//! reads); depends on nothing else in `source`.

/// How a column's value is read by the probe.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// `size` bytes at `ctx + offset` (the field's `offset`): a tracefs record
    /// field, a `pt_regs` register, a raw tracepoint argument slot, a
    /// `__sk_buff` field.
    Ctx,
    /// A `__data_loc` string of a tracefs record: the u32 at `ctx + offset`
    /// holds the string's offset from the record start (low 16 bits) and
    /// its length (high 16 bits).
    DataLoc,
    /// Through BTF: the u64 argument `arg` of the context, then `steps`.
    Btf {
        /// Index of the argument in the context's `u64` array.
        arg: u32,
        /// Field steps from the argument (empty: the argument itself).
        steps: Vec<BtfStep>,
        /// Direct loads allowed (tp_btf/fentry: the verifier tracks BTF
        /// pointers), else `bpf_probe_read_kernel` per pointer (raw_tp, kprobe).
        direct: bool,
    },
    /// A USDT argument (`.note.stapsdt` operand).
    Usdt(UsdtArg),
    /// A column parsed from the packet's bytes at the TC hook (read once per
    /// packet with `bpf_skb_load_bytes`; see [`PacketField`]).
    Packet(PacketField),
    /// A register of the current task's user-space state, as the kernel
    /// saved it on entry (`bpf_task_pt_regs(bpf_get_current_task_btf())`,
    /// Linux 5.15): inside a system call, its arguments and number. Read
    /// with direct loads, so only BTF-typed programs (tp_btf, fentry/fexit).
    TaskRegs {
        /// Byte offset of the register in `struct pt_regs` (kernel BTF).
        offset: u32,
    },
    /// A stack id from `bpf_get_stackid` into the query's stack map.
    StackId {
        /// User-space stack (true) or kernel stack (false).
        user: bool,
    },
}

/// One step of a BTF field path: the field at `offset` bytes of the struct
/// reached so far; when `deref` the value there is a pointer followed before
/// the next step.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BtfStep {
    /// Byte offset of the field in its struct.
    pub offset: u32,
    /// The field is a pointer, dereferenced to reach the next step.
    pub deref: bool,
}

/// A USDT argument operand (`-4@%eax`, `8@-8(%rbp)`, `-4@$5`), from
/// `.note.stapsdt` (systemtap's SDT v3 note format).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum UsdtArg {
    /// A constant.
    Const(i64),
    /// A register's value: offset of the register in `struct pt_regs`.
    Reg {
        /// Byte offset in `struct pt_regs` (x86-64).
        pt_regs: u32,
    },
    /// Memory at register + displacement, read with `bpf_probe_read_user`.
    Mem {
        /// Byte offset of the base register in `struct pt_regs`.
        pt_regs: u32,
        /// Displacement in bytes.
        disp: i32,
    },
}

/// A parsed packet column ([`Access::Packet`]): what the probe reads from
/// the packet's bytes. Multi-byte values are converted from network byte
/// order to numbers (port 80 reads 80). A packet whose headers do not
/// have a column (ARP has no addresses, UDP no TCP flags, an IPv4 fragment
/// after the first has no ports) reads 0 or the empty string there: test
/// `ethertype` (2048 IPv4, 34525 IPv6) and `l4proto` (6 TCP, 17 UDP) to
/// tell them apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PacketField {
    /// The Ethernet frame's ethertype (bytes 12–13).
    Ethertype,
    /// IPv4 source address as a number: a.b.c.d reads a·2²⁴ + b·2¹⁶ + c·2⁸ + d (Rust's `u32::from(Ipv4Addr)`, MySQL's `INET_ATON`).
    Saddr,
    /// IPv4 destination address, as [`PacketField::Saddr`].
    Daddr,
    /// First 8 bytes of the IPv6 source address as a big-endian number.
    Saddr6Hi,
    /// Last 8 bytes of the IPv6 source address as a big-endian number.
    Saddr6Lo,
    /// First 8 bytes of the IPv6 destination address.
    Daddr6Hi,
    /// Last 8 bytes of the IPv6 destination address.
    Daddr6Lo,
    /// IPv4 protocol or IPv6 next header (6 TCP, 17 UDP, 1 ICMP, 58 ICMPv6).
    L4proto,
    /// TCP or UDP source port.
    Sport,
    /// TCP or UDP destination port.
    Dport,
    /// TCP flags byte (FIN 1, SYN 2, RST 4, PSH 8, ACK 16, URG 32, ECE 64, CWR 128).
    TcpFlags,
    /// Payload bytes by the IP header's length: after the TCP/UDP header,
    /// or after the IP header for other IP protocols.
    PayloadLen,
    /// Bytes of the payload captured in `payload`: min(`payload_len`, 64, what the packet holds).
    PayloadCaplen,
    /// The payload's first bytes (up to [`PAYLOAD_PREFIX`](super::tc::PAYLOAD_PREFIX)).
    Payload,
}

/// For a column that points to a kernel struct (C type `struct x *`), how
/// to reach its fields (`describe`), e.g. `fields as prev.<field>: pid, comm, …`.
pub fn struct_fields_hint(column: &crate::TraceField) -> Option<String> {
    if !matches!(column.access, Access::Btf { .. }) {
        return None;
    }
    let btf = crate::btf::vmlinux().ok()?;
    crate::btf::fields_hint(btf, &column.name, &column.c_type)
}
