//! VARIANCE and STDDEV (sample and population): the exact first and second
//! moments of the argument, so the result has no overflow and no
//! catastrophic cancellation.
//!
//! State (40 bytes): the 128-bit two's complement sum of the values (as
//! [`super::sum`]) and the 192-bit unsigned sum of their squares (three u64
//! words, least significant first). A 64-bit value's square needs 128 bits;
//! 2^64 of them need 192. BPF has no 64×64→128 multiply, so the probe squares
//! |x| from its 32-bit halves a, b: x² = a²·2^64 + 2ab·2^32 + b², each
//! partial product a 64-bit multiply, added into the words with carries.
//!
//! User space computes D = n·Σx² − (Σx)² exactly in 256 bits (it is ≥ 0 and
//! is the only subtraction), and divides once: VAR_POP = D/n², VAR_SAMP =
//! D/(n(n−1)), STDDEV = √VAR. The result is the correctly rounded quotient of
//! exact integers up to one f64 rounding of D, n² and the square root.

use super::function::{Aggregate, Call, Func, Output, StatePart};
use super::synopsis::{put_u64, u64_at, Slot, State, Synopsis, UpdateCx};
use crate::contract::Cell;
use crate::error::CompileError;
use datafusion::arrow::datatypes::i256;
use datafusion::arrow::datatypes::DataType;
use ebql_bpf::{AluOp, JmpCond, Reg, Size, Src};

/// Sum and sum of squares of a (signed or unsigned) 64-bit argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Moments {
    /// The argument is signed: sign-extend the sum, square |x|.
    pub signed: bool,
}

/// Which statistic a function computes from the moments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Moment {
    /// VAR_SAMP: D / (n(n−1)); NULL for one event.
    VarSamp,
    /// VAR_POP: D / n².
    VarPop,
    /// STDDEV_SAMP: √VAR_SAMP; NULL for one event.
    StddevSamp,
    /// STDDEV_POP: √VAR_POP.
    StddevPop,
}

/// Offset of the sum of squares in the state.
const SQ: i16 = 16;

impl Synopsis for Moments {
    fn bytes(&self) -> u32 {
        40
    }

    fn describe(&self) -> String {
        format!(
            "moments: 128-bit sum + 192-bit sum of squares ({}), 40 bytes, exact; 4 multiplies per event; variance divided once in user space",
            if self.signed { "signed" } else { "unsigned" }
        )
    }

    fn emit_update(&self, cx: &mut UpdateCx, first: bool) -> Result<(), CompileError> {
        // The sum: the same code as SUM's (it leaves the argument register intact).
        super::sum::Sum {
            signed: self.signed,
        }
        .emit_update(cx, first)?;
        let (v, _) = cx.arg()?;
        let (p, off) = (cx.value_ptr, cx.off + SQ);
        let (hi, lo, prod, t) = (
            cx.scratch(0)?,
            cx.scratch(1)?,
            cx.scratch(2)?,
            cx.scratch(3)?,
        );
        let asm = &mut *cx.asm;
        asm.comment("|x| split in 32-bit halves: hi, lo");
        asm.mov64(lo, Src::Reg(v));
        if self.signed {
            let positive = asm.new_label();
            asm.jmp(JmpCond::Sge, lo, Src::Imm(0), positive);
            asm.alu64(AluOp::Neg, lo, Src::Imm(0));
            asm.bind(positive);
        }
        asm.mov64(hi, Src::Reg(lo));
        asm.alu64(AluOp::Rsh, hi, Src::Imm(32));
        asm.alu32(AluOp::Mov, lo, Src::Reg(lo));
        // Each partial product is added at its word with the carry rippled up.
        let add_at = |asm: &mut ebql_bpf::Assembler, word: i16, x: Reg| {
            let done = asm.new_label();
            asm.ldx(Size::DW, t, p, off + 8 * word);
            asm.alu64(AluOp::Add, t, Src::Reg(x));
            asm.stx(Size::DW, p, off + 8 * word, t);
            asm.jmp(JmpCond::Ge, t, Src::Reg(x), done);
            for up in word + 1..3 {
                asm.ldx(Size::DW, t, p, off + 8 * up);
                asm.alu64(AluOp::Add, t, Src::Imm(1));
                asm.stx(Size::DW, p, off + 8 * up, t);
                if up < 2 {
                    asm.jmp(JmpCond::Ne, t, Src::Imm(0), done);
                }
            }
            asm.bind(done);
        };
        asm.comment("sq += lo²");
        asm.mov64(prod, Src::Reg(lo));
        asm.alu64(AluOp::Mul, prod, Src::Reg(lo));
        add_at(asm, 0, prod);
        asm.comment("sq += hi² << 64");
        asm.mov64(prod, Src::Reg(hi));
        asm.alu64(AluOp::Mul, prod, Src::Reg(hi));
        add_at(asm, 1, prod);
        asm.comment("sq += 2·hi·lo << 32, i.e. (hi·lo << 33) in words 0 and 1");
        asm.alu64(AluOp::Mul, hi, Src::Reg(lo));
        asm.mov64(prod, Src::Reg(hi));
        asm.alu64(AluOp::Lsh, prod, Src::Imm(33));
        add_at(asm, 0, prod);
        asm.alu64(AluOp::Rsh, hi, Src::Imm(31));
        add_at(asm, 1, hi);
        Ok(())
    }

    fn merge(&self, into: &mut [u8], from: &[u8]) {
        super::sum::Sum {
            signed: self.signed,
        }
        .merge(&mut into[..16], &from[..16]);
        let mut carry = 0u128;
        for w in 0..3 {
            let off = SQ as usize + 8 * w;
            let s = u64_at(into, off) as u128 + u64_at(from, off) as u128 + carry;
            put_u64(into, off, s as u64);
            carry = s >> 64;
        }
    }
}

/// The exact sum and sum of squares of a state.
fn sums(state: &[u8]) -> (i128, i256) {
    let sum = ((u64_at(state, 8) as i64 as i128) << 64) | u64_at(state, 0) as i128;
    let w = |i: usize| u64_at(state, SQ as usize + 8 * i);
    let sq = i256::from_parts(((w(1) as u128) << 64) | w(0) as u128, w(2) as i128);
    (sum, sq)
}

/// A non-negative 256-bit integer as the nearest f64 (two roundings at most: ≤ 1 ulp).
fn to_f64(x: i256) -> f64 {
    let (lo, hi) = x.to_parts();
    hi as f64 * 2f64.powi(128) + lo as f64
}

/// D = n·Σx² − (Σx)² = n²·VAR_POP ≥ 0 of `n` events, exact in 256 bits
/// (both terms < 2^255 for n < 2^63), as the nearest f64.
fn spread(state: &[u8], n: u64) -> f64 {
    let (sum, sq) = sums(state);
    let s = i256::from_i128(sum);
    let d = i256::from_i128(n as i128)
        .wrapping_mul(sq)
        .wrapping_sub(s.wrapping_mul(s));
    to_f64(d)
}

/// The statistic of `count` events (> 0) from a merged state.
pub fn evaluate(state: &[u8], count: u64, what: Moment) -> Cell {
    let n = count;
    let d = spread(state, n);
    let var = match what {
        Moment::VarPop | Moment::StddevPop => d / n as f64 / n as f64,
        Moment::VarSamp | Moment::StddevSamp if n < 2 => return Cell::Null,
        Moment::VarSamp | Moment::StddevSamp => d / n as f64 / (n - 1) as f64,
    };
    match what {
        Moment::StddevPop | Moment::StddevSamp => Cell::Float(var.sqrt()),
        _ => Cell::Float(var),
    }
}

/// DataFusion's variance and standard deviation functions and their aliases.
pub struct MomentsFn;

impl Aggregate for MomentsFn {
    fn names(&self) -> &'static [&'static str] {
        &[
            "var",
            "var_samp",
            "var_sample",
            "variance",
            "variance_samp",
            "var_pop",
            "var_population",
            "variance_pop",
            "stddev",
            "stddev_samp",
            "std",
            "stddev_pop",
        ]
    }

    fn reads_through_float_cast(&self, _name: &str) -> bool {
        true
    }

    fn doc(&self) -> &'static str {
        "VAR_SAMP, VAR_POP, STDDEV_SAMP, STDDEV_POP (and aliases): exact integer moments, divided once in user space"
    }

    fn resolve(
        &self,
        name: &str,
        call: &mut dyn Call,
        slot: &mut dyn FnMut(Slot) -> usize,
    ) -> Result<Func, String> {
        let what = match name {
            "var_pop" | "var_population" | "variance_pop" => Moment::VarPop,
            "stddev" | "stddev_samp" | "std" => Moment::StddevSamp,
            "stddev_pop" => Moment::StddevPop,
            _ => Moment::VarSamp,
        };
        let expr = call.int_arg(0)?;
        let s = slot(Slot {
            state: State::fold(Moments {
                signed: expr.ty().signed,
            }),
            expr,
            when: None,
            weight: None,
        });
        Ok(Func::new(MomentValue(s, what)))
    }
}

/// VARIANCE / STDDEV (sample or population) from this moments slot and the count.
#[derive(Debug)]
pub struct MomentValue(pub usize, pub Moment);

impl Output for MomentValue {
    fn slot(&self) -> Option<usize> {
        Some(self.0)
    }

    fn evaluate(&self, _: &[Slot], count: u64, state: &[u8], _: &DataType, _: &str) -> Cell {
        evaluate(state, count, self.1)
    }

    fn describe(&self) -> String {
        let (i, what) = (self.0, self.1);
        format!("{what:?} of slot {i} and the count: n·Σx² − (Σx)² exact in 256 bits, divided once in user space")
    }

    /// DataFusion's variance state (Welford's): `[count]` UInt64, `[mean]`
    /// Float64, `[m2]` Float64 = Σ(x − mean)² = D/n, each from the exact sums.
    fn state(&self, _: &[Slot], _: &DataType) -> Result<Vec<StatePart>, String> {
        Ok(vec![
            StatePart::new("count", DataType::UInt64, super::count::EventCount),
            StatePart::new("mean", DataType::Float64, MomentPart(self.0, false)),
            StatePart::new("m2", DataType::Float64, MomentPart(self.0, true)),
        ])
    }
}

/// Part of the variance state of this moments slot: the mean (`false`) or
/// m2 = Σ(x − mean)² (`true`).
#[derive(Debug)]
pub struct MomentPart(pub usize, pub bool);

impl Output for MomentPart {
    fn slot(&self) -> Option<usize> {
        Some(self.0)
    }

    fn evaluate(&self, _: &[Slot], count: u64, state: &[u8], _: &DataType, _: &str) -> Cell {
        if count == 0 {
            return Cell::Float(0.0);
        }
        Cell::Float(if self.1 {
            spread(state, count) / count as f64
        } else {
            sums(state).0 as f64 / count as f64
        })
    }

    fn evaluate_empty(&self) -> Cell {
        Cell::Float(0.0)
    }

    fn describe(&self) -> String {
        let part = if self.1 { "m2" } else { "mean" };
        format!("the {part} of slot {}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The state the probe builds from `xs` (same arithmetic, in Rust).
    fn state_of(xs: &[i128], signed: bool) -> Vec<u8> {
        let mut st = vec![0u8; 40];
        for &x in xs {
            let mut one = vec![0u8; 40];
            let sum = x as u128;
            put_u64(&mut one, 0, sum as u64);
            put_u64(&mut one, 8, (sum >> 64) as u64);
            let m = x.unsigned_abs();
            let sq = m * m; // |x| < 2^64
            put_u64(&mut one, 16, sq as u64);
            put_u64(&mut one, 24, (sq >> 64) as u64);
            Moments { signed }.merge(&mut st, &one);
        }
        st
    }

    fn var_pop(xs: &[f64]) -> f64 {
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / xs.len() as f64
    }

    #[test]
    fn small_values_match_the_two_pass_formula() {
        let xs = [1i128, 2, 3, 4, 10];
        let st = state_of(&xs, false);
        let f: Vec<f64> = xs.iter().map(|&x| x as f64).collect();
        let Cell::Float(v) = evaluate(&st, 5, Moment::VarPop) else {
            panic!()
        };
        assert!((v - var_pop(&f)).abs() < 1e-12, "{v}");
        let Cell::Float(s) = evaluate(&st, 5, Moment::StddevSamp) else {
            panic!()
        };
        assert!((s - (var_pop(&f) * 5.0 / 4.0).sqrt()).abs() < 1e-12, "{s}");
        assert_eq!(
            evaluate(&state_of(&[7], false), 1, Moment::VarSamp),
            Cell::Null
        );
        assert_eq!(
            evaluate(&state_of(&[7], false), 1, Moment::VarPop),
            Cell::Float(0.0)
        );
    }

    #[test]
    fn huge_values_neither_overflow_nor_cancel() {
        // Values near 2^64 that differ by 1 and 3: f64 sums of squares would
        // lose everything; VAR_POP of {M, M+1, M+3} is 14/9 for any M.
        let m = u64::MAX as i128 - 10;
        let st = state_of(&[m, m + 1, m + 3], false);
        let Cell::Float(v) = evaluate(&st, 3, Moment::VarPop) else {
            panic!()
        };
        assert!((v - 14.0 / 9.0).abs() < 1e-12, "{v}");
        // Signed, around i64::MIN.
        let m = i64::MIN as i128;
        let st = state_of(&[m, m + 2], true);
        let Cell::Float(v) = evaluate(&st, 2, Moment::VarSamp) else {
            panic!()
        };
        assert_eq!(v, 2.0);
    }

    #[test]
    fn merge_carries_across_words() {
        let mut a = vec![0u8; 40];
        let mut b = vec![0u8; 40];
        put_u64(&mut a, 16, u64::MAX);
        put_u64(&mut a, 24, u64::MAX);
        put_u64(&mut b, 16, 1);
        Moments { signed: false }.merge(&mut a, &b);
        assert_eq!(u64_at(&a, 16), 0);
        assert_eq!(u64_at(&a, 24), 0);
        assert_eq!(u64_at(&a, 32), 1);
    }
}
