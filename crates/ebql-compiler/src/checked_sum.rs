//! SUM in user space, exact like the kernel's (issue 19, item 7). DataFusion's
//! SUM of integers wraps at 64 bits; eBQL's kernel SUM keeps an exact
//! 128-bit sum and fails the window when it does not fit the result type
//! ([`crate::agg::sum::evaluate_sum`]). This SUM replaces DataFusion's in
//! the planner's session (same name, signature, coercion and result type):
//! integer arguments are summed exactly in an `i128` and a sum beyond the
//! result type is an execution error, which fails that window only
//! (README, "Semantics"). Other arguments (floats, decimals, intervals) and
//! `SUM(DISTINCT …)` go to DataFusion's SUM unchanged.
//!
//! It also runs as the oracle's DataFusion reference, so an overflowing
//! window fails on both sides (they agree) instead of the reference wrapping.

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Decimal128Array};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Int64Type, UInt64Type};
use datafusion::common::{exec_err, Result, ScalarValue};
use datafusion::execution::context::SessionContext;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::AggregateOrderSensitivity;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Documentation, GroupsAccumulator, ReversedUDAF,
    SetMonotonicity, Signature,
};
use std::sync::Arc;

/// Registers the exact SUM in `ctx`, in place of DataFusion's.
pub fn register(ctx: &SessionContext) {
    let inner = datafusion::functions_aggregate::sum::sum_udaf();
    ctx.register_udaf(AggregateUDF::from(CheckedSum { inner }));
}

/// The exact SUM: DataFusion's for everything but plain integer sums.
#[derive(Debug, PartialEq, Eq, Hash)]
struct CheckedSum {
    inner: Arc<AggregateUDF>,
}

/// Whether `args` sum integers (DataFusion coerces them to Int64/UInt64).
fn exact(return_type: &DataType, distinct: bool) -> bool {
    !distinct && matches!(return_type, DataType::Int64 | DataType::UInt64)
}

impl AggregateUDFImpl for CheckedSum {
    fn name(&self) -> &str {
        "sum"
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let dt = args.return_field.data_type().clone();
        if !exact(&dt, args.is_distinct) {
            return self.inner.accumulator(args);
        }
        // The plan text of an aliased aggregate ends in ` AS <output name>`.
        let text = args.name.rsplit(" AS ").next().unwrap_or(args.name);
        Ok(Box::new(ExactSum {
            sum: None,
            dt,
            text: text.to_string(),
        }))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        if !exact(args.return_type(), args.is_distinct) {
            return self.inner.state_fields(args);
        }
        let name = format!("{}[exact sum]", args.name);
        Ok(vec![Arc::new(Field::new(
            name,
            DataType::Decimal128(38, 0),
            true,
        ))])
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        !exact(args.return_field.data_type(), args.is_distinct)
            && self.inner.groups_accumulator_supported(args)
    }

    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        self.inner.create_groups_accumulator(args)
    }

    fn reverse_expr(&self) -> ReversedUDAF {
        ReversedUDAF::Identical
    }

    fn order_sensitivity(&self) -> AggregateOrderSensitivity {
        AggregateOrderSensitivity::Insensitive
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }

    fn set_monotonicity(&self, data_type: &DataType) -> SetMonotonicity {
        self.inner.inner().set_monotonicity(data_type)
    }
}

/// An exact integer sum: `None` until a non-NULL value arrives (SUM of no
/// values is NULL).
#[derive(Debug)]
struct ExactSum {
    sum: Option<i128>,
    /// The result type (Int64 or UInt64).
    dt: DataType,
    /// The aggregate as the plan shows it, for the error.
    text: String,
}

impl ExactSum {
    fn add(&mut self, v: i128) {
        // 2^63 values of 64 bits each still fit: no overflow of i128 in practice.
        self.sum = Some(self.sum.unwrap_or(0).saturating_add(v));
    }
}

impl Accumulator for ExactSum {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let a = &values[0];
        match a.data_type() {
            DataType::Int64 => a
                .as_primitive::<Int64Type>()
                .iter()
                .flatten()
                .for_each(|v| self.add(v.into())),
            DataType::UInt64 => a
                .as_primitive::<UInt64Type>()
                .iter()
                .flatten()
                .for_each(|v| self.add(v.into())),
            other => return exec_err!("exact SUM of {other}"),
        }
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let partial: &Decimal128Array = states[0].as_primitive();
        partial.iter().flatten().for_each(|v| self.add(v));
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![ScalarValue::Decimal128(self.sum, 38, 0)])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        let Some(sum) = self.sum else {
            return ScalarValue::try_from(&self.dt);
        };
        let fits = match self.dt {
            DataType::Int64 => i64::try_from(sum).map(ScalarValue::from).ok(),
            _ => u64::try_from(sum).map(ScalarValue::from).ok(),
        };
        match fits {
            Some(v) => Ok(v),
            None => exec_err!(
                "{}",
                crate::agg::sum::overflow_message(&self.text, sum, &self.dt)
            ),
        }
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.text.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::UInt64Array;

    /// Two values near 2^64 overflow UInt64: an error with the exact sum,
    /// not the wrapped one; a sum that fits is exact.
    #[test]
    fn an_integer_sum_beyond_its_type_is_an_error() {
        let mut s = ExactSum {
            sum: None,
            dt: DataType::UInt64,
            text: "sum(x)".into(),
        };
        assert_eq!(s.evaluate().unwrap(), ScalarValue::UInt64(None));
        let big: ArrayRef = Arc::new(UInt64Array::from(vec![u64::MAX - 8, 5]));
        s.update_batch(std::slice::from_ref(&big)).unwrap();
        assert_eq!(
            s.evaluate().unwrap(),
            ScalarValue::UInt64(Some(u64::MAX - 3))
        );
        s.update_batch(&[big]).unwrap();
        let e = s.evaluate().unwrap_err().to_string();
        assert!(
            e.contains("sum(x) = 36893488147419103224 does not fit its result type UInt64"),
            "{e}"
        );
    }
}
