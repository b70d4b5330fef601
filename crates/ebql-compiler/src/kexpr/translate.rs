//! Translation from a DataFusion [`Expr`] to a kernel expression
//! ([`super::ir`]), or the reason, in words, why it stays in user space.

use crate::kexpr::ir::{
    field_expr, wrap, ArithOp, CmpOp, IntType, KExpr, KPred, StrSrc, EVAL_REG_BUDGET,
    STR_DEFAULT_BYTES, STR_MAX_BYTES,
};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::logical_expr::{Expr, ExprSchemable, Operator};
use ebql_catalog::{Column as EventColumn, EventSchema, FieldKind, SystemAttr};

/// Resolves column references and types while translating.
pub struct Scope<'a> {
    /// The event whose fields and system attributes columns name.
    pub event: &'a EventSchema,
    /// DataFusion schema the expressions are typed against.
    pub schema: &'a DFSchema,
    /// In the end program of a pairing: the start event, whose columns
    /// become [`KExpr::Stored`] loads.
    pub start: Option<&'a StartSide<'a>>,
}

/// The start event of an enter/exit pairing, seen from the end program:
/// columns qualified by one of `qualifiers` are the start event's; each one an
/// expression reads is added to `stored` (the start program stores them).
pub struct StartSide<'a> {
    /// The start event.
    pub event: &'a EventSchema,
    /// Names that qualify its columns (its alias and table name).
    pub qualifiers: Vec<String>,
    /// Start columns to store, in value order: (how the start program reads it, its name).
    pub stored: std::cell::RefCell<Vec<(KExpr, String)>>,
    /// Start strings to store, after the integer columns: (how the start
    /// program reads it, the string as the query writes it).
    pub stored_strs: std::cell::RefCell<Vec<(StrSrc, String)>>,
}

impl StartSide<'_> {
    /// The start program stores `src` (once, however often the query reads
    /// it); the end program reads it as the returned [`StrSrc::Stored`].
    fn store_str(&self, src: StrSrc, name: String) -> StrSrc {
        let mut v = self.stored_strs.borrow_mut();
        let index = match v.iter().position(|(s, _)| *s == src) {
            Some(i) => i,
            None => {
                v.push((src.clone(), name.clone()));
                v.len() - 1
            }
        };
        StrSrc::Stored {
            name,
            index,
            of: Box::new(src),
        }
    }
}

impl Scope<'_> {
    /// The start event, if `c` is one of its columns.
    pub fn start_of(&self, c: &datafusion::common::Column) -> Option<&StartSide<'_>> {
        let start = self.start?;
        let q = c.relation.as_ref()?;
        start
            .qualifiers
            .iter()
            .any(|s| s == q.table())
            .then_some(start)
    }
}

type Why = String;

fn dtype(e: &Expr, scope: &Scope) -> Result<DataType, Why> {
    e.get_type(scope.schema)
        .map_err(|err| format!("cannot type `{e}`: {err}"))
}

fn int_type(e: &Expr, scope: &Scope) -> Result<IntType, Why> {
    let dt = dtype(e, scope)?;
    IntType::of(&dt)
        .ok_or_else(|| format!("`{e}` has type {dt}; the kernel computes on integers only"))
}

fn literal_u64(v: &ScalarValue) -> Option<u64> {
    Some(match v {
        ScalarValue::Int8(Some(x)) => *x as i64 as u64,
        ScalarValue::Int16(Some(x)) => *x as i64 as u64,
        ScalarValue::Int32(Some(x)) => *x as i64 as u64,
        ScalarValue::Int64(Some(x)) => *x as u64,
        ScalarValue::UInt8(Some(x)) => *x as u64,
        ScalarValue::UInt16(Some(x)) => *x as u64,
        ScalarValue::UInt32(Some(x)) => *x as u64,
        ScalarValue::UInt64(Some(x)) => *x,
        ScalarValue::Boolean(Some(b)) => *b as u64,
        _ => return None,
    })
}

/// `e` without the aliases around it.
pub fn strip_alias(e: &Expr) -> &Expr {
    match e {
        Expr::Alias(a) => strip_alias(&a.expr),
        other => other,
    }
}

/// Translates an integer-valued expression. The result never is NULL and
/// fits the code generator's registers.
pub fn translate_value(e: &Expr, scope: &Scope) -> Result<KExpr, Why> {
    let k = translate_value_inner(e, scope)?;
    if k.regs_needed() > EVAL_REG_BUDGET {
        return Err(format!("`{e}` needs more registers than the kernel has ({EVAL_REG_BUDGET}); it runs in user space"));
    }
    Ok(k)
}

fn translate_value_inner(e: &Expr, scope: &Scope) -> Result<KExpr, Why> {
    let e = strip_alias(e);
    match e {
        Expr::Column(c) if scope.start_of(c).is_some() => {
            let start = scope.start_of(c).expect("checked");
            let read = match start.event.resolve(&c.name) {
                Some(EventColumn::Field(f)) => field_expr(&f).ok_or_else(|| format!("start column `{c}` is a string: it can be selected, grouped by or compared with a literal, not computed on"))?,
                Some(EventColumn::Attr(SystemAttr::Comm)) => return Err(format!("start column `{c}` is a string: it can be selected, grouped by or compared with a literal, not computed on")),
                Some(EventColumn::Attr(a)) => KExpr::Attr(a, IntType::of(&crate::attrs::attr_type(a)).expect("integer attribute")),
                None => return Err(format!("unknown column `{c}`")),
            };
            let ty = read.ty();
            let mut stored = start.stored.borrow_mut();
            let index = match stored.iter().position(|(k, _)| *k == read) {
                Some(i) => i,
                None => {
                    stored.push((read, c.flat_name()));
                    stored.len() - 1
                }
            };
            Ok(KExpr::Stored {
                name: c.flat_name(),
                index,
                ty,
            })
        }
        Expr::Column(c) => match scope.event.resolve(&c.name) {
            Some(EventColumn::Field(f)) => field_expr(&f).ok_or_else(|| {
                format!(
                    "field `{}` is a string; strings are compared with = or <> against a literal",
                    f.name
                )
            }),
            Some(EventColumn::Attr(SystemAttr::Comm)) => Err("`comm` is a string".into()),
            Some(EventColumn::Attr(a)) => Ok(KExpr::Attr(a, int_type(e, scope)?)),
            None => Err(format!("unknown column `{}`", c.name)),
        },
        Expr::Literal(v, _) => {
            let ty = int_type(e, scope)?;
            literal_u64(v)
                .map(|x| KExpr::Const(x, ty))
                .ok_or_else(|| format!("literal {v} is not an integer"))
        }
        Expr::ScalarFunction(f) if crate::memfn::load_type(f.name()).is_some() => load(e, f, scope),
        Expr::ScalarFunction(f) if f.name() == crate::uregs::FUNCTION => user_register(f, scope),
        Expr::Negative(inner) => Ok(KExpr::Neg(
            Box::new(translate_value_inner(inner, scope)?),
            int_type(e, scope)?,
        )),
        Expr::Cast(c) => cast(&c.expr, c.field.data_type(), scope),
        Expr::TryCast(c) => cast(&c.expr, c.field.data_type(), scope),
        Expr::ScalarFunction(f)
            if crate::intcast::is_checked_cast(f.name()) && f.args.len() == 1 =>
        {
            cast(&f.args[0], &int_type(e, scope)?.data_type(), scope)
        }
        Expr::ScalarFunction(f)
            if crate::intcast::REINTERPRET_FUNCTIONS.contains(&f.name()) && f.args.len() == 1 =>
        {
            // The same bits at the same width: sign- or zero-extended to the register.
            let k = translate_value_inner(&f.args[0], scope)?;
            let signed = f.name() == "signed";
            let ty = IntType {
                bits: k.ty().bits,
                signed,
            };
            Ok(if k.ty() == ty {
                k
            } else {
                KExpr::Cast(Box::new(k), ty)
            })
        }
        Expr::BinaryExpr(b) => {
            let op = match b.op {
                Operator::Plus => ArithOp::Add,
                Operator::Minus => ArithOp::Sub,
                Operator::Multiply => ArithOp::Mul,
                Operator::Divide => ArithOp::Div,
                Operator::Modulo => ArithOp::Mod,
                Operator::BitwiseAnd => ArithOp::And,
                Operator::BitwiseOr => ArithOp::Or,
                Operator::BitwiseXor => ArithOp::Xor,
                Operator::BitwiseShiftLeft => ArithOp::Shl,
                Operator::BitwiseShiftRight => ArithOp::Shr,
                other => return Err(format!("operator {other} does not give an integer")),
            };
            let ty = int_type(e, scope)?;
            let l = translate_value_inner(&b.left, scope)?;
            let r = translate_value_inner(&b.right, scope)?;
            if l.ty() != ty || (r.ty() != ty && !matches!(op, ArithOp::Shl | ArithOp::Shr)) {
                // DataFusion coerces both operands to the result type first; anything else is not ours to guess.
                return Err(format!(
                    "`{e}`: operands of types {} and {} with result {}",
                    l.ty().data_type(),
                    r.ty().data_type(),
                    ty.data_type()
                ));
            }
            let r = match op {
                ArithOp::Div | ArithOp::Mod => {
                    let divisor_ok = matches!(r, KExpr::Const(v, _) if v != 0) && !ty.signed;
                    if !divisor_ok {
                        return Err(format!(
                            "`{e}`: the kernel divides only unsigned values by a non-zero constant (SQL division by zero is an error, BPF's is 0)"
                        ));
                    }
                    r
                }
                // Shift amounts modulo the width (wrapping_shl/shr); BPF masks
                // register amounts to 63 only, and rejects constant amounts >= 64.
                ArithOp::Shl | ArithOp::Shr => match r {
                    KExpr::Const(v, t) => KExpr::Const(v & (ty.bits as u64 - 1), t),
                    other => KExpr::Arith(
                        ArithOp::And,
                        Box::new(other),
                        Box::new(KExpr::Const(ty.bits as u64 - 1, ty)),
                        ty,
                    ),
                },
                _ => r,
            };
            Ok(KExpr::Arith(op, Box::new(l), Box::new(r), ty))
        }
        other => Err(format!("`{other}` has no kernel implementation")),
    }
}

/// `uregs('name')` ([`crate::uregs`]): a register of the task's saved
/// user state, on BTF-typed events only.
fn user_register(
    f: &datafusion::logical_expr::expr::ScalarFunction,
    scope: &Scope,
) -> Result<KExpr, Why> {
    let usage = "uregs('name'): a register of the task's saved user state, e.g. uregs('si')";
    let name = match f.args.as_slice() {
        [Expr::Literal(
            ScalarValue::Utf8(Some(n))
            | ScalarValue::LargeUtf8(Some(n))
            | ScalarValue::Utf8View(Some(n)),
            _,
        )] => n,
        _ => return Err(format!("{usage}: the name must be a string literal")),
    };
    use ebql_catalog::EventKind;
    let kind = scope.event.event.kind;
    if !matches!(
        kind,
        EventKind::TpBtf | EventKind::Fentry | EventKind::Fexit
    ) {
        return Err(format!(
            "{usage}: only BTF-typed events (tp_btf, fentry, fexit) read the task's registers, and `{}` is not one",
            scope.event.event.table_name()
        ));
    }
    let offset = ebql_catalog::user_register_offset(name).map_err(|names| {
        if names.is_empty() {
            format!("{usage}: this kernel has no BTF for struct pt_regs")
        } else {
            format!(
                "{usage}: struct pt_regs has no register `{name}`; it has {}",
                names.join(", ")
            )
        }
    })?;
    Ok(KExpr::Field {
        name: format!("uregs('{name}')"),
        access: ebql_catalog::Access::TaskRegs { offset },
        offset: 0,
        size: 8,
        ty: IntType {
            bits: 64,
            signed: false,
        },
    })
}

/// `u64_at(p)` and the other [`crate::memfn`] loads: the address is a
/// 64-bit kernel value; on a pairing's start event (its address reads only
/// start columns) the start program reads it and stores the value; an
/// address that names the end's columns too is read by the end program.
fn load(
    e: &Expr,
    f: &datafusion::logical_expr::expr::ScalarFunction,
    scope: &Scope,
) -> Result<KExpr, Why> {
    let name = f.name();
    let ty = IntType::of(&crate::memfn::load_type(name).expect("a load function"))
        .expect("an integer type");
    let [arg] = f.args.as_slice() else {
        return Err(format!("{name}(p) takes one address"));
    };
    if let Some(start) = scope.start {
        let refs = arg.column_refs();
        let of_start = refs.iter().filter(|c| scope.start_of(c).is_some()).count();
        // An address naming the end's columns too is read by the end program.
        if of_start > 0 && of_start == refs.len() {
            let read = translate_value_inner(
                e,
                &Scope {
                    event: start.event,
                    schema: scope.schema,
                    start: None,
                },
            )?;
            let mut stored = start.stored.borrow_mut();
            let index = match stored.iter().position(|(k, _)| *k == read) {
                Some(i) => i,
                None => {
                    stored.push((read, e.to_string()));
                    stored.len() - 1
                }
            };
            return Ok(KExpr::Stored {
                name: e.to_string(),
                index,
                ty,
            });
        }
    }
    let addr = translate_value_inner(arg, scope)?;
    if addr.ty().bits != 64 {
        return Err(format!(
            "{name}() reads at a 64-bit address; `{arg}` is {}",
            addr.ty().data_type()
        ));
    }
    Ok(KExpr::Load {
        user: scope.event.event.pointers_are_user() || addr.reads_user_regs(),
        addr: Box::new(addr),
        ty,
    })
}

/// Only widening casts: DataFusion's CAST fails and TRY_CAST gives NULL
/// when a value does not fit the target type; the kernel would wrap it.
fn cast(inner: &Expr, to: &DataType, scope: &Scope) -> Result<KExpr, Why> {
    let ty = IntType::of(to).ok_or_else(|| format!("cast to {to} runs in user space"))?;
    let k = translate_value_inner(inner, scope)?;
    if !k.ty().fits_in(ty) {
        return Err(format!(
            "cast from {} to {to} can fail or give NULL for values that do not fit; it runs in user space",
            k.ty().data_type()
        ));
    }
    Ok(if k.ty() == ty {
        k
    } else {
        KExpr::Cast(Box::new(k), ty)
    })
}

/// Largest predicate (in estimated instructions, [`KPred::insns`]) one
/// pushed filter may compile to: BPF conditional jumps reach ±32767
/// instructions, and every filter jumps to the program's exit.
pub const MAX_PRED_INSNS: usize = 2048;

/// Translates a boolean predicate; the result is never NULL (SQL's third
/// value cannot arise from kernel values) and at most [`MAX_PRED_INSNS`] long.
pub fn translate_pred(e: &Expr, scope: &Scope) -> Result<KPred, Why> {
    let p = translate_pred_inner(e, scope)?;
    if p.insns() > MAX_PRED_INSNS {
        return Err(format!("`{e}` would compile to more than {MAX_PRED_INSNS} BPF instructions; it runs in user space"));
    }
    Ok(p)
}

fn translate_pred_inner(e: &Expr, scope: &Scope) -> Result<KPred, Why> {
    let e = strip_alias(e);
    match e {
        Expr::Literal(ScalarValue::Boolean(Some(b)), _) => Ok(KPred::Const(*b)),
        Expr::Not(inner) => Ok(KPred::Not(Box::new(translate_pred_inner(inner, scope)?))),
        Expr::BinaryExpr(b) if matches!(b.op, Operator::And | Operator::Or) => {
            let l = translate_pred_inner(&b.left, scope)?;
            let r = translate_pred_inner(&b.right, scope)?;
            Ok(if b.op == Operator::And {
                KPred::And(vec![l, r])
            } else {
                KPred::Or(vec![l, r])
            })
        }
        Expr::BinaryExpr(b) => {
            let op = match b.op {
                Operator::Eq => CmpOp::Eq,
                Operator::NotEq => CmpOp::Ne,
                Operator::Lt => CmpOp::Lt,
                Operator::LtEq => CmpOp::Le,
                Operator::Gt => CmpOp::Gt,
                Operator::GtEq => CmpOp::Ge,
                // Equal to <> and = when neither side can be NULL, as in the kernel.
                Operator::IsDistinctFrom => CmpOp::Ne,
                Operator::IsNotDistinctFrom => CmpOp::Eq,
                other => return Err(format!("operator {other} has no kernel implementation")),
            };
            if let Some(p) = string_eq(&b.left, &b.right, op, scope)? {
                return Ok(p);
            }
            let l = translate_value(&b.left, scope)?;
            let r = translate_value(&b.right, scope)?;
            if l.ty().signed != r.ty().signed {
                // Registers hold sign- or zero-extended values: a comparison is
                // exact only when both sides agree on signedness.
                return Err(format!(
                    "`{e}` compares {} with {}",
                    l.ty().data_type(),
                    r.ty().data_type()
                ));
            }
            let signed = l.ty().signed;
            Ok(KPred::Cmp { op, l, r, signed })
        }
        Expr::Between(bt) => {
            let lo = Expr::BinaryExpr(datafusion::logical_expr::BinaryExpr::new(
                bt.expr.clone(),
                Operator::GtEq,
                bt.low.clone(),
            ));
            let hi = Expr::BinaryExpr(datafusion::logical_expr::BinaryExpr::new(
                bt.expr.clone(),
                Operator::LtEq,
                bt.high.clone(),
            ));
            let both = KPred::And(vec![
                translate_pred_inner(&lo, scope)?,
                translate_pred_inner(&hi, scope)?,
            ]);
            Ok(if bt.negated {
                KPred::Not(Box::new(both))
            } else {
                both
            })
        }
        Expr::InList(il) => {
            let v = translate_value(&il.expr, scope)?;
            let ty = v.ty();
            let mut list = Vec::with_capacity(il.list.len());
            for item in &il.list {
                match translate_value(item, scope)? {
                    // A constant outside the tested type's range never equals it (do not wrap it into range).
                    KExpr::Const(c, cty) => {
                        let exact = if cty.signed {
                            c as i64 as i128
                        } else {
                            c as i128
                        };
                        if ty.min() <= exact && exact <= ty.max() {
                            list.push(wrap(c, ty));
                        }
                    }
                    _ => return Err("IN lists in the kernel hold constants only".into()),
                }
            }
            if list.len() > 64 {
                return Err("IN lists longer than 64 run in user space".into());
            }
            Ok(KPred::In {
                e: v,
                list,
                negated: il.negated,
            })
        }
        // Kernel values are never NULL, so the test is constant, but only
        // for operands the kernel computes: `NULLIF(count, 100) IS NULL` is not.
        Expr::IsNull(x) | Expr::IsNotNull(x) => {
            never_null(x, scope)?;
            Ok(KPred::Const(matches!(e, Expr::IsNotNull(_))))
        }
        // Kernel predicates are never NULL: IS TRUE is the predicate, IS UNKNOWN never holds.
        Expr::IsTrue(p) | Expr::IsNotFalse(p) => translate_pred_inner(p, scope),
        Expr::IsFalse(p) | Expr::IsNotTrue(p) => {
            Ok(KPred::Not(Box::new(translate_pred_inner(p, scope)?)))
        }
        Expr::IsUnknown(p) | Expr::IsNotUnknown(p) => {
            translate_pred_inner(p, scope)?;
            Ok(KPred::Const(matches!(e, Expr::IsNotUnknown(_))))
        }
        Expr::Like(like) if !like.case_insensitive && like.escape_char.is_none() => {
            let Expr::Literal(
                ScalarValue::Utf8(Some(pat))
                | ScalarValue::LargeUtf8(Some(pat))
                | ScalarValue::Utf8View(Some(pat)),
                _,
            ) = strip_cast(&like.pattern)
            else {
                return Err("LIKE with a pattern that is not a literal runs in user space".into());
            };
            let Some(lit) = like_prefix(pat) else {
                return Err(format!("LIKE '{pat}': the kernel tests only 'text' and 'prefix%' patterns (no _ or inner %)"));
            };
            let src = str_src(&like.expr, scope)?
                .ok_or_else(|| format!("`{}` is not a string the kernel reads", like.expr))?;
            string_pred(src, lit.0, like.negated, lit.1)
        }
        Expr::ScalarFunction(f) if f.name() == "starts_with" && f.args.len() == 2 => {
            let Expr::Literal(
                ScalarValue::Utf8(Some(lit))
                | ScalarValue::LargeUtf8(Some(lit))
                | ScalarValue::Utf8View(Some(lit)),
                _,
            ) = strip_cast(&f.args[1])
            else {
                return Err(
                    "starts_with with a prefix that is not a literal runs in user space".into(),
                );
            };
            let src = str_src(&f.args[0], scope)?
                .ok_or_else(|| format!("`{}` is not a string the kernel reads", f.args[0]))?;
            string_pred(src, lit, false, true)
        }
        // Arrow casts integers to booleans as `x <> 0`.
        Expr::Cast(c) if c.field.data_type() == &DataType::Boolean => {
            let v = translate_value(&c.expr, scope)?;
            let ty = v.ty();
            Ok(KPred::Cmp {
                op: CmpOp::Ne,
                l: v,
                r: KExpr::Const(0, ty),
                signed: false,
            })
        }
        other => Err(format!("`{other}` has no kernel implementation")),
    }
}

/// Ok when the kernel computes `e` (so it is never NULL): an event column,
/// an integer value or a predicate; else why `e` may be NULL.
pub fn never_null(e: &Expr, scope: &Scope) -> Result<(), Why> {
    if let Expr::Column(c) = strip_alias(e) {
        if scope.start_of(c).is_none() && scope.event.resolve(&c.name).is_some() {
            return Ok(()); // every event column is NOT NULL
        }
    }
    if translate_value(e, scope).is_ok() || translate_pred(e, scope).is_ok() {
        return Ok(());
    }
    Err(format!("`{e}` may be NULL; the test runs in user space"))
}

/// `s = 'literal'` or `s <> 'literal'` on a string the kernel reads ([`str_src`]).
fn string_eq(l: &Expr, r: &Expr, op: CmpOp, scope: &Scope) -> Result<Option<KPred>, Why> {
    let (s, text) = match (strip_cast(l), strip_cast(r)) {
        (Expr::Literal(v, _), other) | (other, Expr::Literal(v, _)) => match v {
            ScalarValue::Utf8(Some(t))
            | ScalarValue::LargeUtf8(Some(t))
            | ScalarValue::Utf8View(Some(t)) => (other, t),
            _ => return Ok(None),
        },
        _ => return Ok(None),
    };
    let Some(src) = str_src(s, scope)? else {
        return Ok(None);
    };
    let negated = match op {
        CmpOp::Eq => false,
        CmpOp::Ne => true,
        _ => {
            return Err("strings are ordered in user space; the kernel tests only = and <>".into())
        }
    };
    string_pred(src, text, negated, false).map(Some)
}

/// The kernel test of `src` against a literal: equality or prefix.
/// The literal is the text of a byte string ([`crate::bytetext`]): the
/// kernel compares the bytes it stands for (`'x-\x80'`: `x`, `-`, 0x80).
fn string_pred(src: StrSrc, text: &str, negated: bool, prefix: bool) -> Result<KPred, Why> {
    if matches!(src, StrSrc::Bytes { .. }) {
        return Err(format!("`{src}` is binary: it is compared in user space"));
    }
    if text.as_bytes().contains(&0) {
        // Strings end at their first NUL: no value holds one.
        return Err("a string literal with a NUL byte is compared in user space".into());
    }
    let lit = if prefix {
        // A backslash may be half of an escape's text (`\\x80` is one backslash
        // before `x80`): the text of a prefix is not the prefix of the text.
        if text.contains('\\') {
            return Err(format!(
                "the prefix '{text}' holds a backslash: the test runs in user space, on the text"
            ));
        }
        text.as_bytes().to_vec()
    } else {
        if !crate::bytetext::is_canonical(text) {
            // Equal to no value in user space either, where the test then runs.
            return Err(format!(
                "'{text}' spells no byte string the way values are written (bytes of valid UTF-8 are written as text); the test runs in user space"
            ));
        }
        crate::bytetext::decode(text).into_owned()
    };
    Ok(KPred::StrEq {
        src,
        lit,
        negated,
        prefix,
    })
}

/// The literal of a LIKE pattern that is an equality (`'abc'`, `false`) or a
/// prefix test (`'abc%'`, `true`); `None` for any other pattern.
fn like_prefix(pat: &str) -> Option<(&str, bool)> {
    let (body, prefix) = match pat.strip_suffix('%') {
        Some(b) => (b, true),
        None => (pat, false),
    };
    (!body.contains(['%', '_', '\\'])).then_some((body, prefix))
}

/// The names of the string functions: `str` (user or kernel memory by the
/// event, see [`ebql_catalog::EventName::pointers_are_user`]), `ustr` (user memory), `kstr` (kernel memory).
pub const STR_FUNCTIONS: [&str; 3] = ["str", "ustr", "kstr"];

/// `bytes(p, len [, n])`: a buffer's bytes, NULs and all, as Binary ([`StrSrc::Bytes`]).
pub const BYTES_FUNCTION: &str = "bytes";

/// Default `n` of `bytes(p, len, n)`: a protocol message's header and a
/// statement's first few hundred bytes. Every streamed row reserves it.
pub const BYTES_DEFAULT: u32 = 512;

/// `truncated(s)`: whether the string `s` a `_str` helper read was cut to its
/// buffer ([`crate::strfn`]).
pub const TRUNCATED_FUNCTION: &str = "truncated";

/// The string `e` is in the kernel, if it is one: `comm`, a char-array or
/// `__data_loc` field, or a call `str(ptr [, n [, len]])` / `ustr(…)` / `kstr(…)`.
/// `Ok(None)`: `e` is not a string the kernel reads (no opinion);
/// `Err`: it is one, but this form of it runs in user space.
pub fn str_src(e: &Expr, scope: &Scope) -> Result<Option<StrSrc>, Why> {
    let e = strip_alias(e);
    // A string of a pairing's start event: read by the start program, stored
    // with the start. One that also names the end event's columns (a buffer
    // the start passed and the length the end returned) is read by the end
    // program, at a start pointer it stored.
    if let Some(start) = scope.start {
        let refs = e.column_refs();
        let of_start = refs.iter().filter(|c| scope.start_of(c).is_some()).count();
        if of_start > 0 && of_start == refs.len() {
            let start_scope = Scope {
                event: start.event,
                schema: scope.schema,
                start: None,
            };
            return match str_src(e, &start_scope)? {
                Some(StrSrc::Bytes { .. }) => Err(format!(
                    "`{e}` would be read when the start event happens; bytes() of a start event's buffer are read at the end: give it the end's length (e.g. bytes(e.buf, x.ret, n))"
                )),
                other => Ok(other.map(|src| start.store_str(src, e.to_string()))),
            };
        }
    }
    if let Expr::Column(c) = e {
        return Ok(match scope.event.resolve(&c.name) {
            Some(EventColumn::Attr(SystemAttr::Comm)) => Some(StrSrc::Comm),
            Some(EventColumn::Field(f)) => match f.kind {
                FieldKind::CharArray { len } => Some(StrSrc::char_array(&f, len)),
                FieldKind::DataLocString => Some(StrSrc::DataLoc {
                    name: f.name.clone(),
                    offset: f.offset,
                    size: STR_DEFAULT_BYTES,
                }),
                _ => None,
            },
            _ => None,
        });
    }
    let Expr::ScalarFunction(f) = e else {
        return Ok(None);
    };
    let name = f.name();
    if name == BYTES_FUNCTION {
        return bytes_src(f, scope).map(Some);
    }
    if !STR_FUNCTIONS.contains(&name) {
        return Ok(None);
    }
    let size = match f.args.get(1).map(strip_cast) {
        None => STR_DEFAULT_BYTES,
        Some(Expr::Literal(v, _)) => match literal_u64(v).filter(|n| (2..=STR_MAX_BYTES as u64).contains(n)) {
            Some(n) => n as u32,
            None => return Err(format!("{name}(x, n): n is the buffer size in bytes with the NUL, from 2 to {STR_MAX_BYTES}; got {v}")),
        },
        Some(other) => return Err(format!("{name}(x, n): n must be a constant, got `{other}`")),
    };
    let arg = f
        .args
        .first()
        .ok_or_else(|| format!("{name}() needs a pointer"))?;
    let len = match f.args.get(2) {
        Some(l) => Some(Box::new(str_len(name, l, scope)?)),
        None => None,
    };
    if let Some(inner) = str_src(arg, scope)? {
        return match inner {
            _ if len.is_some() => Err(format!("{name}(x, n, len): x must be a pointer; `{arg}` is already a string")),
            StrSrc::DataLoc { name: field, offset, .. } if name != "ustr" => Ok(Some(StrSrc::DataLoc { name: field, offset, size })),
            StrSrc::DataLoc { name: field, .. } => Err(format!("`{field}` is in the kernel's trace record: read it with str() or kstr(), not ustr()")),
            other => Err(format!("`{other}` is already a string; {name}() reads a pointer")),
        };
    }
    let ptr = translate_value(arg, scope)?;
    if ptr.ty().bits != 64 {
        return Err(format!(
            "{name}() reads a 64-bit pointer; `{arg}` is {}",
            ptr.ty().data_type()
        ));
    }
    let user = match name {
        "ustr" => true,
        "kstr" => false,
        _ => scope.event.event.pointers_are_user() || ptr.reads_user_regs(),
    };
    Ok(Some(StrSrc::Ptr {
        ptr: Box::new(ptr),
        user,
        size,
        len,
    }))
}

/// `bytes(p, len [, n])`: `p` a 64-bit pointer, `len` an integer the probe
/// computes, `n` a constant from 1 to [`STR_MAX_BYTES`] (default
/// [`BYTES_DEFAULT`]).
fn bytes_src(
    f: &datafusion::logical_expr::expr::ScalarFunction,
    scope: &Scope,
) -> Result<StrSrc, Why> {
    let usage = "bytes(p, len [, n]): the len bytes at address p, at most n of them";
    let (Some(arg), Some(len)) = (f.args.first(), f.args.get(1)) else {
        return Err(format!("{usage}: a pointer and a length are needed"));
    };
    let size = match f.args.get(2).map(strip_cast) {
        None => BYTES_DEFAULT,
        Some(Expr::Literal(v, _)) => {
            match literal_u64(v).filter(|n| (1..=STR_MAX_BYTES as u64).contains(n)) {
                Some(n) => n as u32,
                None => return Err(format!("{usage}: n is from 1 to {STR_MAX_BYTES}; got {v}")),
            }
        }
        Some(other) => return Err(format!("{usage}: n must be a constant, got `{other}`")),
    };
    if str_src(arg, scope)?.is_some() {
        return Err(format!("{usage}: p must be a pointer; `{arg}` is a string"));
    }
    let ptr = translate_value(arg, scope)?;
    if ptr.ty().bits != 64 {
        return Err(format!(
            "{usage}: p must be a 64-bit pointer; `{arg}` is {}",
            ptr.ty().data_type()
        ));
    }
    let len = translate_value(len, scope).map_err(|why| {
        format!("{usage}: the length `{len}` must be an integer the probe computes: {why}")
    })?;
    Ok(StrSrc::Bytes {
        user: scope.event.event.pointers_are_user() || ptr.reads_user_regs(),
        ptr: Box::new(ptr),
        size,
        len: Box::new(len),
    })
}

/// The `len` of `str(p, n, len)`: an integer the probe computes (a length
/// argument such as `arg3`; a negative one reads nothing).
fn str_len(name: &str, e: &Expr, scope: &Scope) -> Result<KExpr, Why> {
    translate_value(e, scope).map_err(|why| {
        format!("{name}(x, n, len): the length `{e}` must be an integer the probe computes: {why}")
    })
}

fn strip_cast(e: &Expr) -> &Expr {
    match e {
        Expr::Cast(c) => strip_cast(&c.expr),
        Expr::TryCast(c) => strip_cast(&c.expr),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::like_prefix;

    #[test]
    fn like_patterns_the_kernel_tests() {
        assert_eq!(like_prefix("/etc/%"), Some(("/etc/", true)));
        assert_eq!(like_prefix("/etc/passwd"), Some(("/etc/passwd", false)));
        assert_eq!(like_prefix("%"), Some(("", true)));
        for other in ["%host%", "/etc/_", "a%b%", "a\\%"] {
            assert_eq!(like_prefix(other), None, "{other}");
        }
    }
}
