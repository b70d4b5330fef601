//! `openat-cold`: system calls whose string argument lies in a page the
//! process has never touched, so a probe reading it at the system call's
//! entry finds no page table entry and its non-faulting copy fails (the
//! system call itself then faults the page in and reads the path).

use std::ffi::CString;
use std::io;

const PAGE: usize = 4096;

/// `n` `openat(AT_FDCWD, p, O_RDONLY)` calls, each with `p` the start of
/// a fresh private read-only mapping of a memfd page holding `path` and its
/// NUL: the page is in the page cache, but not in this process's page
/// tables until the system call copies the path (each mapping is unmapped
/// after its call, so every call starts cold). A file that is opened is
/// closed again; a missing one (ENOENT) still made its call.
pub(crate) fn openat_cold(path: &[u8], n: u64) -> String {
    match run(path, n) {
        Ok(()) => format!("ok {n}"),
        Err(e) => format!("err openat-cold: {e}"),
    }
}

fn run(path: &[u8], n: u64) -> io::Result<()> {
    if path.len() >= PAGE || path.contains(&0) {
        return Err(io::Error::other("the path must fit a page and hold no NUL"));
    }
    let name = CString::new("ebql-cold").expect("no NUL");
    // SAFETY: memfd_create with a NUL-terminated name.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut page = vec![0u8; PAGE];
    page[..path.len()].copy_from_slice(path);
    // SAFETY: writes one page from a live buffer to our memfd.
    let written = unsafe { libc::pwrite(fd, page.as_ptr().cast(), PAGE, 0) };
    let result = if written != PAGE as isize {
        Err(io::Error::last_os_error())
    } else {
        (0..n).try_for_each(|_| one_call(fd))
    };
    // SAFETY: fd is our memfd.
    unsafe { libc::close(fd) };
    result
}

fn one_call(fd: libc::c_int) -> io::Result<()> {
    // SAFETY: a new private read-only mapping of one page of our memfd; it
    // is only passed to openat, which reads it, and unmapped below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            PAGE,
            libc::PROT_READ,
            libc::MAP_PRIVATE,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: p points at a NUL-terminated path within the mapping.
    let opened = unsafe {
        libc::openat(
            libc::AT_FDCWD,
            p as *const libc::c_char,
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    let err = io::Error::last_os_error();
    if opened >= 0 {
        // SAFETY: opened was just returned by openat.
        unsafe { libc::close(opened) };
    }
    // SAFETY: unmaps the mapping made above.
    unsafe { libc::munmap(p, PAGE) };
    if opened < 0 && err.raw_os_error() != Some(libc::ENOENT) {
        return Err(err);
    }
    Ok(())
}
