//! The user-space definitions of eBQL's own aggregate functions, registered
//! in the planner's DataFusion session: HIST, LHIST, QUANTILE, eBQL's
//! approx_percentile_cont / approx_median (which replace DataFusion's
//! t-digest ones with the sketch's definition) and approx_top_k (which
//! DataFusion lacks).
//!
//! They run when the kernel cannot (an argument that does not compile, a
//! signed quantile argument, …) and as the differential oracle's reference,
//! so they compute exactly what [`crate::agg`]'s kernel states define:
//! the same buckets and bounds for histograms, and for quantiles the **exact**
//! nearest-rank value (the kernel's answer is within
//! [`crate::agg::quantile::RELATIVE_ERROR`] of it; the result field carries
//! that bound in its metadata, [`RELATIVE_ERROR_KEY`], for the oracle), and
//! for approx_top_k the **exact** top k (exact counts, error 0; the
//! kernel's Space-Saving summary is within the bound of
//! [`crate::agg::topk`], declared by [`TOP_K_KEY`]).

use crate::agg::{hist, quantile, topk};
use crate::kexpr::IntType;
use datafusion::arrow::array::{ArrayRef, AsArray, ListArray, UInt64Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, UInt64Type};
use datafusion::common::{exec_err, plan_err, Result, ScalarValue};
use datafusion::execution::context::SessionContext;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, ColumnarValue, Signature, Volatility,
};
use datafusion::physical_expr::PhysicalExpr;
use std::sync::Arc;

/// Field metadata key of a result column that is approximate in the kernel:
/// its value is the relative error bound (e.g. "0.0078125").
pub const RELATIVE_ERROR_KEY: &str = "ebql.relative_error";

/// Field metadata key of an approx_top_k result column: the kernel's
/// entries are within the Space-Saving bound of the exact ones (value
/// "space-saving"; see [`crate::agg::topk`]).
pub const TOP_K_KEY: &str = "ebql.top_k";

/// Registers HIST, LHIST, QUANTILE, approx_percentile_cont, approx_median and approx_top_k in `ctx`.
pub fn register(ctx: &SessionContext) {
    ctx.register_udaf(AggregateUDF::from(Hist::new("hist", 1)));
    ctx.register_udaf(AggregateUDF::from(Hist::new("lhist", 4)));
    for (name, args) in [
        ("quantile", 2),
        ("approx_percentile_cont", 2),
        ("approx_median", 1),
    ] {
        ctx.register_udaf(AggregateUDF::from(Quantile::new(name, args)));
    }
    ctx.register_udaf(AggregateUDF::from(TopK::new()));
}

/// The integer type of an aggregate's argument, or a planning error naming the function.
fn int_type(name: &str, dt: &DataType) -> Result<IntType> {
    match IntType::of(dt) {
        Some(t) => Ok(t),
        None => {
            plan_err!("{name}() takes an integer value, got {dt} (cast it, e.g. CAST(x AS BIGINT))")
        }
    }
}

/// The value of a constant argument (evaluated on an empty batch).
fn constant(e: &Arc<dyn PhysicalExpr>, name: &str) -> Result<ScalarValue> {
    let batch = datafusion::arrow::record_batch::RecordBatch::new_empty(Arc::new(
        datafusion::arrow::datatypes::Schema::empty(),
    ));
    match e.evaluate(&batch) {
        Ok(ColumnarValue::Scalar(s)) if !s.is_null() => Ok(s),
        _ => plan_err!(
            "the parameters of {} after the first must be constants",
            name.to_uppercase()
        ),
    }
}

/// The argument column as i128 values (NULLs skipped).
fn ints(a: &ArrayRef, ty: IntType) -> Result<Vec<i128>> {
    Ok(if ty.signed {
        let c = cast(a, &DataType::Int64)?;
        c.as_primitive::<datafusion::arrow::datatypes::Int64Type>()
            .iter()
            .flatten()
            .map(i128::from)
            .collect()
    } else {
        let c = cast(a, &DataType::UInt64)?;
        c.as_primitive::<UInt64Type>()
            .iter()
            .flatten()
            .map(i128::from)
            .collect()
    })
}

/// HIST(x) and LHIST(x, min, max, step).
#[derive(Debug, PartialEq, Eq, Hash)]
struct Hist {
    name: &'static str,
    signature: Signature,
}

impl Hist {
    fn new(name: &'static str, args: usize) -> Self {
        Hist {
            name,
            signature: Signature::any(args, Volatility::Immutable),
        }
    }
}

/// Which buckets a histogram accumulator uses.
#[derive(Debug)]
enum Buckets {
    Log2,
    Linear(hist::LinearHist),
}

impl Buckets {
    fn len(&self) -> usize {
        match self {
            Buckets::Log2 => hist::LOG2_BUCKETS,
            Buckets::Linear(h) => h.buckets(),
        }
    }
    fn index(&self, v: i128) -> usize {
        match self {
            Buckets::Log2 => hist::log2_index(v),
            Buckets::Linear(h) => h.index(v),
        }
    }
    fn bounds(&self, i: usize, ty: IntType) -> (i128, i128) {
        match self {
            Buckets::Log2 => hist::log2_bounds(i, ty),
            Buckets::Linear(h) => h.bounds(i, ty),
        }
    }
}

impl AggregateUDFImpl for Hist {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        let ty = int_type(self.name, &args[0])?;
        if self.name == "lhist" && !args[1..].iter().all(|a| a.is_integer()) {
            return plan_err!(
                "LHIST(x, min, max, step) takes integer constants for min, max and step"
            );
        }
        Ok(hist::hist_type(ty.signed))
    }
    fn accumulator(&self, acc: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let ty = int_type(self.name, acc.expr_fields[0].data_type())?;
        let buckets = if self.name == "lhist" {
            let mut p = [0i64; 3];
            for (k, v) in p.iter_mut().enumerate() {
                match constant(&acc.exprs[k + 1], self.name)?.cast_to(&DataType::Int64)? {
                    ScalarValue::Int64(Some(i)) => *v = i,
                    other => return plan_err!("LHIST parameter {other} is not an integer"),
                }
            }
            hist::check_linear(p[0], p[1], p[2]).or_else(|e| plan_err!("{e}"))?;
            Buckets::Linear(hist::LinearHist {
                min: p[0],
                max: p[1],
                step: p[2],
                signed: ty.signed,
            })
        } else {
            Buckets::Log2
        };
        let counts = vec![0; buckets.len()];
        Ok(Box::new(HistAcc {
            buckets,
            ty,
            counts,
        }))
    }
    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![Arc::new(Field::new(
            format!("{}[counts]", args.name),
            DataType::new_list(DataType::UInt64, true),
            true,
        ))])
    }
}

#[derive(Debug)]
struct HistAcc {
    buckets: Buckets,
    ty: IntType,
    counts: Vec<u64>,
}

impl Accumulator for HistAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        for v in ints(&values[0], self.ty)? {
            self.counts[self.buckets.index(v)] += 1;
        }
        Ok(())
    }
    fn evaluate(&mut self) -> Result<ScalarValue> {
        if self.counts.iter().all(|&c| c == 0) {
            return ScalarValue::try_from(hist::hist_type(self.ty.signed));
        }
        let buckets: Vec<(i128, i128, u64)> = self
            .counts
            .iter()
            .enumerate()
            .filter(|(_, &c)| c > 0)
            .map(|(i, &c)| {
                let (lo, hi) = self.buckets.bounds(i, self.ty);
                (lo, hi, c)
            })
            .collect();
        Ok(hist::hist_scalar(&buckets, self.ty.signed))
    }
    fn size(&self) -> usize {
        std::mem::size_of_val(self) + 8 * self.counts.len()
    }
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let list = ListArray::new_from_iter_values_u64(&self.counts);
        Ok(vec![ScalarValue::List(Arc::new(list))])
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        for row in states[0].as_list::<i32>().iter().flatten() {
            let row = row.as_primitive::<UInt64Type>();
            if row.len() != self.counts.len() {
                return exec_err!(
                    "histogram state of {} buckets, expected {}",
                    row.len(),
                    self.counts.len()
                );
            }
            for (c, v) in self.counts.iter_mut().zip(row.values()) {
                *c += v;
            }
        }
        Ok(())
    }
}

/// One list row holding `values`.
trait ListOfU64 {
    fn new_from_iter_values_u64(values: &[u64]) -> ListArray;
}

impl ListOfU64 for ListArray {
    fn new_from_iter_values_u64(values: &[u64]) -> ListArray {
        let item = Arc::new(Field::new_list_field(DataType::UInt64, true));
        let offsets = datafusion::arrow::buffer::OffsetBuffer::from_lengths([values.len()]);
        ListArray::new(
            item,
            offsets,
            Arc::new(UInt64Array::from(values.to_vec())),
            None,
        )
    }
}

/// QUANTILE(x, q), approx_percentile_cont(x, q), approx_median(x): the exact
/// nearest-rank quantile (see [`crate::agg::quantile`]).
#[derive(Debug, PartialEq, Eq, Hash)]
struct Quantile {
    name: &'static str,
    signature: Signature,
}

impl Quantile {
    fn new(name: &'static str, args: usize) -> Self {
        Quantile {
            name,
            signature: Signature::any(args, Volatility::Immutable),
        }
    }
}

impl AggregateUDFImpl for Quantile {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        int_type(self.name, &args[0])?;
        if args.len() > 1 && !args[1].is_numeric() {
            return plan_err!(
                "the quantile of {} must be a number between 0 and 1",
                self.name.to_uppercase()
            );
        }
        Ok(args[0].clone())
    }
    fn return_field(&self, args: &[FieldRef]) -> Result<FieldRef> {
        let dt = self.return_type(
            &args
                .iter()
                .map(|f| f.data_type().clone())
                .collect::<Vec<_>>(),
        )?;
        Ok(marked_field(
            self.name,
            dt,
            RELATIVE_ERROR_KEY,
            quantile::RELATIVE_ERROR.to_string(),
        ))
    }
    fn accumulator(&self, acc: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let ty = int_type(self.name, acc.expr_fields[0].data_type())?;
        let q = match acc.exprs.get(1) {
            None => 0.5,
            Some(e) => match constant(e, self.name)?.cast_to(&DataType::Float64)? {
                ScalarValue::Float64(Some(q)) => q,
                other => return plan_err!("quantile {other} is not a number"),
            },
        };
        quantile::check_q(q).or_else(|e| plan_err!("{e}"))?;
        Ok(Box::new(QuantileAcc {
            q,
            ty,
            out: acc.return_field.data_type().clone(),
            values: Vec::new(),
        }))
    }
    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![Arc::new(Field::new(
            format!("{}[values]", args.name),
            DataType::new_list(DataType::Decimal128(38, 0), true),
            true,
        ))])
    }
}

#[derive(Debug)]
struct QuantileAcc {
    q: f64,
    ty: IntType,
    out: DataType,
    values: Vec<i128>,
}

impl Accumulator for QuantileAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.values.extend(ints(&values[0], self.ty)?);
        Ok(())
    }
    fn evaluate(&mut self) -> Result<ScalarValue> {
        if self.values.is_empty() {
            return ScalarValue::try_from(&self.out);
        }
        self.values.sort_unstable();
        let v = self.values[quantile::rank(self.q, self.values.len() as u64) as usize - 1];
        ScalarValue::Decimal128(Some(v), 38, 0).cast_to(&self.out)
    }
    fn size(&self) -> usize {
        std::mem::size_of_val(self) + 16 * self.values.capacity()
    }
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let arr = datafusion::arrow::array::Decimal128Array::from(self.values.clone())
            .with_precision_and_scale(38, 0)?;
        let item = Arc::new(Field::new_list_field(DataType::Decimal128(38, 0), true));
        let list = ListArray::new(
            item,
            datafusion::arrow::buffer::OffsetBuffer::from_lengths([arr.len()]),
            Arc::new(arr),
            None,
        );
        Ok(vec![ScalarValue::List(Arc::new(list))])
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        for row in states[0].as_list::<i32>().iter().flatten() {
            self.values.extend(
                row.as_primitive::<datafusion::arrow::datatypes::Decimal128Type>()
                    .iter()
                    .flatten(),
            );
        }
        Ok(())
    }
}

/// approx_top_k(x, k) and approx_top_k(x, k, w): the exact top k (see
/// [`crate::agg::topk`] for the kernel's summary and the result type).
#[derive(Debug, PartialEq, Eq, Hash)]
struct TopK {
    signature: Signature,
}

impl TopK {
    fn new() -> Self {
        use datafusion::logical_expr::TypeSignature;
        TopK {
            signature: Signature::one_of(
                vec![TypeSignature::Any(2), TypeSignature::Any(3)],
                Volatility::Immutable,
            ),
        }
    }
}

impl AggregateUDFImpl for TopK {
    fn name(&self) -> &str {
        "approx_top_k"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        int_type("approx_top_k", &args[0])?;
        if !args[1].is_integer() {
            return plan_err!(
                "approx_top_k(x, k): k must be an integer constant, got {}",
                args[1]
            );
        }
        if let Some(w) = args.get(2) {
            if !w.is_integer() {
                return plan_err!(
                    "approx_top_k(x, k, w): the weight w must be an integer, got {w} (cast it, e.g. CAST(w AS BIGINT))"
                );
            }
        }
        Ok(topk::result_type(&args[0]))
    }
    fn return_field(&self, args: &[FieldRef]) -> Result<FieldRef> {
        let dt = self.return_type(
            &args
                .iter()
                .map(|f| f.data_type().clone())
                .collect::<Vec<_>>(),
        )?;
        Ok(marked_field(
            self.name(),
            dt,
            TOP_K_KEY,
            "space-saving".to_string(),
        ))
    }
    fn accumulator(&self, acc: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let ty = int_type("approx_top_k", acc.expr_fields[0].data_type())?;
        let k = match constant(&acc.exprs[1], "approx_top_k")?.cast_to(&DataType::Int64)? {
            ScalarValue::Int64(Some(k)) => topk::check_k(k).or_else(|e| plan_err!("{e}"))?,
            other => return plan_err!("approx_top_k's k {other} is not an integer"),
        };
        let weight = match acc.expr_fields.get(2) {
            Some(f) => Some(int_type("approx_top_k", f.data_type())?),
            None => None,
        };
        Ok(Box::new(TopKAcc {
            k,
            ty,
            weight,
            out: acc.return_field.data_type().clone(),
            counts: std::collections::HashMap::new(),
        }))
    }
    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let list = DataType::new_list(DataType::Decimal128(38, 0), true);
        Ok(vec![
            Arc::new(Field::new(
                format!("{}[values]", args.name),
                list.clone(),
                true,
            )),
            Arc::new(Field::new(format!("{}[counts]", args.name), list, true)),
        ])
    }
}

/// Exact counts (sums of weights) per value.
#[derive(Debug)]
struct TopKAcc {
    k: usize,
    ty: IntType,
    /// The weight's type (approx_top_k(x, k, w)).
    weight: Option<IntType>,
    out: DataType,
    counts: std::collections::HashMap<i128, i128>,
}

/// The column as i128 values, NULL as `None`.
fn opt_ints(a: &ArrayRef, ty: IntType) -> Result<Vec<Option<i128>>> {
    Ok(if ty.signed {
        let c = cast(a, &DataType::Int64)?;
        c.as_primitive::<datafusion::arrow::datatypes::Int64Type>()
            .iter()
            .map(|v| v.map(i128::from))
            .collect()
    } else {
        let c = cast(a, &DataType::UInt64)?;
        c.as_primitive::<UInt64Type>()
            .iter()
            .map(|v| v.map(i128::from))
            .collect()
    })
}

/// One list row of Decimal128(38, 0) values.
fn decimal_list(values: impl Iterator<Item = i128>) -> Result<ScalarValue> {
    let arr = datafusion::arrow::array::Decimal128Array::from_iter_values(values)
        .with_precision_and_scale(38, 0)?;
    let item = Arc::new(Field::new_list_field(DataType::Decimal128(38, 0), true));
    Ok(ScalarValue::List(Arc::new(ListArray::new(
        item,
        datafusion::arrow::buffer::OffsetBuffer::from_lengths([arr.len()]),
        Arc::new(arr),
        None,
    ))))
}

impl Accumulator for TopKAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let xs = opt_ints(&values[0], self.ty)?;
        let ws = match self.weight {
            Some(t) => opt_ints(&values[2], t)?,
            None => vec![Some(1); xs.len()],
        };
        // Like the kernel: a NULL value or weight, or a weight ≤ 0, folds nothing.
        for (x, w) in xs.into_iter().zip(ws) {
            if let (Some(x), Some(w)) = (x, w) {
                if w > 0 {
                    *self.counts.entry(x).or_insert(0) += w;
                }
            }
        }
        Ok(())
    }
    fn evaluate(&mut self) -> Result<ScalarValue> {
        if self.counts.is_empty() {
            return ScalarValue::try_from(&self.out);
        }
        let all = self
            .counts
            .iter()
            .map(|(&v, &c)| (v, u64::try_from(c).unwrap_or(u64::MAX), 0))
            .collect();
        topk::list_scalar(&topk::top(all, self.k), &self.out)
            .or_else(|e| exec_err!("approx_top_k: {e}"))
    }
    fn size(&self) -> usize {
        std::mem::size_of_val(self) + 48 * self.counts.capacity()
    }
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![
            decimal_list(self.counts.keys().copied())?,
            decimal_list(self.counts.values().copied())?,
        ])
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        use datafusion::arrow::datatypes::Decimal128Type;
        for (vs, cs) in states[0]
            .as_list::<i32>()
            .iter()
            .zip(states[1].as_list::<i32>().iter())
        {
            let (Some(vs), Some(cs)) = (vs, cs) else {
                continue;
            };
            let (vs, cs) = (
                vs.as_primitive::<Decimal128Type>(),
                cs.as_primitive::<Decimal128Type>(),
            );
            for (v, c) in vs.values().iter().zip(cs.values().iter()) {
                *self.counts.entry(*v).or_insert(0) += c;
            }
        }
        Ok(())
    }
}

/// A nullable result field `name` of type `dt` whose metadata `key` =
/// `value` tells the oracle how to compare it (`check::compare`).
fn marked_field(name: &str, dt: DataType, key: &str, value: String) -> FieldRef {
    let md = [(key.to_string(), value)].into_iter().collect();
    Arc::new(Field::new(name, dt, true).with_metadata(md))
}
