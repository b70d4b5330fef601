//! Integer literals next to unsigned 64-bit columns become UInt64.
//!
//! SQL integer literals are Int64, and DataFusion's common type of UInt64 and
//! Int64 is Decimal128(20, 0), so `count / 100` (count is a size_t) would turn
//! into decimal division with a fractional result, and `count > 100` into a
//! decimal comparison the kernel cannot run. Event fields are mostly unsigned
//! (sizes, pointers, time), so eBQL types a non-negative integer literal that
//! meets a UInt64 operand as UInt64: integer semantics, as in C and bpftrace.
//! Runs as the first analyzer rule, before DataFusion's type coercion.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, Result, ScalarValue};
use datafusion::logical_expr::expr::InList;
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::utils::merge_schema;
use datafusion::logical_expr::{Between, BinaryExpr, Expr, ExprSchemable, LogicalPlan};
use datafusion::optimizer::AnalyzerRule;

/// The analyzer rule (see the module docs).
#[derive(Debug, Default)]
pub struct UnsignedLiterals;

fn is_u64(e: &Expr, schema: &DFSchema) -> bool {
    matches!(e.get_type(schema), Ok(DataType::UInt64))
}

/// `Some(UInt64 literal)` for a non-negative Int64 literal.
fn as_u64(e: &Expr) -> Option<Expr> {
    match e {
        Expr::Literal(ScalarValue::Int64(Some(v)), m) if *v >= 0 => Some(Expr::Literal(
            ScalarValue::UInt64(Some(*v as u64)),
            m.clone(),
        )),
        _ => None,
    }
}

fn rewrite(e: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    Ok(match e {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            if let (true, Some(r)) = (is_u64(&left, schema), as_u64(&right)) {
                Transformed::yes(Expr::BinaryExpr(BinaryExpr {
                    left,
                    op,
                    right: Box::new(r),
                }))
            } else if let (Some(l), true) = (as_u64(&left), is_u64(&right, schema)) {
                Transformed::yes(Expr::BinaryExpr(BinaryExpr {
                    left: Box::new(l),
                    op,
                    right,
                }))
            } else {
                Transformed::no(Expr::BinaryExpr(BinaryExpr { left, op, right }))
            }
        }
        Expr::Between(b) if is_u64(&b.expr, schema) => {
            let low = as_u64(&b.low).map(Box::new).unwrap_or(b.low);
            let high = as_u64(&b.high).map(Box::new).unwrap_or(b.high);
            Transformed::yes(Expr::Between(Between {
                expr: b.expr,
                negated: b.negated,
                low,
                high,
            }))
        }
        Expr::InList(il)
            if is_u64(&il.expr, schema) && il.list.iter().all(|x| as_u64(x).is_some()) =>
        {
            let list = il.list.iter().map(|x| as_u64(x).unwrap()).collect();
            Transformed::yes(Expr::InList(InList {
                expr: il.expr,
                list,
                negated: il.negated,
            }))
        }
        other => Transformed::no(other),
    })
}

/// Rewrites every expression of `plan` (subqueries too) bottom-up with
/// `rewrite`, which sees the schema of the node's inputs; shared by eBQL's
/// analyzer rules. Output names are kept (`count / 100` is referenced by
/// name above an aggregate); types may change, so schemas are recomputed.
pub(crate) fn rewrite_expressions(
    plan: LogicalPlan,
    rewrite: impl Fn(Expr, &DFSchema) -> Result<Transformed<Expr>>,
) -> Result<LogicalPlan> {
    plan.transform_up_with_subqueries(|node| {
        let schema = merge_schema(&node.inputs());
        let names = NamePreserver::new(&node);
        node.map_expressions(|e| {
            let saved = names.save(&e);
            Ok(e.transform_up(|x| rewrite(x, &schema))?
                .update_data(|e| saved.restore(e)))
        })?
        .map_data(|p| p.recompute_schema())
    })
    .map(|t| t.data)
}

impl AnalyzerRule for UnsignedLiterals {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        rewrite_expressions(plan, rewrite)
    }

    fn name(&self) -> &str {
        "ebql_unsigned_literals"
    }
}
