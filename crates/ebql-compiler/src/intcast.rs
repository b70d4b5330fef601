//! Casts between integer types: the ones that can fail, and the two
//! functions that read the same bits as the other signedness.
//!
//! **Casts that can fail** stay visible to the optimizer as what they are. DataFusion's expression simplifier rewrites `CAST(x AS t) < c` into
//! `x < c'` (c' = c in x's type) whenever `c` fits x's type, which is exact
//! only when the cast itself cannot fail: `CAST(args[1] AS BIGINT) < 0` on
//! an `unsigned long` became `args[1] < UInt64(0)`, false for every row,
//! where the cast fails for values above `i64::MAX` (issue 19, bug 2).
//!
//! This analyzer rule (run after DataFusion's type coercion, which adds
//! casts of its own) replaces every `CAST`/`TRY_CAST` between integer types
//! whose target does not hold every source value with a [`CheckedCast`]
//! call: the same semantics (DataFusion's cast: an error, or NULL for
//! TRY_CAST, when a value does not fit), opaque to the simplifier. The
//! kernel never ran such casts (`kexpr::translate::cast`); they run in
//! user space, as before. Output column names are kept.
//!
//! **`signed(x)` and `unsigned(x)`** ([`Reinterpret`]) read an integer's
//! bits as the other signedness at the same width (two's complement, as a
//! C cast does): `signed(args[1])` of a syscall's `unsigned long` argument
//! that holds -5 is -5, where `CAST(… AS BIGINT)` fails. They never fail and
//! run in the kernel (`kexpr::translate`).

use crate::contract::IntType;
use datafusion::arrow::array::make_array;
use datafusion::arrow::compute::{cast_with_options, CastOptions};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{exec_err, plan_err, DFSchema, DataFusionError, Result};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{
    ColumnarValue, Expr, ExprSchemable, LogicalPlan, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;
use std::sync::Arc;

/// A cast between integer types that may not hold the value: DataFusion's
/// `CAST` (`try_cast` false: an error when a value does not fit) or
/// `TRY_CAST` (NULL), as a function the simplifier does not see through.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct CheckedCast {
    name: String,
    to: DataType,
    try_cast: bool,
    signature: Signature,
}

impl CheckedCast {
    /// The cast to `to`; `try_cast`: NULL instead of an error.
    pub fn new(to: DataType, try_cast: bool) -> CheckedCast {
        let kind = if try_cast { "try_cast" } else { "cast" };
        CheckedCast {
            name: format!("{kind}_to_{}", to.to_string().to_lowercase()),
            to,
            try_cast,
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for CheckedCast {
    fn name(&self) -> &str {
        &self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(self.to.clone())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let options = CastOptions {
            safe: self.try_cast,
            ..Default::default()
        };
        let [value] = args.args.as_slice() else {
            return exec_err!("{} takes one argument", self.name);
        };
        let array = value.to_array(args.number_rows)?;
        let cast = cast_with_options(&array, &self.to, &options).map_err(|e| {
            let same_width = matches!(
                (IntType::of(array.data_type()), IntType::of(&self.to)),
                (Some(f), Some(t)) if f.bits == t.bits
            );
            let bits = if same_width {
                ", and signed(x) / unsigned(x) read the same bits as the other signedness"
            } else {
                ""
            };
            DataFusionError::Execution(format!(
                "{e} (SQL's CAST, as in DataFusion); TRY_CAST gives NULL instead{bits}"
            ))
        })?;
        Ok(ColumnarValue::Array(cast))
    }
}

/// Whether `name` is a [`CheckedCast`]'s (`cast_to_int64`, `try_cast_to_uint8`, …).
pub fn is_checked_cast(name: &str) -> bool {
    name.starts_with("cast_to_") || name.starts_with("try_cast_to_")
}

/// `signed(x)` / `unsigned(x)`: `x`'s bits as the other signedness, same width.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Reinterpret {
    signed: bool,
    signature: Signature,
}

/// The names of the reinterpreting functions.
pub const REINTERPRET_FUNCTIONS: [&str; 2] = ["signed", "unsigned"];

impl Reinterpret {
    /// `signed` (true) or `unsigned`.
    pub fn new(signed: bool) -> Reinterpret {
        Reinterpret {
            signed,
            signature: Signature::any(1, Volatility::Immutable),
        }
    }

    /// The type `signed`/`unsigned` gives an integer of type `from`.
    pub fn result(signed: bool, from: &DataType) -> Result<DataType> {
        match IntType::of(from) {
            Some(t) => Ok(IntType {
                bits: t.bits,
                signed,
            }
            .data_type()),
            None => plan_err!(
                "{}() takes an integer, got {from}",
                REINTERPRET_FUNCTIONS[usize::from(!signed)]
            ),
        }
    }
}

impl ScalarUDFImpl for Reinterpret {
    fn name(&self) -> &str {
        REINTERPRET_FUNCTIONS[usize::from(!self.signed)]
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        Reinterpret::result(self.signed, &args[0])
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [value] = args.args.as_slice() else {
            return exec_err!("{} takes one argument", self.name());
        };
        let array = value.to_array(args.number_rows)?;
        let to = Reinterpret::result(self.signed, array.data_type())?;
        // Same width, same buffers: only the type changes.
        let data = array.to_data().into_builder().data_type(to).build()?;
        Ok(ColumnarValue::Array(make_array(data)))
    }
}

/// Registers `signed` and `unsigned` in `ctx`.
pub fn register(ctx: &datafusion::execution::context::SessionContext) {
    for signed in [true, false] {
        ctx.register_udf(ScalarUDF::from(Reinterpret::new(signed)));
    }
}

/// The analyzer rule (see the module docs).
#[derive(Debug, Default)]
pub struct NarrowingCasts;

/// Whether a cast of `from` to `to` can fail: both integer types, and `to`
/// does not hold every value of `from`.
fn can_fail(from: &DataType, to: &DataType) -> bool {
    match (IntType::of(from), IntType::of(to)) {
        (Some(f), Some(t)) => !f.fits_in(t),
        _ => false,
    }
}

fn rewrite(e: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let (inner, to, try_cast) = match &e {
        Expr::Cast(c) => (&c.expr, c.field.data_type(), false),
        Expr::TryCast(c) => (&c.expr, c.field.data_type(), true),
        _ => return Ok(Transformed::no(e)),
    };
    let from = inner.get_type(schema)?;
    if !can_fail(&from, to) {
        return Ok(Transformed::no(e));
    }
    let udf = ScalarUDF::from(CheckedCast::new(to.clone(), try_cast));
    Ok(Transformed::yes(Expr::ScalarFunction(
        ScalarFunction::new_udf(Arc::new(udf), vec![inner.as_ref().clone()]),
    )))
}

impl AnalyzerRule for NarrowingCasts {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        crate::coerce::rewrite_expressions(plan, rewrite)
    }

    fn name(&self) -> &str {
        "ebql_narrowing_casts"
    }
}
