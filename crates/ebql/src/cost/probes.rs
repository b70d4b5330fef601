//! The calibration's own BPF programs, assembled directly (no query):
//! an empty program per hook type, and one program per measured operation
//! for the tracefs `sys_enter_pread64` hook. Every operation program starts
//! with the pid test of the calibrating process, so events of other
//! processes cost every program the same and cancel out in the differences.

use ebql_bpf::{helper, AluOp, Assembler, JmpCond, Program, Reg, Size, Src};

/// Placeholder map indexes of the operation programs (`CalibrationMaps`).
pub mod maps {
    /// Per-CPU hash, key u64 0 present, value u64.
    pub const PERCPU_HASH: i32 = 0;
    /// Preallocated hash, key u64 0 present, value u64.
    pub const HASH: i32 = 1;
    /// Array, one u64.
    pub const ARRAY: i32 = 2;
    /// Per-CPU array, one u64.
    pub const PERCPU_ARRAY: i32 = 3;
    /// Task storage, u64 value.
    pub const TASK: i32 = 4;
    /// Ring buffer.
    pub const RINGBUF: i32 = 5;
    /// Stack traces.
    pub const STACKS: i32 = 6;
    /// Preallocated hash, empty: insert + delete each event.
    pub const CYCLE: i32 = 7;
    /// Per-CPU array, one 1024-byte value: the buffer string reads write to.
    pub const SCRATCH: i32 = 8;
}

/// Bytes of the ring buffer the record programs write into.
pub const RINGBUF_BYTES: u32 = 32 << 20;

/// Stack offset of the u64 key 0.
const KEY: i16 = -8;
/// Stack offset of an u64 value to write.
const VALUE: i16 = -16;
/// Stack offset of a 16-byte comm buffer.
const COMM: i16 = -32;

/// One measured operation: a program that does it `reps` times after the
/// pid test, and the program it is compared with (`base`).
pub struct OpProbe {
    /// Name of the measurement (`helper:bpf_ktime_get_ns`, `map:hash:lookup`, `str:64`, …).
    pub key: String,
    /// Name of the probe whose run time is subtracted.
    pub base: &'static str,
    /// How many times the program does the operation.
    pub reps: u32,
    /// The program (map references are the placeholder indexes of [`maps`]).
    pub program: Program,
}

impl OpProbe {
    /// Non-call instructions a run executes on the pid-matched path (every
    /// instruction of these straight-line programs but the early exit).
    pub fn insns(&self) -> usize {
        let v = &self.program.insns;
        let (mut n, mut pc) = (0, 0);
        while pc < v.len() {
            n += (v[pc].code != 0x85) as usize;
            pc += if v[pc].is_ld_imm64() { 2 } else { 1 };
        }
        n
    }
}

/// `r0 = 0; exit`: the fixed cost of any program at a hook.
pub fn empty() -> Program {
    let mut a = Assembler::new();
    a.mov64(Reg::R0, Src::Imm(0));
    a.exit();
    a.finish().expect("empty program")
}

/// Adds one to the u64 at index 0 of the per-CPU array `map`: counts the
/// events at a hook (for event rates), no helper but the inlined lookup.
pub fn counter(map: i32) -> Program {
    let mut a = Assembler::new();
    let out = a.new_label();
    a.st_imm(Size::W, Reg::R10, -4, 0);
    a.ld_map_fd(Reg::R1, map);
    a.mov64(Reg::R2, Src::Reg(Reg::R10));
    a.alu64(AluOp::Add, Reg::R2, Src::Imm(-4));
    a.call(helper::MAP_LOOKUP_ELEM);
    a.jmp(JmpCond::Eq, Reg::R0, Src::Imm(0), out);
    a.ldx(Size::DW, Reg::R1, Reg::R0, 0);
    a.alu64(AluOp::Add, Reg::R1, Src::Imm(1));
    a.stx(Size::DW, Reg::R0, 0, Reg::R1);
    a.bind(out);
    a.mov64(Reg::R0, Src::Imm(0));
    a.exit();
    a.finish().expect("counter program")
}

/// A program builder: prologue (ctx in r6, key and value on the stack, the
/// pid test), the body, the common exit.
struct Builder {
    a: Assembler,
    out: ebql_bpf::Label,
}

impl Builder {
    fn new(pid: u32) -> Builder {
        let mut a = Assembler::new();
        let out = a.new_label();
        a.mov64(Reg::R6, Src::Reg(Reg::R1));
        a.st_imm(Size::DW, Reg::R10, KEY, 0);
        a.st_imm(Size::DW, Reg::R10, VALUE, 1);
        a.call(helper::GET_CURRENT_PID_TGID);
        a.alu64(AluOp::Rsh, Reg::R0, Src::Imm(32));
        a.jmp(JmpCond::Ne, Reg::R0, Src::Imm(pid as i32), out);
        Builder { a, out }
    }

    /// `r7` = the 1024-byte per-CPU scratch value (exit if NULL).
    fn scratch(&mut self) {
        self.lookup(maps::SCRATCH);
        self.a.jmp(JmpCond::Eq, Reg::R0, Src::Imm(0), self.out);
        self.a.mov64(Reg::R7, Src::Reg(Reg::R0));
    }

    fn key_args(&mut self, map: i32) {
        self.a.ld_map_fd(Reg::R1, map);
        self.a.mov64(Reg::R2, Src::Reg(Reg::R10));
        self.a.alu64(AluOp::Add, Reg::R2, Src::Imm(KEY as i32));
    }

    fn lookup(&mut self, map: i32) {
        self.key_args(map);
        self.a.call(helper::MAP_LOOKUP_ELEM);
    }

    fn update(&mut self, map: i32, flags: u64) {
        self.key_args(map);
        self.a.mov64(Reg::R3, Src::Reg(Reg::R10));
        self.a.alu64(AluOp::Add, Reg::R3, Src::Imm(VALUE as i32));
        self.a.mov64(Reg::R4, Src::Imm(flags as i32));
        self.a.call(helper::MAP_UPDATE_ELEM);
    }

    fn delete(&mut self, map: i32) {
        self.key_args(map);
        self.a.call(helper::MAP_DELETE_ELEM);
    }

    fn finish(mut self) -> Program {
        self.a.bind(self.out);
        self.a.mov64(Reg::R0, Src::Imm(0));
        self.a.exit();
        self.a.finish().expect("calibration program")
    }
}

/// Helpers measured by id alone: (kernel name, id).
pub const HELPERS: [(&str, i32); 8] = [
    ("bpf_get_current_pid_tgid", helper::GET_CURRENT_PID_TGID),
    ("bpf_ktime_get_ns", helper::KTIME_GET_NS),
    ("bpf_get_current_comm", helper::GET_CURRENT_COMM),
    ("bpf_get_current_uid_gid", helper::GET_CURRENT_UID_GID),
    ("bpf_get_smp_processor_id", helper::GET_SMP_PROCESSOR_ID),
    ("bpf_get_current_cgroup_id", helper::GET_CURRENT_CGROUP_ID),
    ("bpf_get_current_task_btf", helper::GET_CURRENT_TASK_BTF),
    ("bpf_get_current_task", helper::GET_CURRENT_TASK),
];

/// String read sizes measured (the buffer of the traced pread64 holds that many non-NUL bytes).
pub const STR_SIZES: [u32; 4] = [16, 64, 256, 1024];
/// `bpf_probe_read_kernel` sizes measured (from the tracepoint record).
pub const READ_SIZES: [u32; 2] = [8, 32];
/// Ring-buffer record sizes measured.
pub const RECORD_SIZES: [u32; 2] = [16, 256];
/// Instructions in the `insns` probe.
pub const INSN_GROUPS: usize = 70;

/// Every operation program for `sys_enter_pread64` traced from process
/// `pid`, whose `buf` argument is at `buf_off` in the tracepoint record.
pub fn op_probes(pid: u32, buf_off: i16) -> Vec<OpProbe> {
    let mut out = Vec::new();
    let mut push = |key: String, base: &'static str, reps: u32, program: Program| {
        out.push(OpProbe {
            key,
            base,
            reps,
            program,
        })
    };
    push("pidtest".into(), "empty", 1, Builder::new(pid).finish());
    // Loads from the record, stores to the stack, ALU: what filters and keys are made of.
    let mut b = Builder::new(pid);
    for k in 0..INSN_GROUPS {
        b.a.ldx(Size::DW, Reg::R1, Reg::R6, 8 * (k % 4) as i16 + 16);
        b.a.alu64(AluOp::Add, Reg::R1, Src::Imm(k as i32));
        b.a.stx(Size::DW, Reg::R10, -40 - 8 * (k % 8) as i16, Reg::R1);
    }
    push(
        "insns".into(),
        "pidtest",
        (3 * INSN_GROUPS) as u32,
        b.finish(),
    );
    for (name, id) in HELPERS {
        let mut b = Builder::new(pid);
        for _ in 0..4 {
            if id == helper::GET_CURRENT_COMM {
                b.a.mov64(Reg::R1, Src::Reg(Reg::R10));
                b.a.alu64(AluOp::Add, Reg::R1, Src::Imm(COMM as i32));
                b.a.mov64(Reg::R2, Src::Imm(16));
            }
            b.a.call(id);
        }
        push(format!("helper:{name}"), "pidtest", 4, b.finish());
    }
    for (class, map) in [
        ("percpu_hash", maps::PERCPU_HASH),
        ("hash", maps::HASH),
        ("array", maps::ARRAY),
        ("percpu_array", maps::PERCPU_ARRAY),
    ] {
        let mut b = Builder::new(pid);
        for _ in 0..4 {
            b.lookup(map);
        }
        push(format!("map:{class}:lookup"), "pidtest", 4, b.finish());
    }
    for (class, map) in [
        ("percpu_hash", maps::PERCPU_HASH),
        ("hash", maps::HASH),
        ("array", maps::ARRAY),
        ("percpu_array", maps::PERCPU_ARRAY),
    ] {
        let mut b = Builder::new(pid);
        for _ in 0..2 {
            b.update(map, helper::BPF_ANY);
        }
        push(format!("map:{class}:update"), "pidtest", 2, b.finish());
    }
    // A pairing's hash start: insert an absent key, then delete it.
    let mut b = Builder::new(pid);
    b.update(maps::CYCLE, helper::BPF_NOEXIST);
    b.delete(maps::CYCLE);
    push("map:hash:insert+delete".into(), "pidtest", 1, b.finish());
    // Task storage: the thread's slot (created by the first run, then present).
    let mut b = Builder::new(pid);
    for _ in 0..2 {
        b.a.call(helper::GET_CURRENT_TASK_BTF);
        b.a.mov64(Reg::R2, Src::Reg(Reg::R0));
        b.a.ld_map_fd(Reg::R1, maps::TASK);
        b.a.mov64(Reg::R3, Src::Imm(0));
        b.a.mov64(
            Reg::R4,
            Src::Imm(helper::BPF_LOCAL_STORAGE_GET_F_CREATE as i32),
        );
        b.a.call(helper::TASK_STORAGE_GET);
    }
    push("map:task_storage:lookup".into(), "pidtest", 2, b.finish());
    let mut b = Builder::new(pid);
    b.scratch();
    push("scratch".into(), "pidtest", 1, b.finish());
    for n in STR_SIZES {
        let mut b = Builder::new(pid);
        b.scratch();
        b.a.mov64(Reg::R1, Src::Reg(Reg::R7));
        b.a.mov64(Reg::R2, Src::Imm(n as i32));
        b.a.ldx(Size::DW, Reg::R3, Reg::R6, buf_off);
        b.a.call(helper::PROBE_READ_USER_STR);
        push(format!("str:{n}"), "scratch", 1, b.finish());
    }
    for n in READ_SIZES {
        let mut b = Builder::new(pid);
        b.scratch();
        b.a.mov64(Reg::R1, Src::Reg(Reg::R7));
        b.a.mov64(Reg::R2, Src::Imm(n as i32));
        b.a.mov64(Reg::R3, Src::Reg(Reg::R6));
        b.a.call(helper::PROBE_READ_KERNEL);
        push(format!("read:{n}"), "scratch", 1, b.finish());
    }
    for n in RECORD_SIZES {
        let mut b = Builder::new(pid);
        b.a.ld_map_fd(Reg::R1, maps::RINGBUF);
        b.a.mov64(Reg::R2, Src::Imm(n as i32));
        b.a.mov64(Reg::R3, Src::Imm(0));
        b.a.call(helper::RINGBUF_RESERVE);
        b.a.jmp(JmpCond::Eq, Reg::R0, Src::Imm(0), b.out);
        for k in 0..n / 8 {
            b.a.stx(Size::DW, Reg::R0, 8 * k as i16, Reg::R6);
        }
        b.a.mov64(Reg::R1, Src::Reg(Reg::R0));
        b.a.mov64(Reg::R2, Src::Imm(helper::BPF_RB_NO_WAKEUP as i32));
        b.a.call(helper::RINGBUF_SUBMIT);
        push(format!("ringbuf:{n}"), "pidtest", 1, b.finish());
    }
    for (user, key) in [(true, "stackid:user"), (false, "stackid:kernel")] {
        let mut b = Builder::new(pid);
        b.a.mov64(Reg::R1, Src::Reg(Reg::R6));
        b.a.ld_map_fd(Reg::R2, maps::STACKS);
        b.a.mov64(Reg::R3, Src::Imm(if user { 1 << 8 } else { 0 }));
        b.a.call(helper::GET_STACKID);
        push(key.into(), "pidtest", 1, b.finish());
    }
    out
}
