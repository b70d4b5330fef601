//! Bump allocator for the BPF stack frame.
//!
//! A BPF program gets `MAX_BPF_STACK` = 512 bytes of stack below the
//! read-only frame pointer `r10` (include/linux/filter.h). `r10` is 8-byte
//! aligned, so an offset `-n` with `n` a multiple of `align` is aligned.

/// Size of the BPF stack frame in bytes (`MAX_BPF_STACK`).
pub const STACK_SIZE: usize = 512;

/// Stack allocation failures.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StackError {
    /// The request does not fit in the 512-byte frame.
    #[error(
        "BPF stack overflow: {requested} bytes requested with {used} of {limit} bytes already used"
    )]
    Overflow {
        requested: usize,
        used: usize,
        limit: usize,
    },
    /// Alignment must be 1, 2, 4 or 8 (r10 is only 8-byte aligned).
    #[error("unsupported stack alignment {0} (must be 1, 2, 4 or 8)")]
    BadAlign(usize),
    /// Zero-sized allocations are rejected as they are almost surely a bug.
    #[error("zero-sized stack allocation")]
    ZeroSize,
}

/// Hands out non-overlapping slots growing down from `r10`; never frees.
#[derive(Debug, Clone, Default)]
pub struct StackAlloc {
    used: usize,
}

impl StackAlloc {
    /// An empty frame.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reserves `size` bytes aligned to `align` (1, 2, 4 or 8) and returns the
    /// slot's offset from `r10` (negative; the slot is `[r10+off, r10+off+size)`).
    /// Errors if the frame would exceed 512 bytes; on error nothing is reserved.
    pub fn alloc(&mut self, size: usize, align: usize) -> Result<i16, StackError> {
        if !matches!(align, 1 | 2 | 4 | 8) {
            return Err(StackError::BadAlign(align));
        }
        if size == 0 {
            return Err(StackError::ZeroSize);
        }
        let end = (self.used + size).next_multiple_of(align);
        if end > STACK_SIZE {
            return Err(StackError::Overflow {
                requested: size,
                used: self.used,
                limit: STACK_SIZE,
            });
        }
        self.used = end;
        Ok(-(end as i16))
    }

    /// Bytes of the frame used so far (including alignment padding).
    pub fn used(&self) -> usize {
        self.used
    }

    /// Bytes still available (ignoring future alignment padding).
    pub fn remaining(&self) -> usize {
        STACK_SIZE - self.used
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alignment_and_disjointness() {
        let mut s = StackAlloc::new();
        assert_eq!(s.alloc(1, 1), Ok(-1)); // [-1, 0)
        assert_eq!(s.alloc(8, 8), Ok(-16)); // padded: [-16, -8)
        assert_eq!(s.alloc(2, 2), Ok(-18));
        assert_eq!(s.alloc(3, 4), Ok(-24)); // [-24, -21)
        assert_eq!(s.used(), 24);
        assert_eq!(s.remaining(), 488);
        assert_eq!(s.alloc(4, 3), Err(StackError::BadAlign(3)));
        assert_eq!(s.alloc(4, 16), Err(StackError::BadAlign(16)));
        assert_eq!(s.alloc(0, 8), Err(StackError::ZeroSize));
    }

    #[test]
    fn overflow_past_512() {
        let mut s = StackAlloc::new();
        assert_eq!(s.alloc(500, 8), Ok(-504));
        assert_eq!(s.alloc(8, 8), Ok(-512));
        assert_eq!(
            s.alloc(1, 1),
            Err(StackError::Overflow {
                requested: 1,
                used: 512,
                limit: 512
            })
        );
        assert_eq!(s.used(), 512);

        let mut s = StackAlloc::new();
        s.alloc(509, 1).unwrap();
        // 509 + 4 = 513 > 512 even before alignment
        assert!(matches!(s.alloc(4, 4), Err(StackError::Overflow { .. })));
        assert_eq!(s.used(), 509, "failed alloc must not reserve");
        assert_eq!(s.alloc(3, 1), Ok(-512));
    }
}
