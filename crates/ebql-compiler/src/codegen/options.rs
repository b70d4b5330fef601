//! Tunables of the generated code ([`CodegenOptions`]): sizes of the maps
//! and the decisions the caller took for the plan (codegen takes none).

/// Tunables of the generated code.
#[derive(Clone, Copy, Debug)]
pub struct CodegenOptions {
    /// Groups per window the group table can hold (two windows coexist while draining).
    pub max_groups: u32,
    /// Ring buffer size in bytes (power of two, multiple of the page size).
    pub ringbuf_bytes: u32,
    /// Size in bytes of the differential oracle's tap ring buffer (power of
    /// two): it carries every event at the hook, so it is larger.
    pub tap_ringbuf_bytes: u32,
    /// Unmatched starts the hash start map of a pairing holds (starts in flight at once).
    pub max_pending: u32,
    /// (group, value) pairs per window the COUNT(DISTINCT) set can hold (two windows coexist while draining).
    pub max_distinct: u32,
    /// The kernel offers task-local storage (BPF_MAP_TYPE_TASK_STORAGE and
    /// `bpf_get_current_task_btf`): a pairing keyed by the thread alone keeps
    /// its start there instead of in a hash. The executor sets it from the
    /// runtime's feature probe (`ebql_runtime::task_storage_supported`).
    pub task_storage: bool,
    /// Byte offset of `comm` in the kernel's `struct task_struct`, when
    /// BTF-typed programs (tp_btf, fentry/fexit, the raw syscall hook on
    /// tp_btf) may read it with direct loads from
    /// `bpf_get_current_task_btf()` (Linux 5.11+, as task storage): a
    /// `comm` comparison then costs two loads instead of
    /// `bpf_get_current_comm` (~10 vs ~51 ns, [`crate::cost::CostModel::built_in`]).
    /// `None`: the helper. The physical pass sets it from
    /// [`crate::physical::RateSampler::task_comm_offset`].
    pub task_comm: Option<u16>,
    /// Uprobe and USDT programs that read user strings are loaded sleepable
    /// and fault the strings' pages in first ([`super::fault_in`]), so a
    /// string in a page not touched yet is read rather than NULL. The
    /// executor sets it from the runtime's feature probe
    /// (`ebql_runtime::faulting_reads`); off, those reads fail as on a tracepoint.
    pub faulting_user_strings: bool,
    /// Programs on hooks a process may share (tracefs, raw and BTF
    /// tracepoints) take a pointer to the hook's per-event cache of helper
    /// results in r2 ([`ebql_bpf::event_cache`]): run in a shared hook's
    /// chain, the first of its queries to need `pid_tgid` or the time pays
    /// the helper call, the others a load. Such a program is loaded behind
    /// a wrapper that owns the cache when it runs alone
    /// ([`crate::contract::ProgramSpec::event_cache`]). The executor sets
    /// it with its shared hooks.
    pub event_cache: bool,
    /// The processes the query sees (`-p`, `-c`, `--cgroup`): every event
    /// is filtered to them as if the WHERE said so ([`crate::scope`]).
    pub scope: Option<crate::scope::ProcessScope>,
    /// The planner's alternatives and the numbers its rules read ([`crate::choose`]).
    pub choices: crate::choose::PlanChoices,
}

impl Default for CodegenOptions {
    fn default() -> Self {
        // 8 MiB holds ~350k 16-byte records: > 100 ms of a 3 M events/s stream
        // between two 10 ms drains, and creates in ~3 ms.
        CodegenOptions {
            max_groups: 10240,
            ringbuf_bytes: 8 << 20,
            tap_ringbuf_bytes: 64 << 20,
            max_pending: 10240,
            max_distinct: 256 << 10,
            task_storage: true,
            task_comm: None,
            faulting_user_strings: true,
            event_cache: false,
            scope: None,
            choices: crate::choose::PlanChoices::new(),
        }
    }
}
