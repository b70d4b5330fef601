//! Kernel functions by name: their BTF ids in the running kernel (patched
//! into the generated code's kfunc calls at load), and whether sleepable
//! uprobe programs can fault user strings in ([`faulting_reads`]).

use crate::{Result, RuntimeError};
use ebql_bpf::{Kfunc, Reg, Size, Src};
use std::sync::OnceLock;

/// BTF ids of every [`Kfunc`] in vmlinux BTF, in [`Kfunc::ALL`] order (0 =
/// missing), or why the BTF could not be read. Looked up once per process.
fn ids() -> &'static std::result::Result<Vec<u32>, String> {
    static IDS: OnceLock<std::result::Result<Vec<u32>, String>> = OnceLock::new();
    IDS.get_or_init(|| {
        // SAFETY: plain libbpf call; the object is freed below.
        let btf = unsafe { libbpf_sys::btf__load_vmlinux_btf() };
        if btf.is_null() {
            return Err("this kernel has no BTF (/sys/kernel/btf/vmlinux)".into());
        }
        let ids = Kfunc::ALL
            .iter()
            .map(|k| {
                let name = std::ffi::CString::new(k.name()).expect("no NUL in kfunc names");
                // SAFETY: valid btf and NUL-terminated name.
                let id = unsafe {
                    libbpf_sys::btf__find_by_name_kind(
                        btf,
                        name.as_ptr(),
                        libbpf_sys::BTF_KIND_FUNC,
                    )
                };
                id.max(0) as u32
            })
            .collect();
        // SAFETY: allocated by btf__load_vmlinux_btf.
        unsafe { libbpf_sys::btf__free(btf) };
        Ok(ids)
    })
}

/// The BTF id of `k` in this kernel.
///
/// Errors: [`RuntimeError::Unsupported`] when the kernel has no BTF or no
/// such function (e.g. `bpf_copy_from_user_str` before Linux 6.12).
pub fn btf_id(k: Kfunc) -> Result<u32> {
    match ids() {
        Err(why) => Err(RuntimeError::Unsupported(why.clone())),
        Ok(ids) => match ids[k.index() as usize] {
            0 => Err(RuntimeError::Unsupported(format!(
                "this kernel has no kfunc {} in its BTF",
                k.name()
            ))),
            id => Ok(id),
        },
    }
}

/// Replaces the [`Kfunc`] index of every kfunc call (`call` with `src` =
/// `BPF_PSEUDO_KFUNC_CALL`) in `insns` by that function's BTF id.
pub(crate) fn patch_kfunc_calls(insns: &mut [u8]) -> Result<()> {
    let mut pc = 0;
    while pc * 8 < insns.len() {
        let slot = &mut insns[pc * 8..pc * 8 + 8];
        if slot[0] == 0x18 {
            pc += 2;
            continue;
        }
        if slot[0] == 0x85 && slot[1] >> 4 == ebql_bpf::insn::BPF_PSEUDO_KFUNC_CALL {
            let index = i32::from_le_bytes(slot[4..8].try_into().expect("4 bytes"));
            let k = Kfunc::from_index(index).ok_or_else(|| {
                RuntimeError::Unsupported(format!("program calls unknown kfunc #{index}"))
            })?;
            slot[4..8].copy_from_slice(&(btf_id(k)? as i32).to_le_bytes());
        }
        pc += 1;
    }
    Ok(())
}

/// Whether uprobe and USDT programs can be loaded sleepable and fault user
/// strings in (`ebql_compiler::CodegenOptions::faulting_user_strings`):
/// the three kfuncs exist, and a sleepable uprobe-type program calling them
/// loads. Decided by trying, once per process; the error says why not.
pub fn faulting_reads() -> std::result::Result<(), String> {
    static ANSWER: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    ANSWER
        .get_or_init(|| {
            for k in Kfunc::ALL {
                btf_id(k).map_err(|e| e.to_string())?;
            }
            let mut a = ebql_bpf::Assembler::new();
            a.st_imm(Size::DW, Reg::R10, -8, 0);
            a.mov64(Reg::R1, Src::Reg(Reg::R10));
            a.alu64(ebql_bpf::AluOp::Add, Reg::R1, Src::Imm(-8));
            a.mov64(Reg::R2, Src::Imm(8));
            a.mov64(Reg::R3, Src::Imm(0));
            a.mov64(Reg::R4, Src::Imm(0));
            a.call_kfunc(Kfunc::CopyFromUserStr);
            a.call_kfunc(Kfunc::RcuReadLock);
            a.call_kfunc(Kfunc::RcuReadUnlock);
            a.mov64(Reg::R0, Src::Imm(0));
            a.exit();
            let program = a.finish().expect("a straight-line program");
            let target = crate::LoadTarget {
                prog_type: ebql_catalog::ProgType::Kprobe,
                expected_attach_type: 0,
                attach_btf_id: 0,
                sleepable: true,
            };
            crate::Program::load("ebql_sleep_probe", target, &program.bytes(), &[])
                .map(drop)
                .map_err(|e| format!("the kernel refused a sleepable uprobe program ({e})"))
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kfunc_calls_get_btf_ids_and_other_calls_stay() {
        let mut a = ebql_bpf::Assembler::new();
        a.call(ebql_bpf::helper::KTIME_GET_NS);
        a.call_kfunc(Kfunc::RcuReadLock);
        a.mov64(Reg::R0, Src::Imm(0));
        a.exit();
        let mut code = a.finish().unwrap().bytes();
        let Ok(id) = btf_id(Kfunc::RcuReadLock) else {
            return; // a kernel without BTF: nothing to patch against
        };
        patch_kfunc_calls(&mut code).unwrap();
        assert_eq!(
            i32::from_le_bytes(code[4..8].try_into().unwrap()),
            ebql_bpf::helper::KTIME_GET_NS
        );
        assert_eq!(u32::from_le_bytes(code[12..16].try_into().unwrap()), id);
        assert!(id > 0);
    }
}
