//! The per-event cache of helper results that the programs of a shared hook
//! share: the calling convention between a shared hook's chunk program
//! (`ebql_runtime::SharedHooks`), which owns the cache on its stack, and
//! the members' code the compiler generates (`CodegenOptions::event_cache`).
//!
//! A member is called with the context in r1 and a pointer to the cache in
//! r2. The cache is [`BYTES`] bytes: a word of flags at [`FLAGS`], then one
//! word per helper in [`SLOTS`]. A member that needs a helper's result reads
//! it from its slot when its flag is set, else calls the helper, stores the
//! result and sets the flag: the first member to ask pays the call, the
//! others a load. The caller zeroes the whole cache before the first member
//! of each event.

use crate::helper;

/// Byte offset of the flags word (bit `i` set: slot `i`'s word holds its result).
pub const FLAGS: i16 = 0;

/// The helpers whose results are cached, in slot order: no arguments, one
/// result that is the same for every member during one event.
pub const SLOTS: [i32; 4] = [
    helper::GET_CURRENT_PID_TGID,
    helper::KTIME_GET_NS,
    helper::GET_CURRENT_UID_GID,
    helper::GET_CURRENT_CGROUP_ID,
];

/// Size of the cache in bytes: the flags and one word per slot.
pub const BYTES: i16 = 8 * (1 + SLOTS.len() as i16);

/// The slot of helper `id`: (its flag bit, its word's byte offset), or
/// `None` for a helper that is not cached.
pub fn slot(id: i32) -> Option<(i32, i16)> {
    let i = SLOTS.iter().position(|&h| h == id)?;
    Some((1 << i, 8 * (1 + i as i16)))
}
