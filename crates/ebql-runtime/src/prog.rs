//! Loading generated programs (any program type; attaching is [`crate::attach`]).

use crate::{Result, RuntimeError};
use ebql_catalog::{Attach, EventKind, ProgType};
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// The verifier refused a program: always an eBQL bug. Carries the log tail
/// and the instruction the verifier stopped at, so the caller can name the
/// plan node that produced it.
#[derive(Debug)]
pub struct VerifierRejection {
    /// Name the program was loaded under.
    pub prog_name: String,
    /// errno of BPF_PROG_LOAD (EACCES or EINVAL).
    pub errno: i32,
    /// Last lines of the verifier log (log level 1|4).
    pub log_tail: String,
    /// Index of the last instruction the log mentions.
    pub pc: Option<usize>,
    /// Plan node that emitted that instruction (filled in by the caller).
    pub origin: Option<String>,
}

impl std::fmt::Display for VerifierRejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "the BPF verifier rejected program {} (errno {}): this is a bug in eBQL's code generator, please report it", self.prog_name, self.errno)?;
        if let (Some(pc), Some(origin)) = (self.pc, &self.origin) {
            writeln!(f, "instruction {pc} was generated for plan node: {origin}")?;
        }
        write!(f, "verifier log (tail):\n{}", self.log_tail)
    }
}

/// Run-time statistics of a loaded program (needs a [`crate::StatsGuard`] for run time).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProgStats {
    /// Times the program ran.
    pub run_cnt: u64,
    /// Total ns spent in the program.
    pub run_time_ns: u64,
    /// Runs skipped because another BPF program was running on the CPU.
    pub recursion_misses: u64,
}

/// A loaded BPF program.
#[derive(Debug)]
pub struct Program {
    fd: OwnedFd,
    /// Name the program was loaded under (`bpftool prog show` prints it).
    pub name: String,
    /// Its program type.
    pub prog_type: ProgType,
}

/// The `bpf_prog_load` arguments that depend on where a program attaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadTarget {
    /// The program type.
    pub prog_type: ProgType,
    /// `expected_attach_type` (`BPF_TRACE_RAW_TP`, `BPF_TRACE_FENTRY`, …; 0 if none).
    pub expected_attach_type: u32,
    /// `attach_btf_id` in vmlinux BTF (tp_btf, fentry, fexit; 0 if none).
    pub attach_btf_id: u32,
    /// Load with `BPF_F_SLEEPABLE` (uprobes only, on Linux 6.18; see
    /// `ebql_compiler::codegen::ProgramSpec::sleepable`).
    pub sleepable: bool,
}

impl LoadTarget {
    /// What loading a program for `kind` attached at `attach` needs.
    pub fn of(kind: EventKind, attach: &Attach) -> LoadTarget {
        // The same attach type the tracing link is created with.
        let expected_attach_type = crate::attach::btf::attach_type(kind).unwrap_or(0);
        let attach_btf_id = match attach {
            Attach::Btf { btf_id, .. } => *btf_id,
            _ => 0,
        };
        LoadTarget {
            prog_type: kind.program_type(),
            expected_attach_type,
            attach_btf_id,
            sleepable: false,
        }
    }

    /// A tracefs tracepoint program.
    pub const TRACEPOINT: LoadTarget = LoadTarget {
        prog_type: ProgType::Tracepoint,
        expected_attach_type: 0,
        attach_btf_id: 0,
        sleepable: false,
    };
}

/// libbpf's number for a program type.
fn prog_type_number(t: ProgType) -> libbpf_sys::bpf_prog_type {
    match t {
        ProgType::Tracepoint => libbpf_sys::BPF_PROG_TYPE_TRACEPOINT,
        ProgType::RawTracepoint => libbpf_sys::BPF_PROG_TYPE_RAW_TRACEPOINT,
        ProgType::Tracing => libbpf_sys::BPF_PROG_TYPE_TRACING,
        ProgType::Kprobe => libbpf_sys::BPF_PROG_TYPE_KPROBE,
        ProgType::PerfEvent => libbpf_sys::BPF_PROG_TYPE_PERF_EVENT,
        ProgType::SchedCls => libbpf_sys::BPF_PROG_TYPE_SCHED_CLS,
    }
}

/// Replaces the placeholder map indexes in `ld_imm64` map references
/// (src_reg BPF_PSEUDO_MAP_FD or BPF_PSEUDO_MAP_VALUE, imm = index) by fds.
pub(crate) fn patch_map_fds(insns: &mut [u8], fds: &[RawFd]) -> Result<()> {
    let mut pc = 0;
    while pc * 8 < insns.len() {
        let slot = &mut insns[pc * 8..pc * 8 + 8];
        if slot[0] == 0x18 {
            let src = slot[1] >> 4;
            if src == 1 || src == 2 {
                let idx = i32::from_le_bytes(slot[4..8].try_into().unwrap()) as usize;
                let fd = *fds.get(idx).ok_or_else(|| {
                    RuntimeError::Unsupported(format!(
                        "program refers to map #{idx} which was not created"
                    ))
                })?;
                slot[4..8].copy_from_slice(&fd.to_le_bytes());
            }
            pc += 2;
        } else {
            pc += 1;
        }
    }
    Ok(())
}

impl Program {
    /// Loads a tracefs tracepoint program ([`Program::load`] with [`LoadTarget::TRACEPOINT`]).
    pub fn load_tracepoint(name: &str, insns: &[u8], map_fds: &[RawFd]) -> Result<Program> {
        Program::load(name, LoadTarget::TRACEPOINT, insns, map_fds)
    }

    /// Loads a program from raw instruction bytes whose map references are
    /// indexes into `map_fds` and whose kfunc calls hold [`ebql_bpf::Kfunc`]
    /// indexes (replaced by their BTF ids here, [`crate::kfunc`]). On a
    /// verifier rejection, loads once more with log level 1|4 to return the
    /// log ([`RuntimeError::Verifier`]); a kfunc this kernel lacks is
    /// [`RuntimeError::Unsupported`].
    pub fn load(
        name: &str,
        target: LoadTarget,
        insns: &[u8],
        map_fds: &[RawFd],
    ) -> Result<Program> {
        let mut code = insns.to_vec();
        patch_map_fds(&mut code, map_fds)?;
        Program::load_resolved(name, target, code)
    }

    /// [`Program::load`] of code whose map references already hold fds
    /// ([`patch_map_fds`] done): only its kfunc calls are patched.
    pub(crate) fn load_resolved(
        name: &str,
        target: LoadTarget,
        mut code: Vec<u8>,
    ) -> Result<Program> {
        crate::kfunc::patch_kfunc_calls(&mut code)?;
        let cname = CString::new(name).expect("no NUL in program names");
        let license = c"GPL";
        let load = |log: Option<&mut Vec<u8>>| -> i32 {
            let mut opts = libbpf_sys::bpf_prog_load_opts {
                sz: std::mem::size_of::<libbpf_sys::bpf_prog_load_opts>() as _,
                expected_attach_type: target.expected_attach_type,
                attach_btf_id: target.attach_btf_id,
                prog_flags: if target.sleepable {
                    libbpf_sys::BPF_F_SLEEPABLE
                } else {
                    0
                },
                ..Default::default()
            };
            if let Some(buf) = log {
                opts.log_level = 1 | 4;
                opts.log_size = buf.len() as u32;
                opts.log_buf = buf.as_mut_ptr() as *mut _;
            }
            // SAFETY: code holds whole 8-byte instructions; opts outlive the call.
            unsafe {
                libbpf_sys::bpf_prog_load(
                    prog_type_number(target.prog_type),
                    cname.as_ptr(),
                    license.as_ptr(),
                    code.as_ptr() as *const libbpf_sys::bpf_insn,
                    (code.len() / 8) as _,
                    &mut opts,
                )
            }
        };
        let fd = load(None);
        if fd >= 0 {
            // SAFETY: fresh fd owned by us.
            return Ok(Program {
                fd: unsafe { OwnedFd::from_raw_fd(fd) },
                name: name.to_string(),
                prog_type: target.prog_type,
            });
        }
        if fd != -libc::EACCES && fd != -libc::EINVAL {
            return Err(RuntimeError::from_ret(
                format!("loading BPF program {name}"),
                fd,
            ));
        }
        let mut buf = vec![0u8; 16 << 20];
        let again = load(Some(&mut buf));
        if again >= 0 {
            // Loaded with logging on (e.g. a transient failure): keep it.
            // SAFETY: fresh fd owned by us.
            return Ok(Program {
                fd: unsafe { OwnedFd::from_raw_fd(again) },
                name: name.to_string(),
                prog_type: target.prog_type,
            });
        }
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        let log = String::from_utf8_lossy(&buf[..end]).to_string();
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(25)..].join("\n");
        // Verifier lines look like "17: (85) call bpf_map_lookup_elem#1".
        let pc = lines.iter().rev().find_map(|l| {
            let (n, rest) = l.split_once(": (")?;
            rest.get(..2)?;
            n.trim().parse::<usize>().ok()
        });
        Err(RuntimeError::Verifier(Box::new(VerifierRejection {
            prog_name: name.to_string(),
            errno: -fd,
            log_tail: tail,
            pc,
            origin: None,
        })))
    }

    /// The program's file descriptor (owned by `self`, closed on drop).
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The kernel's id of this program (as `bpftool prog show` lists it).
    pub fn id(&self) -> Result<u32> {
        Ok(self.info()?.id)
    }

    fn info(&self) -> Result<libbpf_sys::bpf_prog_info> {
        let mut info = libbpf_sys::bpf_prog_info::default();
        let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
        // SAFETY: info is a properly sized, zeroed struct.
        let r = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(self.fd(), &mut info, &mut len) };
        if r < 0 {
            return Err(RuntimeError::from_ret("reading BPF program info", r));
        }
        Ok(info)
    }

    /// run_cnt / run_time_ns / recursion_misses from BPF_OBJ_GET_INFO_BY_FD.
    pub fn stats(&self) -> Result<ProgStats> {
        let i = self.info()?;
        Ok(ProgStats {
            run_cnt: i.run_cnt,
            run_time_ns: i.run_time_ns,
            recursion_misses: i.recursion_misses,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patches_only_map_references() {
        // r1 = map_fd(1) (two slots), r0 = 0x5 ll (src 0, two slots), exit
        let mut code = vec![
            0x18, 0x11, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, //
            0x18, 0x00, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, //
            0x95, 0, 0, 0, 0, 0, 0, 0,
        ];
        patch_map_fds(&mut code, &[40, 41]).unwrap();
        assert_eq!(i32::from_le_bytes(code[4..8].try_into().unwrap()), 41);
        assert_eq!(i32::from_le_bytes(code[20..24].try_into().unwrap()), 5);
        assert!(patch_map_fds(&mut code.clone()[..16].to_vec(), &[]).is_err());
    }
}
