//! Consuming a BPF ring buffer with libbpf. Probes submit with
//! BPF_RB_NO_WAKEUP, so we never sleep on epoll: the caller drains on a
//! short timer (about 10x cheaper per event than a wakeup per record,
//! measured on this project's VM).

use crate::map::Map;
use crate::{Result, RuntimeError};

/// How many leading bytes of a record hold values (the rest was never
/// written by the probe: a reserved record's tail is stale ring memory).
pub type UsedLen = Box<dyn Fn(&[u8]) -> usize + Send>;

/// What the visitor's callback returns to stop libbpf's consume once the
/// records the ring held at its start are visited (any negative value stops
/// it; this one is no error).
const BUDGET_SPENT: libc::c_int = -libc::ECHILD;

/// A visitor of records in place ([`RingBuffer::consume_each`]).
type Visit<'a> = &'a mut dyn FnMut(&[u8]);

/// Records are copied out into one contiguous buffer of fixed-size records,
/// or handed to a visitor where they lie.
struct Sink {
    record_size: usize,
    /// Copies only this many bytes of each record: a 2 KiB record holding
    /// a 100-byte buffer costs 100 bytes of copy.
    used: Option<UsedLen>,
    data: Vec<u8>,
    /// Where the next record goes in `data`.
    end: usize,
    /// While [`RingBuffer::consume_each`] runs: its visitor (a `*mut
    /// Visit`), which takes the records instead of `data`.
    visit: *mut libc::c_void,
    /// Records visited by the running `consume_each`.
    visited: usize,
    /// Bytes of the ring the running `consume_each` may still consume:
    /// what the ring held when it began.
    budget: u64,
    /// A panic of the visitor, resumed once libbpf has returned (a panic
    /// must not unwind through C).
    panic: Option<Box<dyn std::any::Any + Send>>,
}

unsafe extern "C" fn on_record(
    ctx: *mut libc::c_void,
    data: *mut libc::c_void,
    size: libbpf_sys::size_t,
) -> libc::c_int {
    // SAFETY: ctx is the Box<Sink> we registered; data has `size` readable bytes.
    let sink = unsafe { &mut *(ctx as *mut Sink) };
    let bytes = unsafe { std::slice::from_raw_parts(data as *const u8, size as usize) };
    let whole = sink.record_size.min(bytes.len());
    let n = sink
        .used
        .as_ref()
        .map_or(whole, |used| used(bytes).min(whole));
    if !sink.visit.is_null() {
        // SAFETY: consume_each set `visit` to its live visitor for this consume.
        let visit = unsafe { &mut *(sink.visit as *mut Visit) };
        let record = &bytes[..n];
        return match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| visit(record))) {
            Ok(()) => {
                sink.visited += 1;
                // A record takes its 8-byte header and its length rounded up to 8 bytes.
                let taken = (size + 8).div_ceil(8) * 8;
                sink.budget = sink.budget.saturating_sub(taken);
                if sink.budget == 0 {
                    BUDGET_SPENT
                } else {
                    0
                }
            }
            Err(panic) => {
                sink.panic = Some(panic);
                // Stops the consume; libbpf returns this.
                -libc::ECANCELED
            }
        };
    }
    let (at, end) = (sink.end, sink.end + sink.record_size);
    if sink.data.len() < end {
        // Zeroes only memory the buffer never held: a recycled buffer's
        // bytes past `n` keep an earlier record's (unused) bytes.
        sink.data.resize(end, 0);
    }
    sink.data[at..at + n].copy_from_slice(&bytes[..n]);
    sink.end = end;
    0
}

/// A libbpf ring_buffer consumer over one BPF_MAP_TYPE_RINGBUF map.
pub struct RingBuffer {
    rb: *mut libbpf_sys::ring_buffer,
    sink: Box<Sink>,
}

// SAFETY: the ring_buffer is only used through &mut self.
unsafe impl Send for RingBuffer {}

impl RingBuffer {
    /// Opens a consumer of fixed-size records.
    pub fn new(map: &Map, record_size: usize) -> Result<RingBuffer> {
        let mut sink = Box::new(Sink {
            record_size,
            used: None,
            data: Vec::new(),
            end: 0,
            visit: std::ptr::null_mut(),
            visited: 0,
            budget: 0,
            panic: None,
        });
        let ctx = &mut *sink as *mut Sink as *mut libc::c_void;
        // SAFETY: the callback and ctx stay valid for the ring buffer's lifetime (sink is boxed and owned by self).
        let rb = unsafe {
            libbpf_sys::ring_buffer__new(map.fd(), Some(on_record), ctx, std::ptr::null())
        };
        if rb.is_null() {
            return Err(RuntimeError::last_os("opening the ring buffer"));
        }
        Ok(RingBuffer { rb, sink })
    }

    /// Copies only the first `used(record)` bytes of each record (at most
    /// its size); its other bytes are left as the buffer held them (zeros,
    /// or an earlier record's bytes), so readers must not look past `used`.
    pub fn with_used_len(mut self, used: UsedLen) -> RingBuffer {
        self.sink.used = Some(used);
        self
    }

    /// Consumes everything available; returns the records as one buffer of
    /// `n * record_size` bytes.
    pub fn drain(&mut self) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        let end = self.drain_into(&mut out, 0)?;
        out.truncate(end);
        Ok(out)
    }

    /// Consumes everything available, writing the records into `out` from
    /// byte `at` on (no copy between buffers; `out` grows only when too
    /// short, and its bytes past `at` are overwritten, not cleared first:
    /// a reused buffer costs no zeroing); returns where the records end.
    /// `out`'s bytes past the returned end are stale.
    pub fn drain_into(&mut self, out: &mut Vec<u8>, at: usize) -> Result<usize> {
        if out.len() < at {
            out.resize(at, 0);
        }
        std::mem::swap(&mut self.sink.data, out);
        self.sink.end = at;
        // SAFETY: rb is valid until drop.
        let r = unsafe { libbpf_sys::ring_buffer__consume_n(self.rb, 1 << 22) };
        std::mem::swap(&mut self.sink.data, out);
        if r < 0 {
            return Err(RuntimeError::from_ret("consuming the ring buffer", r));
        }
        Ok(self.sink.end)
    }

    /// Hands each record available to `visit`, in order, where it lies in
    /// the ring buffer (its used bytes, as [`RingBuffer::with_used_len`]
    /// says): nothing is copied, and each record is freed in the ring
    /// once visited. Returns how many were visited. Only the records the
    /// ring held when it began are visited: libbpf's loop re-reads the
    /// probes' position, so a visitor slower than the probes would not
    /// return to its caller (to emit, or to stop) until 4M records. A
    /// panic of `visit` stops the consume and is resumed here.
    pub fn consume_each(&mut self, visit: &mut dyn FnMut(&[u8])) -> Result<usize> {
        // SAFETY: rb is valid until drop, and has its one ring (index 0).
        let held =
            unsafe { libbpf_sys::ring__avail_data_size(libbpf_sys::ring_buffer__ring(self.rb, 0)) };
        if held == 0 {
            return Ok(0);
        }
        let mut visit: Visit = visit;
        self.sink.visit = &mut visit as *mut Visit as *mut libc::c_void;
        self.sink.visited = 0;
        self.sink.budget = held as u64;
        // SAFETY: rb is valid until drop; `visit` outlives the call, and
        // the sink forgets it before this returns.
        let r = unsafe { libbpf_sys::ring_buffer__consume_n(self.rb, 1 << 22) };
        self.sink.visit = std::ptr::null_mut();
        if let Some(panic) = self.sink.panic.take() {
            std::panic::resume_unwind(panic);
        }
        if r < 0 && r != BUDGET_SPENT {
            return Err(RuntimeError::from_ret("consuming the ring buffer", r));
        }
        Ok(self.sink.visited)
    }
}

impl Drop for RingBuffer {
    fn drop(&mut self) {
        // SAFETY: freeing what ring_buffer__new returned, once.
        unsafe { libbpf_sys::ring_buffer__free(self.rb) };
    }
}
