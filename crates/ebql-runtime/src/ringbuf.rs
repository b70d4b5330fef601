//! Consuming a BPF ring buffer with libbpf. Probes submit with
//! BPF_RB_NO_WAKEUP, so we never sleep on epoll: the caller drains on a
//! short timer (about 10x cheaper per event than a wakeup per record,
//! measured on this project's VM).

use crate::map::Map;
use crate::{Result, RuntimeError};

/// How many leading bytes of a record hold values (the rest was never
/// written by the probe: a reserved record's tail is stale ring memory).
pub type UsedLen = Box<dyn Fn(&[u8]) -> usize + Send>;

/// Records are copied out into one contiguous buffer of fixed-size records.
struct Sink {
    record_size: usize,
    /// Copies only this many bytes of each record and zeroes the rest: a
    /// 2 KiB record holding a 100-byte buffer costs 100 bytes of copy.
    used: Option<UsedLen>,
    data: Vec<u8>,
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
    sink.data.extend_from_slice(&bytes[..n]);
    sink.data
        .resize(sink.data.len() + (sink.record_size - n), 0);
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
    /// its size), the rest as zeros.
    pub fn with_used_len(mut self, used: UsedLen) -> RingBuffer {
        self.sink.used = Some(used);
        self
    }

    /// Consumes everything available; returns the records as one buffer of
    /// `n * record_size` bytes.
    pub fn drain(&mut self) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.drain_into(&mut out)?;
        Ok(out)
    }

    /// Consumes everything available, appending the records to `out` (no
    /// copy between buffers, and `out`'s capacity is reused); returns how
    /// many records came.
    pub fn drain_into(&mut self, out: &mut Vec<u8>) -> Result<usize> {
        let before = out.len();
        std::mem::swap(&mut self.sink.data, out);
        // SAFETY: rb is valid until drop.
        let r = unsafe { libbpf_sys::ring_buffer__consume_n(self.rb, 1 << 22) };
        std::mem::swap(&mut self.sink.data, out);
        if r < 0 {
            return Err(RuntimeError::from_ret("consuming the ring buffer", r));
        }
        Ok((out.len() - before) / self.sink.record_size.max(1))
    }
}

impl Drop for RingBuffer {
    fn drop(&mut self) {
        // SAFETY: freeing what ring_buffer__new returned, once.
        unsafe { libbpf_sys::ring_buffer__free(self.rb) };
    }
}
