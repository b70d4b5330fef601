//! Typed expression trees (integer expressions and predicates) over one
//! event's columns, their SQL text, and proptest strategies for them.
//!
//! Well-typed by construction: integer operators only get integers, string
//! columns are only compared with string literals, divisors are never zero
//! (a non-zero literal, or `(e | 1)`), and narrowing or sign-changing casts
//! get a mask that keeps the value in range (DataFusion's CAST fails on
//! out-of-range values instead of wrapping).

use crate::events::{Column, Event};
use proptest::prelude::*;
use proptest::sample::select;
use std::fmt;

/// Integer literals that hit the generated workload's values (fds 1001–1003
/// and 999, read sizes, file sizes, -EBADF, priority 120) and type edges.
pub const INT_LITERALS: &[i64] = &[
    0,
    1,
    2,
    3,
    7,
    8,
    15,
    16,
    64,
    99,
    100,
    120,
    127,
    128,
    255,
    256,
    512,
    999,
    1000,
    1001,
    1002,
    1003,
    4096,
    8192,
    65535,
    65536,
    -1,
    -2,
    -9,
    -100,
    2147483647,
    4294967295,
    9223372036854775807,
];

/// String literals for `char[N]`/`comm` comparisons: the workload's names
/// (see [`crate::script::COMMS`]), kernel threads, an empty string, and a
/// 16-character name (longer than any comm can be).
pub const STR_LITERALS: &[&str] = &[
    "/dev/null",
    "/tmp/ebqlgen-a",
    "/tmp/ebqlgen-\\x80",
    "/tmp/ebqlgen-50%",
    "ebql",
    "ebqlgen-a",
    "ebqlgen-b",
    "x",
    "abcdefghijklmno",
    "swapper/0",
    "swapper/1",
    "",
    "abcdefghijklmnop",
];

/// Binary integer operators that cannot fail at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArithOp {
    Add,
    Sub,
    Mul,
    BitAnd,
    BitOr,
    BitXor,
}

impl ArithOp {
    fn sql(self) -> &'static str {
        match self {
            ArithOp::Add => "+",
            ArithOp::Sub => "-",
            ArithOp::Mul => "*",
            ArithOp::BitAnd => "&",
            ArithOp::BitOr => "|",
            ArithOp::BitXor => "^",
        }
    }
}

/// `/` or `%`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DivOp {
    Div,
    Mod,
}

/// A divisor that is never zero.
#[derive(Debug, Clone, PartialEq)]
pub enum Divisor {
    /// A non-zero literal.
    Lit(i64),
    /// `(e | 1)`: odd, so never zero.
    Odd(Box<Expr>),
}

/// Cast targets (DataFusion SQL type names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntType {
    TinyInt,
    SmallInt,
    Int,
    BigInt,
    TinyIntUnsigned,
    SmallIntUnsigned,
    IntUnsigned,
    BigIntUnsigned,
}

impl IntType {
    const ALL: [IntType; 8] = [
        IntType::TinyInt,
        IntType::SmallInt,
        IntType::Int,
        IntType::BigInt,
        IntType::TinyIntUnsigned,
        IntType::SmallIntUnsigned,
        IntType::IntUnsigned,
        IntType::BigIntUnsigned,
    ];

    fn sql(self) -> &'static str {
        match self {
            IntType::TinyInt => "TINYINT",
            IntType::SmallInt => "SMALLINT",
            IntType::Int => "INT",
            IntType::BigInt => "BIGINT",
            IntType::TinyIntUnsigned => "TINYINT UNSIGNED",
            IntType::SmallIntUnsigned => "SMALLINT UNSIGNED",
            IntType::IntUnsigned => "INT UNSIGNED",
            IntType::BigIntUnsigned => "BIGINT UNSIGNED",
        }
    }

    /// The largest non-negative value every source type can be masked to
    /// so that the cast cannot overflow.
    fn mask(self) -> i64 {
        match self {
            IntType::TinyInt => 0x7f,
            IntType::SmallInt => 0x7fff,
            IntType::Int => 0x7fff_ffff,
            IntType::TinyIntUnsigned => 0xff,
            IntType::SmallIntUnsigned => 0xffff,
            IntType::IntUnsigned => 0xffff_ffff,
            IntType::BigInt | IntType::BigIntUnsigned => i64::MAX,
        }
    }
}

/// Classes of DataFusion types an [`Expr`] can have (see `Expr::kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// UInt8..UInt32.
    Unsigned,
    /// UInt64.
    U64,
    /// Int8..Int64 (integer literals are Int64).
    Signed,
    /// Decimal128: bitwise operators, BIT_OR and casts to BOOLEAN reject it.
    Decimal,
}

impl Kind {
    /// The type of `+ - * / %` (and of CASE/NULLIF branches) over these two.
    fn numeric(self, other: Kind) -> Kind {
        match (self, other) {
            (Kind::Decimal, _) | (_, Kind::Decimal) => Kind::Decimal,
            (Kind::U64, Kind::Signed) | (Kind::Signed, Kind::U64) => Kind::Decimal,
            (Kind::U64, _) | (_, Kind::U64) => Kind::U64,
            (Kind::Signed, _) | (_, Kind::Signed) => Kind::Signed,
            _ => Kind::Unsigned,
        }
    }

    /// The type of `& | ^` over these two (decimals are rejected; never generated).
    fn bitwise(self, other: Kind) -> Kind {
        match (self, other) {
            (Kind::Decimal, _) | (_, Kind::Decimal) => Kind::Decimal,
            (Kind::U64, _) | (_, Kind::U64) => Kind::U64,
            (Kind::Signed, _) | (_, Kind::Signed) => Kind::Signed,
            _ => Kind::Unsigned,
        }
    }
}

/// An integer-valued expression (possibly NULL through CASE/NULLIF).
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// An integer column.
    Col(&'static str),
    /// An integer literal.
    Lit(i64),
    /// `(a op b)`.
    Arith(Box<Expr>, ArithOp, Box<Expr>),
    /// `(a / d)` or `(a % d)`.
    Div(Box<Expr>, DivOp, Divisor),
    /// `(a << n)` (`left`) or `(a >> n)`; n may reach or pass the type's width.
    Shift(Box<Expr>, bool, u32),
    /// `CAST((a & mask) AS t)`.
    Cast(Box<Expr>, IntType),
    /// `CASE WHEN p THEN a [ELSE b] END` (NULL without ELSE when p is not true).
    Case(Box<Pred>, Box<Expr>, Option<Box<Expr>>),
    /// `NULLIF(a, lit)`.
    NullIf(Box<Expr>, i64),
    /// `signed(a)` (true: of an integer expression) or `unsigned(col)` (of a
    /// signed column): the same bits as the other signedness (issue 19).
    Reinterpret(Box<Expr>, bool),
}

/// Comparison operators (`==` and `!=` are eBQL spellings of `=` and `<>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    EqEq,
    Ne,
    NotEq,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CmpOp {
    const ALL: [CmpOp; 8] = [
        CmpOp::Eq,
        CmpOp::EqEq,
        CmpOp::Ne,
        CmpOp::NotEq,
        CmpOp::Lt,
        CmpOp::Le,
        CmpOp::Gt,
        CmpOp::Ge,
    ];

    /// The operator as written in SQL.
    pub fn sql(self) -> &'static str {
        match self {
            CmpOp::Eq => "=",
            CmpOp::EqEq => "==",
            CmpOp::Ne => "<>",
            CmpOp::NotEq => "!=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }
}

/// A boolean expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Pred {
    /// `a op b`.
    Cmp(Expr, CmpOp, Expr),
    /// `col = 'lit'` (`eq`) or `col <> 'lit'` on a string column.
    StrCmp(&'static str, bool, String),
    /// `col IN ('a', 'b', …)` on a string column.
    StrIn(&'static str, Vec<String>),
    /// `col [NOT] LIKE 'pattern'` on a string column.
    StrLike(&'static str, String, bool),
    /// `a [NOT] IN (lits)`.
    In(Expr, Vec<i64>, bool),
    /// `a [NOT] BETWEEN lo AND hi`.
    Between(Expr, i64, i64, bool),
    /// `a IS [NOT] NULL`.
    IsNull(Expr, bool),
    /// `CAST(a AS BOOLEAN)` (true when a ≠ 0).
    CastBool(Expr),
    /// `NOT (p)`.
    Not(Box<Pred>),
    /// `(p AND q)`.
    And(Box<Pred>, Box<Pred>),
    /// `(p OR q)`.
    Or(Box<Pred>, Box<Pred>),
}

impl Expr {
    /// Whether a column occurs in it (else it is a constant, which DataFusion folds:
    /// constant filters, or a GROUP BY on a bare integer read as a column position).
    pub fn has_col(&self) -> bool {
        match self {
            Expr::Col(_) => true,
            Expr::Lit(_) => false,
            Expr::Arith(a, _, b) => a.has_col() || b.has_col(),
            Expr::Div(a, _, d) => a.has_col() || matches!(d, Divisor::Odd(e) if e.has_col()),
            Expr::Shift(a, _, _)
            | Expr::Cast(a, _)
            | Expr::NullIf(a, _)
            | Expr::Reinterpret(a, _) => a.has_col(),
            Expr::Case(_, a, b) => a.has_col() || b.as_ref().is_some_and(|b| b.has_col()),
        }
    }

    /// The class of type DataFusion gives it, following its coercion rules:
    /// arithmetic, CASE and NULLIF coerce a UInt64 and a signed value to
    /// `Decimal128(20, 0)`; bitwise operators cast the other side to UInt64.
    fn kind(&self) -> Kind {
        match self {
            Expr::Col(c) if crate::events::is_u64(c) => Kind::U64,
            Expr::Col(c) if crate::events::is_unsigned(c) => Kind::Unsigned,
            Expr::Col(_) | Expr::Lit(_) => Kind::Signed,
            Expr::Cast(_, IntType::BigIntUnsigned) => Kind::U64,
            Expr::Cast(
                _,
                IntType::TinyIntUnsigned | IntType::SmallIntUnsigned | IntType::IntUnsigned,
            ) => Kind::Unsigned,
            Expr::Cast(..) => Kind::Signed,
            Expr::Reinterpret(_, true) => Kind::Signed,
            Expr::Reinterpret(a, false) => match &**a {
                Expr::Col(c) if crate::events::is_i64(c) => Kind::U64,
                _ => Kind::Unsigned,
            },
            Expr::Shift(a, _, _) => a.kind(),
            Expr::Arith(a, ArithOp::BitAnd | ArithOp::BitOr | ArithOp::BitXor, b) => {
                a.kind().bitwise(b.kind())
            }
            Expr::Arith(a, _, b) => a.kind().numeric(b.kind()),
            Expr::Div(a, _, Divisor::Lit(_)) => a.kind().numeric(Kind::Signed),
            Expr::Div(a, _, Divisor::Odd(d)) => a.kind().numeric(d.kind().bitwise(Kind::Signed)),
            Expr::NullIf(a, _) => a.kind().numeric(Kind::Signed),
            Expr::Case(_, a, None) => a.kind(),
            Expr::Case(_, a, Some(b)) => a.kind().numeric(b.kind()),
        }
    }

    fn is_u64(&self) -> bool {
        self.kind() == Kind::U64
    }

    fn decimal_prone(&self) -> bool {
        self.kind() == Kind::Decimal
    }

    /// Whether it may be an operand of a bitwise operator: not a decimal.
    pub fn bitwise_ok(&self) -> bool {
        !self.decimal_prone()
    }

    /// Whether it may be negative: a signed column, a negative constant, a
    /// difference, a sum or product that may wrap, a signed left shift.
    fn may_be_negative(&self) -> bool {
        match self {
            Expr::Col(c) => !crate::events::is_unsigned(c),
            Expr::Lit(v) => *v < 0,
            Expr::Arith(_, ArithOp::Sub, _) => true,
            // Sums and products with large constants wrap to negative values.
            Expr::Arith(a, ArithOp::Add | ArithOp::Mul, b) => {
                a.may_be_negative()
                    || b.may_be_negative()
                    || matches!((&**a, &**b), (Expr::Lit(x), _) | (_, Expr::Lit(x)) if *x > i32::MAX as i64)
            }
            // A signed value shifted left can reach the sign bit.
            Expr::Shift(a, true, _) => a.may_be_negative() || a.kind() == Kind::Signed,
            Expr::Arith(a, _, b) => a.may_be_negative() || b.may_be_negative(),
            Expr::Div(a, _, Divisor::Lit(v)) => *v < 0 || a.may_be_negative(),
            Expr::Div(a, _, Divisor::Odd(d)) => a.may_be_negative() || d.may_be_negative(),
            Expr::Shift(a, _, _) | Expr::NullIf(a, _) => a.may_be_negative(),
            Expr::Cast(..) | Expr::Reinterpret(_, false) => false,
            Expr::Reinterpret(_, true) => true,
            Expr::Case(_, a, b) => {
                a.may_be_negative() || b.as_ref().is_some_and(|b| b.may_be_negative())
            }
        }
    }
}

/// Whether `a op b` is well-typed for a bitwise `op`: integers, and when one
/// side is UInt64, DataFusion casts the other to UInt64, which fails (at plan
/// time for constants, at run time for column values such as `ret` = -9)
/// on negative values.
pub fn bitwise_pair_ok(a: &Expr, b: &Expr) -> bool {
    a.bitwise_ok()
        && b.bitwise_ok()
        && (!(a.is_u64() || b.is_u64()) || !(a.may_be_negative() || b.may_be_negative()))
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Col(c) => write!(f, "{c}"),
            // Negative literals in parentheses: `a - -1` is fine SQL, but `(-1)` reads unambiguously.
            Expr::Lit(v) if *v < 0 => write!(f, "({v})"),
            Expr::Lit(v) => write!(f, "{v}"),
            Expr::Arith(a, op, b) => write!(f, "({a} {} {b})", op.sql()),
            Expr::Div(a, op, d) => {
                let op = if *op == DivOp::Div { "/" } else { "%" };
                match d {
                    Divisor::Lit(v) if *v < 0 => write!(f, "({a} {op} ({v}))"),
                    Divisor::Lit(v) => write!(f, "({a} {op} {v})"),
                    Divisor::Odd(e) => write!(f, "({a} {op} ({e} | 1))"),
                }
            }
            Expr::Shift(a, left, n) => write!(f, "({a} {} {n})", if *left { "<<" } else { ">>" }),
            Expr::Cast(a, t) => write!(f, "CAST(({a} & {}) AS {})", t.mask(), t.sql()),
            Expr::Case(p, a, None) => write!(f, "CASE WHEN {p} THEN {a} END"),
            Expr::Case(p, a, Some(b)) => write!(f, "CASE WHEN {p} THEN {a} ELSE {b} END"),
            Expr::NullIf(a, v) => write!(f, "NULLIF({a}, {v})"),
            Expr::Reinterpret(a, true) => write!(f, "signed({a})"),
            Expr::Reinterpret(a, false) => write!(f, "unsigned({a})"),
        }
    }
}

impl fmt::Display for Pred {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |v: &[i64]| {
            v.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            Pred::Cmp(a, op, b) => write!(f, "{a} {} {b}", op.sql()),
            Pred::StrCmp(c, eq, s) => {
                write!(f, "{c} {} {}", if *eq { "=" } else { "<>" }, quote(s))
            }
            Pred::StrLike(c, pattern, neg) => write!(
                f,
                "{c} {}LIKE {}",
                if *neg { "NOT " } else { "" },
                quote(pattern)
            ),
            Pred::StrIn(c, v) => write!(
                f,
                "{c} IN ({})",
                v.iter().map(|s| quote(s)).collect::<Vec<_>>().join(", ")
            ),
            Pred::In(a, v, neg) => {
                write!(f, "{a} {}IN ({})", if *neg { "NOT " } else { "" }, list(v))
            }
            Pred::Between(a, lo, hi, neg) => write!(
                f,
                "{a} {}BETWEEN {lo} AND {hi}",
                if *neg { "NOT " } else { "" }
            ),
            Pred::IsNull(a, neg) => write!(f, "{a} IS {}NULL", if *neg { "NOT " } else { "" }),
            Pred::CastBool(a) => write!(f, "CAST({a} AS BOOLEAN)"),
            Pred::Not(p) => write!(f, "NOT ({p})"),
            Pred::And(p, q) => write!(f, "({p} AND {q})"),
            Pred::Or(p, q) => write!(f, "({p} OR {q})"),
        }
    }
}

/// An integer literal, mostly from [`INT_LITERALS`].
pub fn int_literal() -> BoxedStrategy<i64> {
    prop_oneof![4 => select(INT_LITERALS), 1 => -5i64..300].boxed()
}

/// LIKE patterns: prefixes, suffixes, `_`, an escaped `%`, a byte that is not UTF-8.
pub const LIKE_PATTERNS: &[&str] = &["/tmp/%", "%-a", "ebqlgen-_", "%\\x80", "%50\\%", "%", "x%"];

/// A string literal from [`STR_LITERALS`].
pub fn str_literal() -> BoxedStrategy<String> {
    select(STR_LITERALS).prop_map(str::to_string).boxed()
}

fn names(cols: Vec<Column>) -> Vec<&'static str> {
    cols.into_iter().map(|c| c.name).collect()
}

/// Strategies for one event's integer expressions and predicates up to a nesting depth.
#[derive(Clone)]
pub struct ExprGen {
    /// Integer expressions.
    pub expr: BoxedStrategy<Expr>,
    /// Predicates.
    pub pred: BoxedStrategy<Pred>,
}

/// Builds the strategies for `event`, nesting at most `depth` levels.
/// Simpler forms come first in every choice, so shrinking moves toward
/// columns, literals and single comparisons.
pub fn expr_gen(event: Event, depth: u32) -> ExprGen {
    let ints = names(event.int_columns());
    let strs = names(event.str_columns());
    let signed: Vec<&'static str> = ints
        .iter()
        .copied()
        .filter(|c| !crate::events::is_unsigned(c))
        .collect();
    let leaf = prop_oneof![3 => select(ints.clone()).prop_map(Expr::Col), 1 => int_literal().prop_map(Expr::Lit)].boxed();
    let str_pred = {
        let strs2 = strs.clone();
        prop_oneof![
            3 => (select(strs.clone()), any::<bool>(), str_literal()).prop_map(|(c, eq, s)| Pred::StrCmp(c, eq, s)),
            1 => (select(strs2), proptest::collection::vec(str_literal(), 1..3)).prop_map(|(c, v)| Pred::StrIn(c, v)),
            1 => (select(strs.clone()), select(LIKE_PATTERNS), any::<bool>()).prop_map(|(c, p, n)| Pred::StrLike(c, p.to_string(), n)),
        ]
        .boxed()
    };
    let simple_pred = |e: BoxedStrategy<Expr>| -> BoxedStrategy<Pred> {
        let e = e
            .prop_filter("a constant predicate is folded away", Expr::has_col)
            .boxed();
        prop_oneof![
            6 => (e.clone(), select(CmpOp::ALL.to_vec()), int_literal().prop_map(Expr::Lit)).prop_map(|(a, op, b)| Pred::Cmp(a, op, b)),
            2 => (e.clone(), select(CmpOp::ALL.to_vec()), e.clone()).prop_map(|(a, op, b)| Pred::Cmp(a, op, b)),
            2 => str_pred.clone(),
            2 => (e.clone(), proptest::collection::vec(int_literal(), 1..4), any::<bool>()).prop_map(|(a, v, n)| Pred::In(a, v, n)),
            2 => (e.clone(), int_literal(), int_literal(), any::<bool>()).prop_map(|(a, lo, hi, n)| Pred::Between(a, lo, hi, n)),
            1 => (e.clone(), any::<bool>()).prop_map(|(a, n)| Pred::IsNull(a, n)),
            1 => e.prop_filter("decimals cannot be cast to BOOLEAN", Expr::bitwise_ok).prop_map(Pred::CastBool),
        ]
        .boxed()
    };
    let mut expr = leaf.clone();
    let mut pred = simple_pred(leaf.clone());
    for _ in 0..depth {
        let e = expr.clone();
        let p = pred.clone();
        let bits = e
            .clone()
            .prop_filter("bitwise operators need integers", Expr::bitwise_ok)
            .boxed();
        let shift = prop_oneof![8 => select(vec![0u32, 1, 3, 8, 16, 31, 32, 63]), 1 => select(vec![64u32, 70])];
        let divisor = prop_oneof![
            3 => int_literal().prop_filter("divisor must not be zero", |v| *v != 0).prop_map(Divisor::Lit),
            1 => e.clone().prop_filter("`| 1` needs an integer", Expr::bitwise_ok).prop_map(|d| Divisor::Odd(Box::new(d))),
        ];
        let next_expr = prop_oneof![
            4 => leaf.clone(),
            3 => (e.clone(), select(vec![ArithOp::Add, ArithOp::Sub, ArithOp::Mul]), e.clone())
                .prop_map(|(a, op, b)| Expr::Arith(Box::new(a), op, Box::new(b))),
            2 => (bits.clone(), select(vec![ArithOp::BitAnd, ArithOp::BitOr, ArithOp::BitXor]), bits.clone())
                .prop_filter("bitwise operands of one integer type", |(a, _, b)| bitwise_pair_ok(a, b))
                .prop_map(|(a, op, b)| Expr::Arith(Box::new(a), op, Box::new(b))),
            2 => (e.clone(), prop_oneof![Just(DivOp::Div), Just(DivOp::Mod)], divisor).prop_map(|(a, op, d)| Expr::Div(Box::new(a), op, d)),
            1 => (bits.clone(), any::<bool>(), shift).prop_map(|(a, l, n)| Expr::Shift(Box::new(a), l, n)),
            1 => (bits.clone(), select(IntType::ALL.to_vec())).prop_map(|(a, t)| Expr::Cast(Box::new(a), t)),
            1 => (p.clone(), e.clone(), proptest::option::of(e.clone())).prop_map(|(c, a, b)| Expr::Case(Box::new(c), Box::new(a), b.map(Box::new))),
            1 => (e.clone(), int_literal()).prop_map(|(a, v)| Expr::NullIf(Box::new(a), v)),
            1 => bits.clone().prop_map(|a| Expr::Reinterpret(Box::new(a), true)),
            1 => select(signed.clone()).prop_map(|c| Expr::Reinterpret(Box::new(Expr::Col(c)), false)),
        ]
        .boxed();
        let next_pred = prop_oneof![
            4 => simple_pred(next_expr.clone()),
            1 => p.clone().prop_map(|p| Pred::Not(Box::new(p))),
            2 => (p.clone(), p.clone()).prop_map(|(a, b)| Pred::And(Box::new(a), Box::new(b))),
            2 => (p.clone(), p).prop_map(|(a, b)| Pred::Or(Box::new(a), Box::new(b))),
        ]
        .boxed();
        expr = next_expr;
        pred = next_pred;
    }
    ExprGen { expr, pred }
}
