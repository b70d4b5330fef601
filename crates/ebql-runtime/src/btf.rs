//! BTF the kernel requires at map creation for some map types.
//!
//! Local-storage maps (task storage) are created only with a BTF description
//! of their key and value: `bpf_local_storage_map_alloc_check` refuses a map
//! without `btf_key_type_id`/`btf_value_type_id`, and
//! `bpf_local_storage_map_check_btf` wants the key to be a 4-byte int
//! (kernel/bpf/bpf_local_storage.c). We build that BTF with libbpf's writer
//! and load it into the kernel; the map keeps its own reference to it.

use crate::{Result, RuntimeError};
use std::ffi::CStr;

/// A BTF object loaded into the kernel (freed, with its fd, on drop).
pub(crate) struct KernelBtf {
    btf: *mut libbpf_sys::btf,
    /// Type id of the map key (`int`).
    pub key_type_id: u32,
    /// Type id of the map value.
    pub value_type_id: u32,
}

impl KernelBtf {
    /// BTF of a local-storage map: key `int`, value `struct ebql_start { u64 w[value_size / 8]; }`
    /// (`value_size` a positive multiple of 8).
    pub fn local_storage(value_size: u32) -> Result<KernelBtf> {
        assert!(
            value_size > 0 && value_size.is_multiple_of(8),
            "local-storage values are u64 words"
        );
        let what = "building the BTF of a task-storage map";
        // SAFETY: libbpf allocates; NULL (errno set) on failure.
        let btf = unsafe { libbpf_sys::btf__new_empty() };
        if btf.is_null() {
            return Err(RuntimeError::last_os(what));
        }
        let mut out = KernelBtf {
            btf,
            key_type_id: 0,
            value_type_id: 0,
        };
        let check = |id: i32| {
            if id < 0 {
                Err(RuntimeError::from_ret(what, id))
            } else {
                Ok(id)
            }
        };
        let name = |s: &'static CStr| s.as_ptr();
        // SAFETY: `btf` is valid until `out` drops; names are NUL-terminated statics libbpf copies.
        unsafe {
            let int = check(libbpf_sys::btf__add_int(
                btf,
                name(c"int"),
                4,
                libbpf_sys::BTF_INT_SIGNED as i32,
            ))?;
            let u64_ = check(libbpf_sys::btf__add_int(
                btf,
                name(c"unsigned long long"),
                8,
                0,
            ))?;
            let words = check(libbpf_sys::btf__add_array(btf, int, u64_, value_size / 8))?;
            let value = check(libbpf_sys::btf__add_struct(
                btf,
                name(c"ebql_start"),
                value_size,
            ))?;
            check(libbpf_sys::btf__add_field(btf, name(c"w"), words, 0, 0))?;
            let r = libbpf_sys::btf__load_into_kernel(btf);
            if r < 0 {
                return Err(RuntimeError::from_ret(
                    "loading the BTF of a task-storage map into the kernel",
                    r,
                ));
            }
            out.key_type_id = int as u32;
            out.value_type_id = value as u32;
        }
        Ok(out)
    }

    /// The kernel's fd of this BTF (valid while `self` lives).
    pub fn fd(&self) -> i32 {
        // SAFETY: `self.btf` is valid and loaded.
        unsafe { libbpf_sys::btf__fd(self.btf) }
    }
}

impl Drop for KernelBtf {
    fn drop(&mut self) {
        // SAFETY: we own `btf`; libbpf closes its fd.
        unsafe { libbpf_sys::btf__free(self.btf) };
    }
}
