//! BPF maps created standalone (no ELF object): the code generator tells us
//! their shapes, we create them and patch their fds into the program.

use crate::btf::KernelBtf;
use crate::{Result, RuntimeError};
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::AtomicU64;

/// The map types eBQL uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapType {
    /// BPF_MAP_TYPE_PERCPU_HASH with BPF_F_NO_PREALLOC.
    PercpuHash,
    /// BPF_MAP_TYPE_HASH (shared by all CPUs) with BPF_F_NO_PREALLOC.
    HashNoPrealloc,
    /// BPF_MAP_TYPE_PERCPU_HASH, every element allocated at creation (large values).
    PercpuHashPrealloc,
    /// Array with BPF_F_MMAPABLE: shared memory with the probe.
    MmapArray,
    /// `max_entries` is the size in bytes.
    RingBuf,
    /// BPF_MAP_TYPE_HASH, preallocated: inserts on the probe's path never allocate.
    Hash,
    /// Plain BPF_MAP_TYPE_ARRAY (the inner map of [`MapType::ArrayOfMaps`]).
    Array,
    /// BPF_MAP_TYPE_PERCPU_ARRAY: a value per CPU per index.
    PercpuArray,
    /// BPF_MAP_TYPE_TASK_STORAGE (BPF_F_NO_PREALLOC, as the kernel requires):
    /// one value per thread, key 4 bytes (a pidfd from user space), no
    /// entry limit (`max_entries` 0), value a multiple of 8 bytes. Created
    /// with a BTF description of key and value (see `btf.rs`).
    TaskStorage,
    /// BPF_MAP_TYPE_STACK_TRACE: key u32 stack id, value the frames'
    /// instruction pointers (u64 each, zero after the last), buckets
    /// preallocated; filled by `bpf_get_stackid`.
    StackTrace,
    /// BPF_MAP_TYPE_PROG_ARRAY: slots holding program fds (4-byte key and
    /// value), the targets of `bpf_tail_call`.
    ProgArray,
    /// BPF_MAP_TYPE_ARRAY_OF_MAPS whose slots hold maps shaped like the map
    /// with this fd (values are map fds, 4 bytes).
    ArrayOfMaps {
        /// A map of the shape every slot must have.
        inner_map_fd: RawFd,
    },
}

/// An owned BPF map.
#[derive(Debug)]
pub struct Map {
    fd: OwnedFd,
    /// Name given at creation (the kernel keeps the first 15 bytes).
    pub name: String,
    /// Key size in bytes.
    pub key_size: u32,
    /// Value size in bytes (of one CPU's value for per-CPU maps).
    pub value_size: u32,
    /// Maximum number of entries; for a ring buffer, its size in bytes.
    pub max_entries: u32,
}

impl Map {
    /// Creates a map (BPF_MAP_CREATE). `name` is truncated to 15 bytes by the kernel.
    pub fn create(
        name: &str,
        ty: MapType,
        key_size: u32,
        value_size: u32,
        max_entries: u32,
    ) -> Result<Map> {
        let mut inner_map_fd = 0;
        let (map_type, flags) = match ty {
            // Elements are allocated on insert: preallocating a 20480-entry
            // per-CPU table takes ~25 ms at creation (measured here), half of
            // a query's startup; inserts happen once per group per window.
            MapType::PercpuHash => (
                libbpf_sys::BPF_MAP_TYPE_PERCPU_HASH,
                libbpf_sys::BPF_F_NO_PREALLOC,
            ),
            // A COUNT(DISTINCT) set sized for the worst window is mostly empty.
            MapType::HashNoPrealloc => {
                (libbpf_sys::BPF_MAP_TYPE_HASH, libbpf_sys::BPF_F_NO_PREALLOC)
            }
            MapType::PercpuHashPrealloc => (libbpf_sys::BPF_MAP_TYPE_PERCPU_HASH, 0),
            MapType::MmapArray => (libbpf_sys::BPF_MAP_TYPE_ARRAY, libbpf_sys::BPF_F_MMAPABLE),
            MapType::RingBuf => (libbpf_sys::BPF_MAP_TYPE_RINGBUF, 0),
            MapType::Hash => (libbpf_sys::BPF_MAP_TYPE_HASH, 0),
            MapType::Array => (libbpf_sys::BPF_MAP_TYPE_ARRAY, 0),
            MapType::PercpuArray => (libbpf_sys::BPF_MAP_TYPE_PERCPU_ARRAY, 0),
            MapType::StackTrace => (libbpf_sys::BPF_MAP_TYPE_STACK_TRACE, 0),
            MapType::ProgArray => (libbpf_sys::BPF_MAP_TYPE_PROG_ARRAY, 0),
            MapType::TaskStorage => (
                libbpf_sys::BPF_MAP_TYPE_TASK_STORAGE,
                libbpf_sys::BPF_F_NO_PREALLOC,
            ),
            MapType::ArrayOfMaps { inner_map_fd: fd } => {
                inner_map_fd = fd as u32;
                (libbpf_sys::BPF_MAP_TYPE_ARRAY_OF_MAPS, 0)
            }
        };
        // Kept until the map exists: the kernel takes its own reference.
        let btf = match ty {
            MapType::TaskStorage => Some(KernelBtf::local_storage(value_size)?),
            _ => None,
        };
        let opts = libbpf_sys::bpf_map_create_opts {
            sz: std::mem::size_of::<libbpf_sys::bpf_map_create_opts>() as _,
            map_flags: flags,
            inner_map_fd,
            btf_fd: btf.as_ref().map_or(0, |b| b.fd() as u32),
            btf_key_type_id: btf.as_ref().map_or(0, |b| b.key_type_id),
            btf_value_type_id: btf.as_ref().map_or(0, |b| b.value_type_id),
            ..Default::default()
        };
        let cname = CString::new(name).expect("map names have no NUL");
        // SAFETY: pointers are valid for the call; libbpf copies what it needs.
        let fd = unsafe {
            libbpf_sys::bpf_map_create(
                map_type,
                cname.as_ptr(),
                key_size,
                value_size,
                max_entries,
                &opts,
            )
        };
        if fd < 0 {
            return Err(RuntimeError::from_ret(
                format!("creating BPF map {name} ({ty:?}, {max_entries} entries)"),
                fd,
            ));
        }
        drop(btf);
        // SAFETY: fresh fd owned by us.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Map {
            fd,
            name: name.to_string(),
            key_size,
            value_size,
            max_entries,
        })
    }

    /// The map's file descriptor (owned by `self`, closed on drop).
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// All keys currently in a hash map (BPF_MAP_GET_NEXT_KEY walk).
    pub fn keys(&self) -> Result<Vec<Vec<u8>>> {
        let mut keys = Vec::new();
        let mut prev: Option<Vec<u8>> = None;
        loop {
            let mut next = vec![0u8; self.key_size as usize];
            let prev_ptr = prev
                .as_ref()
                .map_or(std::ptr::null(), |k| k.as_ptr() as *const libc::c_void);
            // SAFETY: buffers are key_size bytes.
            let r = unsafe {
                libbpf_sys::bpf_map_get_next_key(self.fd(), prev_ptr, next.as_mut_ptr() as *mut _)
            };
            if r == -libc::ENOENT {
                return Ok(keys);
            }
            if r < 0 {
                return Err(RuntimeError::from_ret(
                    format!("iterating map {}", self.name),
                    r,
                ));
            }
            keys.push(next.clone());
            prev = Some(next);
        }
    }

    /// Looks up a key; `out` must hold value_size bytes (× possible CPUs, each
    /// rounded up to 8, for per-CPU maps). Returns false if the key is absent.
    pub fn lookup(&self, key: &[u8], out: &mut [u8]) -> Result<bool> {
        // SAFETY: caller sized `out` as documented; key is key_size bytes.
        let r = unsafe {
            libbpf_sys::bpf_map_lookup_elem(
                self.fd(),
                key.as_ptr() as *const _,
                out.as_mut_ptr() as *mut _,
            )
        };
        match r {
            0 => Ok(true),
            r if r == -libc::ENOENT => Ok(false),
            r => Err(RuntimeError::from_ret(
                format!("reading map {}", self.name),
                r,
            )),
        }
    }

    /// Reads indexes `first .. first + values.len() / stride` of an array
    /// (per-CPU or not) in one BPF_MAP_LOOKUP_BATCH call (kernel ≥ 5.6;
    /// `generic_map_lookup_batch` walks the indexes from `in_batch + 1`).
    /// `values` holds whole values in [`Map::lookup`]'s layout (per-CPU:
    /// one per possible CPU, each `value_size` rounded up to 8 bytes), one
    /// after the other; `stride` is the bytes of one index's value(s).
    pub fn lookup_array_range(&self, first: u32, stride: usize, values: &mut [u8]) -> Result<()> {
        assert!(
            stride > 0 && values.len().is_multiple_of(stride),
            "whole values of {stride} bytes"
        );
        let want = (values.len() / stride) as u32;
        assert!(
            u64::from(first) + u64::from(want) <= u64::from(self.max_entries),
            "indexes inside the array"
        );
        let mut keys = vec![0u32; want as usize];
        let mut done = 0u32;
        while done < want {
            // The batch starts after `in_batch`; none starts at index 0.
            let mut prev = first + done;
            let after: *mut libc::c_void = if prev == 0 {
                std::ptr::null_mut()
            } else {
                prev -= 1;
                &mut prev as *mut u32 as *mut _
            };
            let mut out_batch = 0u32;
            let mut count = want - done;
            let opts = libbpf_sys::bpf_map_batch_opts {
                sz: std::mem::size_of::<libbpf_sys::bpf_map_batch_opts>() as _,
                ..Default::default()
            };
            let at = done as usize * stride;
            // SAFETY: keys holds `count` u32 keys and values `count` values of `stride` bytes from `at`; batch tokens are one key.
            let r = unsafe {
                libbpf_sys::bpf_map_lookup_batch(
                    self.fd(),
                    after,
                    &mut out_batch as *mut u32 as *mut _,
                    keys[done as usize..].as_mut_ptr() as *mut _,
                    values[at..].as_mut_ptr() as *mut _,
                    &mut count,
                    &opts,
                )
            };
            if r < 0 && r != -libc::ENOENT {
                return Err(RuntimeError::from_ret(
                    format!("reading map {}", self.name),
                    r,
                ));
            }
            if count == 0 {
                return Err(RuntimeError::from_ret(
                    format!("reading map {} at index {}", self.name, first + done),
                    -libc::ENOENT,
                ));
            }
            done += count;
        }
        Ok(())
    }

    /// Writes `value` at `key` (BPF_ANY: insert or replace). Both must be the
    /// map's key and value sizes; for a map-of-maps the value is a map fd.
    pub fn update(&self, key: &[u8], value: &[u8]) -> Result<()> {
        assert_eq!(
            (key.len(), value.len()),
            (self.key_size as usize, self.value_size as usize)
        );
        // SAFETY: sizes checked above.
        let r = unsafe {
            libbpf_sys::bpf_map_update_elem(
                self.fd(),
                key.as_ptr() as *const _,
                value.as_ptr() as *const _,
                libbpf_sys::BPF_ANY as u64,
            )
        };
        if r < 0 {
            return Err(RuntimeError::from_ret(
                format!("updating map {}", self.name),
                r,
            ));
        }
        Ok(())
    }

    /// Writes every CPU's value of a per-CPU map at `key` (BPF_ANY):
    /// `values` holds one value per possible CPU, each `value_size` rounded
    /// up to 8 bytes (the layout [`Map::lookup`] returns).
    pub fn update_percpu(&self, key: &[u8], values: &[u8]) -> Result<()> {
        let stride = (self.value_size as usize).div_ceil(8) * 8;
        assert!(
            key.len() == self.key_size as usize
                && stride > 0
                && values.len().is_multiple_of(stride),
            "per-CPU values of {stride} bytes each"
        );
        // SAFETY: key is key_size bytes; values holds whole per-CPU values (the kernel reads one per possible CPU).
        let r = unsafe {
            libbpf_sys::bpf_map_update_elem(
                self.fd(),
                key.as_ptr() as *const _,
                values.as_ptr() as *const _,
                libbpf_sys::BPF_ANY as u64,
            )
        };
        if r < 0 {
            return Err(RuntimeError::from_ret(
                format!("updating map {}", self.name),
                r,
            ));
        }
        Ok(())
    }

    /// Deletes a key (absent keys are fine).
    pub fn delete(&self, key: &[u8]) -> Result<()> {
        // SAFETY: key is key_size bytes.
        let r = unsafe { libbpf_sys::bpf_map_delete_elem(self.fd(), key.as_ptr() as *const _) };
        if r < 0 && r != -libc::ENOENT {
            return Err(RuntimeError::from_ret(
                format!("deleting from map {}", self.name),
                r,
            ));
        }
        Ok(())
    }
}

/// The single value of a BPF_F_MMAPABLE array, mapped into our memory: the
/// probe and user space share it (window generation, drop counters).
pub struct MmapArray {
    map: Map,
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory accessed only through atomics.
unsafe impl Send for MmapArray {}
unsafe impl Sync for MmapArray {}

impl MmapArray {
    /// Creates a one-entry mmapable array of `value_size` bytes and maps it.
    pub fn create(name: &str, value_size: u32) -> Result<MmapArray> {
        let map = Map::create(name, MapType::MmapArray, 4, value_size, 1)?;
        let page = 4096usize;
        let len = (value_size as usize).div_ceil(page) * page;
        // SAFETY: mapping a map fd we own; checked for MAP_FAILED.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                map.fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(RuntimeError::last_os(format!("mapping BPF map {name}")));
        }
        Ok(MmapArray {
            map,
            ptr: ptr as *mut u8,
            len,
        })
    }

    /// The underlying array map.
    pub fn map(&self) -> &Map {
        &self.map
    }

    /// The u64 at byte `offset` (8-aligned, inside the value).
    pub fn u64_at(&self, offset: u32) -> &AtomicU64 {
        assert!(offset.is_multiple_of(8) && (offset as usize) + 8 <= self.map.value_size as usize);
        // SAFETY: in bounds and aligned (checked above); the mapping lives as long as self.
        unsafe { &*(self.ptr.add(offset as usize) as *const AtomicU64) }
    }
}

impl Drop for MmapArray {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what we mapped.
        unsafe { libc::munmap(self.ptr as *mut _, self.len) };
    }
}
