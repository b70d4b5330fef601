//! `approx_distinct`'s registers in the Apache DataSketches HLL serialization,
//! for merging the sketches of a fleet outside eBQL.
//!
//! [`serialize`] writes eBQL's 2^12 one-byte registers ([`super::hll`]) as a
//! DataSketches HLL sketch with lgK = 12, target type HLL_8, current mode
//! HLL, updatable form: the image DataSketches itself writes for an HLL_8
//! sketch in HLL mode, which the Java library (Spark 3.5's `hll_union_agg`,
//! `hll_sketch_estimate`: datasketches-java 3.3), the C++ library and the
//! Python `datasketches` package deserialize, union and estimate.
//!
//! # Layout
//!
//! 4136 bytes, multi-byte fields little-endian:
//!
//! | offset | size | field | value written |
//! |-------:|-----:|-------|---------------|
//! | 0 | 1 | preamble ints | 10 (the HLL-mode preamble: 40 bytes) |
//! | 1 | 1 | serialization version | 1 |
//! | 2 | 1 | family id | 7 (HLL) |
//! | 3 | 1 | lgK | 12 |
//! | 4 | 1 | lgArr | 0 (the log size of HLL_4's exception table; unused by HLL_8) |
//! | 5 | 1 | flags | OUT_OF_ORDER (16), plus EMPTY (4) if every register is 0 |
//! | 6 | 1 | curMin | 0 |
//! | 7 | 1 | mode | 10: current mode HLL (2) in bits 0-1, target type HLL_8 (2) in bits 2-3 |
//! | 8 | 8 | HIP accumulator (f64) | 0.0 (ignored: OUT_OF_ORDER) |
//! | 16 | 8 | KxQ0 (f64) | Σ 2^−r over the registers r < 32 |
//! | 24 | 8 | KxQ1 (f64) | Σ 2^−r over the registers r ≥ 32 |
//! | 32 | 4 | numAtCurMin (u32) | the number of registers equal to 0 |
//! | 36 | 4 | aux count (u32) | 0 (HLL_4's exceptions; HLL_8 has none) |
//! | 40 | 4096 | registers | register i (eBQL's index i) at byte 40 + i |
//!
//! The other flag bits are 0: bit 0 is reserved, bit 1 (read-only) is not
//! read, COMPACT (8) would only mark the same image as not writable in place
//! (an HLL_8 image has no exception table to compact; Java's
//! `HllSketch.writableWrap` refuses compact images), and bit 5 means
//! "rebuild KxQ and curMin" to Java but "start full size" to C++.
//!
//! Sources: datasketches-java `hll/PreambleUtil.java` (the layout diagram,
//! byte offsets, flag masks and mode encoding), `hll/ToByteArrayImpl.java`,
//! `hll/HllArray.java` (`extractCommonHll`), `hll/Hll8Array.java`,
//! `hll/HllSketch.java` (`heapify`), `hll/Union.java` (`unionImpl`,
//! `checkRebuildCurMinNumKxQ`) at tag 3.3.0, the version Spark 3.5 ships;
//! datasketches-cpp `hll/include/HllUtil.hpp` (constants),
//! `HllArray-internal.hpp` (`newHll`, `serialize`, `getCompositeEstimate`,
//! `getHllBitMapEstimate`, `check_rebuild_kxq_cur_min`) and
//! `Hll8Array-internal.hpp`; and the bytes of HLL_8 sketches that the Python
//! `datasketches` 5.2 package serializes.
//!
//! # Estimator fields
//!
//! A DataSketches sketch built by its own update path in hash order keeps a
//! HIP (historic inverse probability) accumulator, the estimate readers
//! return unless the OUT_OF_ORDER flag is set. These registers were not built
//! that way, so the flag is set: readers zero the accumulator and use the
//! "composite" estimator, which needs only the registers and three fields
//! that summarize them: KxQ0 + KxQ1 = Σ 2^−r (the HyperLogLog harmonic sum,
//! split at 32 to keep precision), and numAtCurMin, the number of registers
//! at curMin. DataSketches' HLL_8 update path keeps curMin at 0, so that
//! numAtCurMin counts the empty registers (the linear-counting branch reads
//! it only when curMin is 0); so does this image. (Java's union writes the
//! true minimum and its count instead: the estimate is the same, since with
//! no empty register linear counting is not used.) Both sums are exact in
//! f64 in any order (each is a sum of at most 2^12 powers of two spanning 32
//! binary orders), so they equal what DataSketches computes. The union
//! gadgets recompute all three after a merge anyway.
//!
//! The flag matters beyond a lone sketch: Java's union copies the first
//! HLL-mode sketch it sees into an empty gadget and keeps that sketch's flag,
//! so without it the union of one eBQL sketch would report the (zero) HIP
//! accumulator.
//!
//! # Empty sketch
//!
//! All registers 0 gives the same 4136-byte HLL-mode image with EMPTY set,
//! KxQ0 = 4096, numAtCurMin = 4096: what C++ writes for an empty sketch
//! created in HLL mode (`start_full_size`). C++ and Python report it empty
//! and estimate 0; Java 3.3 does not read the flag (an HLL-mode array is
//! never empty to it) but its composite estimate of all-zero registers is 0
//! too (linear counting with no register hit), and unions treat it as a
//! sketch with nothing in it. DataSketches' own empty serialization (8 bytes,
//! LIST mode) is not needed.
//!
//! # Hash
//!
//! DataSketches hashes items with MurmurHash3 (x64, 128-bit, seed 9001); eBQL
//! hashes with splitmix64 ([`super::hll::hash`]) and takes the index from the
//! top 12 bits. That is fine: no reader rehashes anything, a register's
//! meaning ("the largest rank seen among the items of this bucket") and its
//! distribution do not depend on which uniform hash made it, and a union is
//! the register-wise maximum. But a value lands in different registers under
//! the two hashes, so every sketch in a union must come from eBQL's hash:
//! eBQL sketches merge with each other (a value seen on two hosts counts
//! once), not with sketches of the same values built by DataSketches' own
//! `update`, whose union would count such a value twice.
//!
//! Ranks: eBQL's are at most 53 (52 hash bits after the index, plus one);
//! HLL_8 registers hold DataSketches' 6-bit values (at most 63), so every
//! eBQL register fits as is.

use super::hll::M;

/// The length of a serialized sketch in bytes: the 40-byte preamble and one
/// byte per register (4136).
pub const SERIALIZED_BYTES: usize = HLL_BYTE_ARR_START + M;

/// Preamble size in 32-bit ints for a sketch in HLL mode.
const HLL_PREINTS: u8 = 10;
/// Serialization version.
const SER_VER: u8 = 1;
/// DataSketches' family id of HLL.
const FAMILY_ID: u8 = 7;
/// Flag: the sketch holds no item.
const EMPTY_FLAG: u8 = 4;
/// Flag: the registers were not built in hash order, so the HIP
/// accumulator is invalid and readers use the composite estimator.
const OUT_OF_ORDER_FLAG: u8 = 16;
/// Current mode HLL (LIST = 0, SET = 1, HLL = 2).
const CUR_MODE_HLL: u8 = 2;
/// Target type HLL_8 (HLL_4 = 0, HLL_6 = 1, HLL_8 = 2).
const TGT_HLL_8: u8 = 2;
/// Byte offsets of the preamble's fields.
const LG_K_BYTE: usize = 3;
const LG_ARR_BYTE: usize = 4;
const FLAGS_BYTE: usize = 5;
const CUR_MIN_BYTE: usize = 6;
const MODE_BYTE: usize = 7;
const HIP_ACCUM_DOUBLE: usize = 8;
const KXQ0_DOUBLE: usize = 16;
const KXQ1_DOUBLE: usize = 24;
const NUM_AT_CUR_MIN_INT: usize = 32;
const AUX_COUNT_INT: usize = 36;
const HLL_BYTE_ARR_START: usize = 40;
/// The largest register value DataSketches stores (6 bits).
const MAX_VALUE: u8 = 63;

/// eBQL's HyperLogLog registers as a DataSketches HLL_8 sketch (lgK = 12,
/// HLL mode, updatable form) of [`SERIALIZED_BYTES`] bytes; see the module
/// docs for the layout.
///
/// `registers` is a sketch as the probe leaves it ([`super::hll`]): exactly
/// [`M`] bytes, register `i` for index `i`, each a rank from 0 (empty) to 53.
///
/// # Panics
///
/// If `registers` is not [`M`] bytes long or a register exceeds 63, the
/// largest value an HLL_8 register may hold (eBQL's probe never writes more
/// than 53, so either is a caller bug).
pub fn serialize(registers: &[u8]) -> Vec<u8> {
    assert_eq!(registers.len(), M, "a HyperLogLog sketch has {M} registers");
    let (mut kxq0, mut kxq1, mut zeros) = (0.0f64, 0.0f64, 0u32);
    for &r in registers {
        assert!(
            r <= MAX_VALUE,
            "register value {r} exceeds DataSketches' {MAX_VALUE}"
        );
        let inv = 2f64.powi(-i32::from(r));
        if r < 32 {
            kxq0 += inv;
        } else {
            kxq1 += inv;
        }
        zeros += u32::from(r == 0);
    }
    let mut out = vec![0u8; SERIALIZED_BYTES];
    out[0] = HLL_PREINTS;
    out[1] = SER_VER;
    out[2] = FAMILY_ID;
    out[LG_K_BYTE] = super::hll::P as u8;
    out[LG_ARR_BYTE] = 0;
    out[FLAGS_BYTE] = OUT_OF_ORDER_FLAG | if zeros as usize == M { EMPTY_FLAG } else { 0 };
    out[CUR_MIN_BYTE] = 0;
    out[MODE_BYTE] = (TGT_HLL_8 << 2) | CUR_MODE_HLL;
    out[HIP_ACCUM_DOUBLE..][..8].copy_from_slice(&0f64.to_le_bytes());
    out[KXQ0_DOUBLE..][..8].copy_from_slice(&kxq0.to_le_bytes());
    out[KXQ1_DOUBLE..][..8].copy_from_slice(&kxq1.to_le_bytes());
    out[NUM_AT_CUR_MIN_INT..][..4].copy_from_slice(&zeros.to_le_bytes());
    out[AUX_COUNT_INT..][..4].copy_from_slice(&0u32.to_le_bytes());
    out[HLL_BYTE_ARR_START..].copy_from_slice(registers);
    out
}

#[cfg(test)]
mod tests {
    use super::super::hll::{estimate, sketch};
    use super::*;

    fn f64_at(b: &[u8], off: usize) -> f64 {
        f64::from_le_bytes(b[off..off + 8].try_into().unwrap())
    }

    fn u32_at(b: &[u8], off: usize) -> u32 {
        u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
    }

    #[test]
    fn preamble_of_a_known_register_array() {
        let mut regs = vec![1u8; M];
        regs[0] = 0;
        regs[1] = 0;
        regs[2] = 3;
        regs[3] = 40;
        regs[M - 1] = 53;
        let b = serialize(&regs);
        assert_eq!(b.len(), 4136);
        assert_eq!(&b[..8], &[10, 1, 7, 12, 0, 16, 0, 10]);
        assert_eq!(f64_at(&b, 8), 0.0);
        // Two zeros (1 each), 4091 ones (1/2 each), one 3 (1/8).
        assert_eq!(f64_at(&b, 16), 2.0 + 4091.0 / 2.0 + 0.125);
        assert_eq!(f64_at(&b, 24), 2f64.powi(-40) + 2f64.powi(-53));
        assert_eq!(u32_at(&b, 32), 2);
        assert_eq!(u32_at(&b, 36), 0);
        assert_eq!(&b[40..], &regs[..]);
    }

    #[test]
    fn empty_sketch() {
        let b = serialize(&[0u8; M]);
        assert_eq!(b.len(), SERIALIZED_BYTES);
        // EMPTY | OUT_OF_ORDER, as C++ writes an empty full-size sketch (but OOO).
        assert_eq!(&b[..8], &[10, 1, 7, 12, 0, 20, 0, 10]);
        assert_eq!(f64_at(&b, 16), M as f64);
        assert_eq!(f64_at(&b, 24), 0.0);
        assert_eq!(u32_at(&b, 32), M as u32);
        assert!(b[40..].iter().all(|&r| r == 0));
    }

    #[test]
    fn kxq_is_the_harmonic_sum_of_the_registers() {
        for n in [10u64, 1000, 100_000, 1_000_000] {
            let regs = sketch(0..n);
            let b = serialize(&regs);
            assert_eq!(b[5], OUT_OF_ORDER_FLAG, "n = {n}: not empty");
            let sum: f64 = regs.iter().map(|&r| 0.5f64.powi(r as i32)).sum();
            let (kxq0, kxq1) = (f64_at(&b, 16), f64_at(&b, 24));
            assert_eq!(kxq0 + kxq1, sum, "n = {n}");
            assert_eq!(
                u32_at(&b, 32) as usize,
                regs.iter().filter(|&&r| r == 0).count()
            );
            // The classic raw estimate from the KxQ fields is near eBQL's
            // estimate once no register is empty.
            if n >= 100_000 {
                let raw = 0.7213 / (1.0 + 1.079 / M as f64) * (M * M) as f64 / (kxq0 + kxq1);
                assert!((raw / estimate(&regs) - 1.0).abs() < 0.02, "n = {n}");
            }
        }
    }

    #[test]
    #[should_panic(expected = "4096 registers")]
    fn wrong_length_panics() {
        serialize(&[0u8; 100]);
    }

    /// Cross-check with the DataSketches readers (run by hand):
    /// `EBQL_HLL_DATASKETCHES_DIR=/tmp/hll cargo test -p ebql-compiler
    /// hll_datasketches::tests::export -- --ignored` writes `<n>.bin` for
    /// n = 0, 10, 1000, 100000, 1000000 (the values 0..n) and `a.bin`,
    /// `b.bin` (0..600000 and 400000..1000000, union 10^6), then e.g.
    /// `python3 -c "import datasketches as d; print(d.hll_sketch.deserialize(open('/tmp/hll/1000.bin','rb').read()).get_estimate())"`,
    /// or `hll_sketch_estimate(hll_union_agg(b))` in Spark 3.5. eBQL's own
    /// estimates are in `estimates.txt`.
    #[test]
    #[ignore]
    fn export() {
        let dir = std::env::var("EBQL_HLL_DATASKETCHES_DIR")
            .expect("set EBQL_HLL_DATASKETCHES_DIR to a directory");
        std::fs::create_dir_all(&dir).unwrap();
        let mut estimates = String::new();
        let mut write = |name: &str, regs: Vec<u8>| {
            std::fs::write(format!("{dir}/{name}.bin"), serialize(&regs)).unwrap();
            estimates += &format!("{name} {}\n", estimate(&regs));
        };
        for n in [0u64, 10, 1000, 100_000, 1_000_000] {
            write(&n.to_string(), sketch(0..n));
        }
        write("a", sketch(0..600_000));
        write("b", sketch(400_000..1_000_000));
        std::fs::write(format!("{dir}/estimates.txt"), estimates).unwrap();
    }
}
