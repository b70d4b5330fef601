//! Array group tables: when every GROUP BY key is a small bounded integer,
//! the in-kernel aggregate can index a per-CPU array by the key instead of
//! hashing it. The array lookup is an inlined bounds check and address
//! computation (no hash, no insert of new groups); the price is a slot per
//! possible key value, read by user space when a window closes.
//!
//! A key is bounded when its type is at most 8 bits wide, when the key
//! expression bounds itself (`x & 63`, `x % 10`, `x >> 56` of an unsigned
//! `x`), or when a WHERE conjunct that runs before the aggregate bounds it
//! (`fd < 64`, `fd BETWEEN 3 AND 9`, `fd IN (3, 5)`). The `cpu` key needs
//! no slot: the per-CPU array separates CPUs as the per-CPU hash does.
//!
//! A key that no bound limits but whose values are known to cluster low
//! gets a *dense range* instead: the values from 0 (or from the key's WHERE
//! lower bound) index the array, and an event whose value falls outside
//! goes to an overflow hash keyed like the hash table. A file descriptor
//! gets 1024 values (the default soft `RLIMIT_NOFILE`; POSIX gives each new
//! descriptor the lowest free number, open(2)), a system call number 512
//! (every x86-64 number).
//! A group lives in exactly one of the two (its key decides), so user
//! space reads both and takes their union: exact either way, and the common
//! case pays the array's lookup instead of the hash's.
//!
//! Slot of a group: `window · slots + Σ (key_i − lo_i) · stride_i`, where
//! `window` is the generation's parity for time windows (two windows
//! coexist while user space drains the closed one, as in the hash, whose
//! keys carry the generation) and 0 otherwise. A slot's group exists when
//! its count is non-zero on some CPU; user space reads the closed
//! generation's slots and writes them back to zero before that parity is
//! reused two generations later ([`ArrayIndex::slot_key`] rebuilds the hash
//! key layout so the rest of the decoding is shared). Count windows keep the
//! hash: more than two count windows can be open in the table at once.

use crate::agg::State;
use crate::choose::{GroupMapChoice, PlanChoices};
use crate::contract::PREALLOC_BUDGET_BYTES;
use crate::diag::Diagnostic;
use crate::kexpr::{ArithOp, CmpOp, IntType, KExpr, KPred};
use crate::prepass::WindowSpec;
use crate::split::KernelPlan;
use crate::split::{GroupSpec, ValueSrc};
use crate::CompileError;
use ebql_catalog::EventName;

pub use crate::contract::{ArrayDim, ArrayIndex};

/// The kind of group table chosen for an in-kernel aggregate, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GroupMap {
    /// A per-CPU hash keyed by the window tag and the keys.
    Hash {
        /// Why not an array.
        why: String,
    },
    /// A per-CPU array indexed by the keys.
    Array(ArrayIndex),
}

/// The array index for `spec`, or why the aggregate needs the hash.
/// `filters`: conjuncts the program tests before the aggregate (they bound
/// keys); `max_slots`: the largest array allowed (slots per window);
/// `max_bytes`: per-CPU memory the array may take (it is allocated whole).
/// `event`: the event the keys' fields belong to (which fields are dense).
pub fn plan_array(
    spec: &GroupSpec,
    event: &EventName,
    window: Option<WindowSpec>,
    filters: &[&KPred],
    max_slots: u32,
    max_bytes: u32,
) -> Result<ArrayIndex, String> {
    if let Some(WindowSpec::Count { .. }) = window {
        return Err("count windows: more than two windows can be open in the table at once".into());
    }
    if spec
        .slots
        .iter()
        .any(|s| matches!(s.state, State::Distinct(_)))
    {
        return Err("COUNT(DISTINCT) keys its value set by the group key".into());
    }
    let mut dims = Vec::new();
    let mut slots: u64 = 1;
    let mut dense = None;
    for (i, k) in spec.keys.iter().enumerate().filter(|(_, k)| !k.per_cpu) {
        let ValueSrc::Int(e) = &k.value else {
            return Err(format!("the key `{}` is a string", k.text));
        };
        let (lo, hi, why) = bound(e, filters);
        let count = hi - lo + 1;
        if count > i128::from(max_slots) || lo < i128::from(i64::MIN) {
            let too_many = format!(
                "the key `{}` can take {} values ({why}), more than {max_slots} slots",
                k.text,
                if count >= 1 << 64 {
                    "2^64".to_string()
                } else {
                    count.to_string()
                }
            );
            match dense_range(e, event) {
                Some((n, why)) if dense.is_none() && lo <= i128::from(i64::MAX) => {
                    // From the key's lowest value (a WHERE conjunct may raise
                    // it) or 0: negative values (`AT_FDCWD`, a skipped call's
                    // −1) are no descriptors or system calls.
                    dense = Some((i, (lo.max(0) as i64, n, why)));
                    continue;
                }
                _ => return Err(too_many),
            }
        }
        dims.push(ArrayDim {
            key: i,
            lo: lo as i64,
            count: count as u32,
            stride: slots as u32,
            why,
            partial: false,
        });
        slots *= count as u64;
        if slots > u64::from(max_slots) {
            return Err(format!(
                "the keys together take {slots} or more slots, more than {max_slots}"
            ));
        }
    }
    if let Some((i, (lo, want, why))) = dense {
        // The dense key gets the slots the bounded keys leave.
        let count = u64::from(want).min(u64::from(max_slots) / slots);
        if count < u64::from(DENSE_MIN) {
            return Err(format!("the bounded keys leave room for {count} values of `{}` in {max_slots} slots, fewer than {DENSE_MIN}", spec.keys[i].text));
        }
        dims.push(ArrayDim {
            key: i,
            lo,
            count: count as u32,
            stride: slots as u32,
            why,
            partial: true,
        });
        slots *= count;
    }
    let windows: u32 = if matches!(window, Some(WindowSpec::Time { .. })) {
        2
    } else {
        1
    };
    let bytes = slots * u64::from(windows) * u64::from(spec.value_size());
    if bytes > u64::from(max_bytes) {
        return Err(format!(
            "{slots} slots × {windows} windows × {} bytes is more than {} MiB per CPU",
            spec.value_size(),
            max_bytes >> 20
        ));
    }
    Ok(ArrayIndex {
        dims,
        slots: slots as u32,
        windows,
    })
}

/// The group table for the kernel plan's aggregate `spec`, by
/// [`PlanChoices::group_map`]: the array when [`plan_array`] finds one
/// ([`GroupMapChoice::Auto`]) or when asked for (then a query error if it
/// cannot be built), else the hash with the reason.
pub fn choose(
    plan: &KernelPlan,
    spec: &GroupSpec,
    choices: &PlanChoices,
) -> Result<GroupMap, CompileError> {
    // Conjuncts that run before the aggregate: the plan's own, and a pairing's thread filters.
    let filters: Vec<&KPred> = plan
        .filters
        .iter()
        .chain(plan.pair.iter().flat_map(|p| p.end_pre.iter()))
        .map(|(p, _)| p)
        .collect();
    let array = plan_array(
        spec,
        &plan.event.event,
        plan.window,
        &filters,
        choices.array_max_slots,
        PREALLOC_BUDGET_BYTES,
    );
    Ok(match (choices.group_map, array) {
        (GroupMapChoice::Hash, _) => GroupMap::Hash {
            why: "asked for (--group-map hash)".into(),
        },
        (_, Ok(ix)) => GroupMap::Array(ix),
        (GroupMapChoice::Auto, Err(why)) => GroupMap::Hash { why },
        (GroupMapChoice::Array, Err(why)) => {
            return Err(CompileError::Query(
                Diagnostic::new(
                    format!("--group-map array: no array group table for this aggregate: {why}"),
                    None,
                )
                .with_hint(
                    "bound every GROUP BY key in WHERE (e.g. `fd < 64`), or use --group-map auto",
                ),
            ))
        }
    })
}

/// Values of a system call number key the array holds: every x86-64 number
/// ([`ebql_catalog::syscalls::MAX_SYSCALL_NR`] and the lower ia32 ones).
pub const SYSCALL_SLOTS: u32 = (ebql_catalog::syscalls::MAX_SYSCALL_NR + 1).next_power_of_two();

/// Values of a descriptor key the array holds at most: the default soft
/// `RLIMIT_NOFILE` (getrlimit(2)), below which a process's descriptors stay.
pub const DENSE_SLOTS: u32 = 1024;

/// Fewest values of a dense-range key worth an array: below this, most
/// events of a busy process would take the overflow hash anyway.
pub const DENSE_MIN: u32 = 64;

/// How many values of `e`, from its lowest, are worth array slots although
/// nothing bounds them, and why: [`DENSE_SLOTS`] for a file descriptor field
/// (`fd`, `oldfd`, `fd_in`, …), allocated lowest free number first (POSIX
/// open(2), dup(2)); [`SYSCALL_SLOTS`] for a system call number field of
/// `event` ([`ebql_catalog::syscalls::is_nr_field`]). `None` for any other key.
fn dense_range(e: &KExpr, event: &EventName) -> Option<(u32, String)> {
    let KExpr::Field { name, .. } = strip_casts(e) else {
        return None;
    };
    if ebql_catalog::syscalls::is_nr_field(event, name) {
        return Some((SYSCALL_SLOTS, "a system call number (x86-64: 0–470); others (x32, −1, unknown numbers) in the overflow hash".to_string()));
    }
    let descriptor = name == "fd" || name.ends_with("fd") || name.starts_with("fd_");
    descriptor.then(|| (DENSE_SLOTS, "a file descriptor, allocated lowest free number first (POSIX); others in the overflow hash".to_string()))
}

/// `e` without casts that keep every value (a `u32` widened to `i64`).
fn strip_casts(e: &KExpr) -> &KExpr {
    match e {
        KExpr::Cast(x, ty) if x.ty().fits_in(*ty) => strip_casts(x),
        other => other,
    }
}

/// The smallest range `[lo, hi]` holding every value `e` takes after
/// `filters` passed, and where it comes from: the range of its operands
/// through its operation ([`structural`]), narrowed by the conjuncts that
/// compare `e` itself with a constant.
fn bound(e: &KExpr, filters: &[&KPred]) -> (i128, i128, String) {
    let (mut lo, mut hi, mut why) = structural(e, filters);
    let e = strip_casts(e);
    for p in filters {
        let found = match p {
            KPred::Cmp { op, l, r, signed } => match (strip_casts(l), strip_casts(r)) {
                (l, KExpr::Const(v, ty)) if l == e => {
                    Some(cmp_bound(*op, constant(*v, *ty, *signed)))
                }
                (KExpr::Const(v, ty), r) if r == e => {
                    Some(cmp_bound(flip(*op), constant(*v, *ty, *signed)))
                }
                _ => None,
            },
            KPred::In {
                e: x,
                list,
                negated: false,
            } if strip_casts(x) == e && !list.is_empty() => {
                let ty = x.ty();
                let vals = list.iter().map(|v| constant(*v, ty, ty.signed));
                Some((vals.clone().min(), vals.max()))
            }
            _ => None,
        };
        if let Some((l, h)) = found {
            let tighter = l.is_some_and(|l| l > lo) || h.is_some_and(|h| h < hi);
            lo = lo.max(l.unwrap_or(lo));
            hi = hi.min(h.unwrap_or(hi));
            if tighter {
                why = format!("WHERE {}", describe(p));
            }
        }
    }
    (lo, hi.max(lo), why)
}

/// The range of `e` from its type, or from its operands' ranges through
/// its operation when that is narrower: a value-keeping cast, `x / c` and
/// `x >> c` of an unsigned `x`, `x & m`, `x % c` of an unsigned `x`, and
/// `x ± c` that cannot wrap.
fn structural(e: &KExpr, filters: &[&KPred]) -> (i128, i128, String) {
    let ty = e.ty();
    let by_type = (
        ty.min(),
        ty.max(),
        format!(
            "a {}-bit {}",
            ty.bits,
            if ty.signed { "signed value" } else { "value" }
        ),
    );
    let narrower = |(lo, hi, why): (i128, i128, String)| {
        if lo >= by_type.0 && hi <= by_type.1 && hi - lo < by_type.1 - by_type.0 {
            (lo, hi, why)
        } else {
            by_type.clone()
        }
    };
    let konst = |x: &KExpr| match x {
        KExpr::Const(v, t) => Some(constant(*v, *t, t.signed)),
        _ => None,
    };
    match e {
        KExpr::Cast(x, to) if x.ty().fits_in(*to) => narrower(bound(x, filters)),
        KExpr::Arith(op, x, c, _) => match (op, konst(c), konst(x)) {
            (ArithOp::Div, Some(c), _) if c > 0 && !ty.signed => {
                let (l, h, why) = bound(x, filters);
                narrower((l / c, h / c, format!("{why}, divided by {c}")))
            }
            (ArithOp::Shr, Some(k), _) if (1..i128::from(ty.bits)).contains(&k) && !ty.signed => {
                let (l, h, why) = bound(x, filters);
                narrower((l >> k, h >> k, format!("{why}, shifted right by {k}")))
            }
            (ArithOp::And, Some(m), _) | (ArithOp::And, _, Some(m)) if m >= 0 => {
                narrower((0, m, format!("`{e}` masks it")))
            }
            (ArithOp::Mod, Some(c), _) if c > 0 && !ty.signed && !x.ty().signed => {
                let (l, h, why) = bound(x, filters);
                if h < c {
                    narrower((l, h, why))
                } else {
                    narrower((0, c - 1, format!("`{e}` is a remainder")))
                }
            }
            (ArithOp::Add | ArithOp::Sub, Some(c), _) => {
                let (l, h, why) = bound(x, filters);
                let c = if *op == ArithOp::Sub { -c } else { c };
                narrower((
                    l + c,
                    h + c,
                    format!(
                        "{why}, {} {}",
                        if c < 0 { "minus" } else { "plus" },
                        c.abs()
                    ),
                ))
            }
            _ => by_type,
        },
        _ => by_type,
    }
}

/// A comparison constant as a number: two's complement when the comparison is signed.
fn constant(v: u64, ty: IntType, signed: bool) -> i128 {
    if signed || ty.signed {
        i128::from(crate::kexpr::wrap(v, ty) as i64)
    } else {
        i128::from(crate::kexpr::wrap(v, ty))
    }
}

/// `x op c` as bounds on x.
fn cmp_bound(op: CmpOp, c: i128) -> (Option<i128>, Option<i128>) {
    match op {
        CmpOp::Lt => (None, Some(c - 1)),
        CmpOp::Le => (None, Some(c)),
        CmpOp::Gt => (Some(c + 1), None),
        CmpOp::Ge => (Some(c), None),
        CmpOp::Eq => (Some(c), Some(c)),
        CmpOp::Ne => (None, None),
    }
}

/// `c op x` is `x flip(op) c`.
fn flip(op: CmpOp) -> CmpOp {
    match op {
        CmpOp::Lt => CmpOp::Gt,
        CmpOp::Le => CmpOp::Ge,
        CmpOp::Gt => CmpOp::Lt,
        CmpOp::Ge => CmpOp::Le,
        other => other,
    }
}

fn describe(p: &KPred) -> String {
    match p {
        KPred::Cmp { op, l, r, .. } => {
            let op = match op {
                CmpOp::Eq => "=",
                CmpOp::Ne => "<>",
                CmpOp::Lt => "<",
                CmpOp::Le => "<=",
                CmpOp::Gt => ">",
                CmpOp::Ge => ">=",
            };
            format!("{} {op} {}", strip_casts(l), strip_casts(r))
        }
        KPred::In { e, list, .. } => format!("{} IN ({} values)", strip_casts(e), list.len()),
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ebql_catalog::Access;

    const U32: IntType = IntType {
        bits: 32,
        signed: false,
    };

    fn fd() -> KExpr {
        KExpr::Field {
            name: "fd".into(),
            access: Access::Ctx,
            offset: 16,
            size: 4,
            ty: U32,
        }
    }

    /// [`plan_array`] for keys of a tracepoint whose fields have no dense meaning but `fd`'s.
    fn plan_array_of(
        spec: &GroupSpec,
        window: Option<WindowSpec>,
        filters: &[&KPred],
        max_slots: u32,
        max_bytes: u32,
    ) -> Result<ArrayIndex, String> {
        plan_array(
            spec,
            &EventName::tracepoint("syscalls", "sys_enter_pread64"),
            window,
            filters,
            max_slots,
            max_bytes,
        )
    }

    #[test]
    fn syscall_numbers_get_a_dense_range_on_the_raw_syscall_events_only() {
        let id = KExpr::Field {
            name: "id".into(),
            access: Access::Ctx,
            offset: 8,
            size: 8,
            ty: IntType::I64,
        };
        let raw = EventName::tracepoint("raw_syscalls", "sys_enter");
        let ix = plan_array(&spec(vec![id.clone()]), &raw, None, &[], 1024, 16 << 20).unwrap();
        assert_eq!(
            (
                ix.dims[0].lo,
                ix.dims[0].count,
                ix.dims[0].partial,
                ix.overflow()
            ),
            (0, 512, true, true)
        );
        assert!(
            ix.dims[0].why.contains("system call number"),
            "{}",
            ix.dims[0].why
        );
        // `id` of another event is no syscall number: the hash.
        assert!(plan_array(
            &spec(vec![id]),
            &EventName::tracepoint("irq", "irq_handler_entry"),
            None,
            &[],
            1024,
            16 << 20
        )
        .is_err());
    }

    fn lt(e: KExpr, c: u64, signed: bool) -> KPred {
        KPred::Cmp {
            op: CmpOp::Lt,
            l: e,
            r: KExpr::Const(c, if signed { IntType::I64 } else { U32 }),
            signed,
        }
    }

    #[test]
    fn bounds_from_type_expression_and_filters() {
        let (lo, hi, _) = bound(&fd(), &[]);
        assert_eq!((lo, hi), (0, u32::MAX as i128));
        let f = lt(fd(), 64, false);
        assert_eq!(bound(&fd(), &[&f]).0..=bound(&fd(), &[&f]).1, 0..=63);
        // `CAST(fd AS BIGINT) < 64` bounds fd too (the cast keeps every value).
        let widened = lt(KExpr::Cast(Box::new(fd()), IntType::I64), 64, true);
        assert_eq!(bound(&fd(), &[&widened]).1, 63);
        let ge = KPred::Cmp {
            op: CmpOp::Ge,
            l: KExpr::Const(10, U32),
            r: fd(),
            signed: false,
        };
        assert_eq!(bound(&fd(), &[&ge]).1, 10, "10 >= fd");
        let within = KPred::In {
            e: fd(),
            list: vec![7, 3, 12],
            negated: false,
        };
        assert_eq!(
            (bound(&fd(), &[&within]).0, bound(&fd(), &[&within]).1),
            (3, 12)
        );
        let masked = KExpr::Arith(
            ArithOp::And,
            Box::new(fd()),
            Box::new(KExpr::Const(15, U32)),
            U32,
        );
        assert_eq!((bound(&masked, &[]).0, bound(&masked, &[]).1), (0, 15));
        let rem = KExpr::Arith(
            ArithOp::Mod,
            Box::new(fd()),
            Box::new(KExpr::Const(10, U32)),
            U32,
        );
        assert_eq!(bound(&rem, &[]).1, 9);
        // A bucket of a bounded value: (count < 1000) / 100 has 10 values.
        let count = KExpr::Field {
            name: "count".into(),
            access: Access::Ctx,
            offset: 32,
            size: 8,
            ty: IntType::U64,
        };
        let small = KPred::Cmp {
            op: CmpOp::Lt,
            l: count.clone(),
            r: KExpr::Const(1000, IntType::U64),
            signed: false,
        };
        let bucket = KExpr::Arith(
            ArithOp::Div,
            Box::new(count.clone()),
            Box::new(KExpr::Const(100, IntType::U64)),
            IntType::U64,
        );
        assert_eq!(
            (bound(&bucket, &[&small]).0, bound(&bucket, &[&small]).1),
            (0, 9)
        );
        assert_eq!(
            bound(&bucket, &[]).1,
            u64::MAX as i128 / 100,
            "unbounded without the filter"
        );
        let byte = KExpr::Field {
            name: "b".into(),
            access: Access::Ctx,
            offset: 0,
            size: 1,
            ty: IntType {
                bits: 8,
                signed: true,
            },
        };
        assert_eq!((bound(&byte, &[]).0, bound(&byte, &[]).1), (-128, 127));
    }

    fn spec(keys: Vec<KExpr>) -> GroupSpec {
        let keys = keys
            .into_iter()
            .map(|e| crate::split::GroupKey {
                text: format!("{e}"),
                value: ValueSrc::Int(e),
                per_cpu: false,
                data_type: datafusion::arrow::datatypes::DataType::UInt32,
            })
            .collect();
        GroupSpec {
            keys,
            slots: Vec::new(),
            aggs: Vec::new(),
        }
    }

    #[test]
    fn descriptor_keys_get_a_dense_range_and_others_are_refused() {
        let time = Some(WindowSpec::Time {
            size_ns: 1_000_000_000,
            step_ns: 1_000_000_000,
        });
        let ix = plan_array_of(&spec(vec![fd()]), time, &[], 1024, 16 << 20).unwrap();
        assert_eq!((ix.slots, ix.windows, ix.overflow()), (1024, 2, true));
        assert_eq!(
            (ix.dims[0].lo, ix.dims[0].count, ix.dims[0].partial),
            (0, 1024, true)
        );
        // A WHERE conjunct raises the range's start; a bound that fits keeps the exact array.
        let high = KPred::Cmp {
            op: CmpOp::Ge,
            l: fd(),
            r: KExpr::Const(2000, U32),
            signed: false,
        };
        assert_eq!(
            plan_array_of(&spec(vec![fd()]), None, &[&high], 1024, 16 << 20)
                .unwrap()
                .dims[0]
                .lo,
            2000
        );
        let small = lt(fd(), 64, false);
        assert!(
            !plan_array_of(&spec(vec![fd()]), None, &[&small], 1024, 16 << 20)
                .unwrap()
                .overflow()
        );
        // A bounded key shares the slots: 16 × 64 fds fit, 32 × 32 do not.
        let bucket = |m: u64| {
            KExpr::Arith(
                ArithOp::And,
                Box::new(KExpr::Field {
                    name: "count".into(),
                    access: Access::Ctx,
                    offset: 32,
                    size: 8,
                    ty: IntType::U64,
                }),
                Box::new(KExpr::Const(m, IntType::U64)),
                IntType::U64,
            )
        };
        let ix = plan_array_of(&spec(vec![bucket(15), fd()]), None, &[], 1024, 16 << 20).unwrap();
        assert_eq!((ix.dims[1].count, ix.dims[1].stride), (64, 16));
        assert!(
            plan_array_of(&spec(vec![bucket(31), fd()]), None, &[], 1024, 16 << 20)
                .unwrap_err()
                .contains("fewer than 64")
        );
        // Not a descriptor, or a second unbounded descriptor: the hash.
        let pos = KExpr::Field {
            name: "pos".into(),
            access: Access::Ctx,
            offset: 40,
            size: 8,
            ty: IntType::I64,
        };
        assert!(plan_array_of(&spec(vec![pos]), None, &[], 1024, 16 << 20).is_err());
        assert!(plan_array_of(&spec(vec![fd(), fd()]), None, &[], 1024, 16 << 20).is_err());
        // A signed descriptor (`int dfd`): its range starts at 0, AT_FDCWD (−100) is outside.
        let dfd = KExpr::Field {
            name: "dfd".into(),
            access: Access::Ctx,
            offset: 16,
            size: 4,
            ty: IntType {
                bits: 32,
                signed: true,
            },
        };
        assert_eq!(
            plan_array_of(&spec(vec![dfd]), None, &[], 1024, 16 << 20)
                .unwrap()
                .dims[0]
                .lo,
            0
        );
    }

    #[test]
    fn slots_decode_to_their_keys_and_window() {
        let ix = ArrayIndex {
            dims: vec![
                ArrayDim {
                    key: 0,
                    lo: 3,
                    count: 4,
                    stride: 1,
                    why: String::new(),
                    partial: false,
                },
                ArrayDim {
                    key: 2,
                    lo: -1,
                    count: 3,
                    stride: 4,
                    why: String::new(),
                    partial: false,
                },
            ],
            slots: 12,
            windows: 2,
        };
        assert_eq!(ix.decode(0), (0, vec![(0, 3), (2, -1)]));
        assert_eq!(ix.decode(4 + 2), (0, vec![(0, 5), (2, 0)]));
        assert_eq!(ix.decode(12 + 11), (1, vec![(0, 6), (2, 1)]));
        let st = |bytes| Some((0, crate::contract::Stored::Int { ty: U32, bytes }));
        let key = ix.slot_key(
            12 + 11,
            12,
            &[
                Some((8, crate::contract::Stored::Int { ty: U32, bytes: 4 })),
                None,
                st(4).map(|(_, s)| (4, s)),
            ],
            Some((0, 4)),
            |p| 40 + u64::from(p),
        );
        assert_eq!(key, [41, 0, 0, 0, 1, 0, 0, 0, 6, 0, 0, 0]);
    }
}
