//! `--partial`: each closed window written as its aggregates' mergeable
//! *states*, not their values, for a merge across hosts by a distributed
//! engine (Spark, Flink, DataFusion's Final mode). Issue 23.
//!
//! [`apply`] rewrites a compiled query's user-space part; the kernel part
//! is unchanged (same programs, same map values). The group table's rows
//! are decoded into state columns ([`crate::agg::Output::state`]) instead
//! of values, and the remainder becomes a fixed projection. A window's rows
//! (after the executor's bound columns, `window_start`/`window_end` wall
//! clock, then their CLOCK_MONOTONIC ns) are, schema version [`VERSION`]:
//!
//! | column | type | |
//! |---|---|---|
//! | `host_id` | Utf8 | who wrote the row (`--host-id`, default the hostname) |
//! | `query_id` | Utf8 | `--query-id`, default the query hash |
//! | `query_hash` | Utf8 | xxHash64 of the query text, 16 hex digits |
//! | `partial_version` | UInt32 | [`VERSION`] |
//! | `clock_error_ns` | UInt64 | the host clock's estimated error; NULL: not synchronized |
//! | `window_groups` | UInt64 | NULL on group rows; on the window row, the number of group rows |
//! | each GROUP BY key | its type | by its output name (the first, if selected twice; its own name if not selected) |
//! | `{aggregate}[{part}]` | per aggregate | its state columns |
//!
//! Every window has one *window row* (keys and states NULL, `window_groups`
//! set, 0 when the window saw no events): a merge learns from it which hosts
//! closed the window, so a host with no events is not a missing host. A
//! host writes its windows in order, so `window_end` is also its watermark:
//! it has written every window that ends at or before it.
//!
//! The states: COUNT `[count]` Int64; SUM `[sum]`; MIN `[min]`, MAX `[max]`;
//! AVG `[count]` UInt64, `[sum]` Float64; variances `[count]`, `[mean]`,
//! `[m2]` (DataFusion's accumulators' `state()`, so its Final mode merges
//! them); HIST/LHIST `[counts]` (every bucket, as eBQL's own user-space
//! accumulators' state); quantiles `[buckets]`, `[counts]` (the sketch's
//! non-empty buckets, [`crate::agg::quantile`]); approx_distinct `[hll]`
//! (an Apache DataSketches HLL_8 sketch, [`crate::agg::hll_datasketches`]).
//! A query whose aggregates are all COUNT(DISTINCT x) writes the sets
//! themselves: DataFusion plans it as a count over the kernel's groups of
//! (keys, x), and those groups are the rows, x in `{aggregate}[value]`; a
//! merge counts the distinct values over every host's rows. Beside other
//! aggregates, COUNT(DISTINCT) is refused (its kernel counter does not merge).
//!
//! Refused, with why: a query whose aggregate runs in user space, without a
//! time window, over a wire relation, or whose remainder computes anything
//! but the keys and aggregates themselves (HAVING, LIMIT, expressions over
//! aggregates: they belong after the merge).

use crate::agg::Func;
use crate::diag::Diagnostic;
use crate::error::CompileError;
use crate::pipeline::CompiledQuery;
use crate::planner::WindowInput;
use crate::prepass::WindowSpec;
use crate::split::{KernelOutput, KERNEL_INPUT};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, ScalarValue};
use datafusion::datasource::provider_as_source;
use datafusion::logical_expr::{lit, Expr, LogicalPlan, LogicalPlanBuilder};
use std::sync::Arc;

/// The version of the partial rows' schema (the `partial_version` column).
pub const VERSION: u32 = 1;

/// Who writes the partial rows: the values of their identity columns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// `host_id`: the host (or agent) writing.
    pub host_id: String,
    /// `query_id`: the name the fleet gives the query.
    pub query_id: String,
    /// `query_hash`: a hash of the query text (the executor's: xxHash64).
    pub query_hash: String,
    /// `clock_error_ns`: the host clock's estimated error when an NTP
    /// daemon keeps it (the kernel's `esterror`), `None` (NULL) when no
    /// daemon does: then how far its windows are from other hosts' is unknown.
    pub clock_error_ns: Option<u64>,
}

/// What a merge needs to know of a query's partial rows.
#[derive(Clone, Debug)]
pub struct PartialLayout {
    /// [`VERSION`].
    pub version: u32,
    /// The identity every row carries.
    pub identity: Identity,
    /// Window size and step, ns.
    pub window_ns: (u64, u64),
    /// The GROUP BY keys: output name and type.
    pub keys: Vec<Field>,
    /// The aggregates, in output order.
    pub aggregates: Vec<PartialAggregate>,
}

/// One aggregate's state in the partial rows.
#[derive(Clone, Debug)]
pub struct PartialAggregate {
    /// The output column's name (its state columns are `{name}[{part}]`).
    pub name: String,
    /// The SQL function as DataFusion planned it, lower case (`avg`, `hist`, …).
    pub function: String,
    /// The constant arguments after the first, as SQL text (a quantile's
    /// q, LHIST's min, max, step).
    pub params: Vec<String>,
    /// The final value's type.
    pub result_type: DataType,
    /// Its state columns, in order.
    pub columns: Vec<Field>,
}

/// A query error of `--partial` with a hint.
fn refuse(message: impl Into<String>, hint: &str) -> CompileError {
    CompileError::Query(Diagnostic::new(message.into(), None).with_hint(hint.to_string()))
}

/// Rewrites `compiled` to write its aggregates' states with `identity`
/// (see the module doc) and returns the layout of its rows.
///
/// Errors: [`CompileError::Query`] when the query cannot be written as
/// partial states (why, and what to do instead).
pub fn apply(
    compiled: &mut CompiledQuery,
    identity: &Identity,
) -> Result<PartialLayout, CompileError> {
    const AFTER_MERGE: &str =
        "apply it to the merged rows instead (ebql.spark.merge's output, or DataFusion's Final aggregate)";
    if compiled.wire.is_some() {
        return Err(refuse(
            "--partial writes the states of the kernel's aggregates; a wire relation's statements are decoded in user space",
            "aggregate the relation per host, or send its rows (without --partial) to the merge",
        ));
    }
    let window_ns = match compiled.planned.prepared.window {
        Some(WindowSpec::Time { size_ns, step_ns }) => (size_ns, step_ns),
        _ => {
            return Err(refuse(
                "--partial needs a time window: hosts' rows are merged by their wall-clock window bounds",
                "add e.g. WINDOW(time, 1000, 1000)",
            ))
        }
    };
    let KernelOutput::Groups(spec) = &mut compiled.split.kernel.output else {
        let why = compiled.split.user_ops.first().cloned().unwrap_or_default();
        return Err(refuse(
            format!("--partial writes the states of an aggregate in the kernel's group table; this query has none there: {why}"),
            "see `ebql explain`; split the aggregates over two queries when their states are too large together",
        ));
    };
    let nkeys = spec.keys.len();
    let kernel_fields = compiled.split.kernel_schema.fields().clone();
    let (key_names, functions) = aggregate_parts(&compiled.planned.plan);
    let remainder = &compiled.split.remainder;
    let mut keys: Vec<(usize, Field)> = Vec::new();
    let mut aggregates: Vec<PartialAggregate> = Vec::new();
    let mut parts: Vec<(Func, DataType, String)> = Vec::new();
    let mut state_fields: Vec<Field> = Vec::new();
    // Kernel keys holding a COUNT(DISTINCT)'s values, and their column's name.
    let mut values: Vec<(usize, String)> = Vec::new();
    for (k, out) in remainder.schema().fields().iter().enumerate() {
        let source = kernel_column(remainder, k).map_err(|(what, hint)| {
            refuse(
                format!("with --partial, {what} cannot run on one host's states"),
                hint.unwrap_or(AFTER_MERGE),
            )
        })?;
        let i = match source {
            Source::Column(i) => i,
            Source::DistinctCount(i) => {
                // The set itself, one row per (group, value): a merge counts distinct values.
                let name = match values.iter().find(|(j, _)| *j == i) {
                    Some((_, name)) => name.clone(),
                    None => {
                        let name = format!("{}[value]", out.name());
                        values.push((i, name.clone()));
                        name
                    }
                };
                aggregates.push(PartialAggregate {
                    name: out.name().clone(),
                    function: "count_distinct".into(),
                    params: Vec::new(),
                    result_type: out.data_type().clone(),
                    columns: vec![kernel_fields[i].as_ref().clone().with_name(name)],
                });
                continue;
            }
        };
        if i < nkeys {
            // A key selected twice is written once, under its first name.
            if !keys.iter().any(|(j, _)| *j == i) {
                keys.push((i, kernel_fields[i].as_ref().clone().with_name(out.name())));
            }
            continue;
        }
        let (func, dt, text) = &spec.aggs[i - nkeys];
        let state = func.state(&spec.slots, dt).map_err(|why| {
            refuse(
                format!("--partial cannot write `{}`: {why}", out.name()),
                "drop it, or use an aggregate that merges",
            )
        })?;
        let (function, params) = functions.get(i - nkeys).cloned().unwrap_or_default();
        let mut columns = Vec::new();
        for part in state {
            let name = format!("{}[{}]", out.name(), part.suffix);
            columns.push(Field::new(&name, part.data_type.clone(), true));
            state_fields.push(Field::new(&name, part.data_type.clone(), true));
            parts.push((
                part.func,
                part.data_type,
                format!("{text} [{}]", part.suffix),
            ));
        }
        aggregates.push(PartialAggregate {
            name: out.name().clone(),
            function,
            params,
            result_type: dt.clone(),
            columns,
        });
    }
    // Every key, selected or not: a key left out would merge rows it separates.
    for i in 0..nkeys {
        if !keys.iter().any(|(j, _)| *j == i) && !values.iter().any(|(j, _)| *j == i) {
            let name = key_names
                .get(i)
                .cloned()
                .unwrap_or_else(|| format!("key{i}"));
            keys.push((i, kernel_fields[i].as_ref().clone().with_name(name)));
        }
    }
    keys.sort_by_key(|(i, _)| *i);
    spec.aggs = parts;
    // The kernel's row: its keys (group keys and distinct values) in order, then the states.
    let mut row: Vec<(usize, Field)> = keys.clone();
    row.extend(
        values
            .iter()
            .map(|(i, name)| (*i, kernel_fields[*i].as_ref().clone().with_name(name))),
    );
    row.sort_by_key(|(i, _)| *i);
    let key_fields: Vec<Field> = keys.into_iter().map(|(_, f)| f).collect();
    let schema = Arc::new(Schema::new(
        row.into_iter()
            .map(|(_, f)| f)
            .chain(state_fields)
            .collect::<Vec<_>>(),
    ));
    let input = Arc::new(WindowInput::new(schema.clone()));
    compiled.split.remainder = rows_plan(&input, identity, &schema)?;
    compiled.split.kernel_schema = schema;
    compiled.split.input = input;
    compiled.split.user_ops = vec![format!(
        "--partial: each window's aggregate states as rows (schema version {VERSION}), plus one window row"
    )];
    compiled.split.streamable = false;
    compiled.split.stream_limit = None;
    Ok(PartialLayout {
        version: VERSION,
        identity: identity.clone(),
        window_ns,
        keys: key_fields,
        aggregates,
    })
}

/// Where an output column of the remainder comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    /// Kernel column `i`, named or renamed.
    Column(usize),
    /// COUNT(DISTINCT) of kernel key `i`: DataFusion plans a query whose
    /// aggregates are all COUNT(DISTINCT x) as a count over the kernel's
    /// groups of (keys, x).
    DistinctCount(usize),
}

/// Where output column `k` of `plan` comes from, through projections that
/// only name or rename columns, sorts, and a COUNT(DISTINCT)'s count over
/// the kernel's groups; `Err` names what computes instead (HAVING, LIMIT,
/// an expression), and a hint when the general one (apply it after the
/// merge) is not the answer.
fn kernel_column(plan: &LogicalPlan, k: usize) -> Result<Source, (String, Option<&'static str>)> {
    let what = |s: String| (s, None);
    let column = |e: &Expr, input: &LogicalPlan| -> Result<usize, (String, Option<&'static str>)> {
        let mut e = e;
        while let Expr::Alias(a) = e {
            e = &a.expr;
        }
        let Expr::Column(c) = e else {
            return Err(what(format!("`{e}`")));
        };
        input
            .schema()
            .index_of_column(c)
            .map_err(|e| what(e.to_string()))
    };
    match plan {
        LogicalPlan::Projection(p) => kernel_column(&p.input, column(&p.expr[k], &p.input)?),
        LogicalPlan::Sort(s) if s.fetch.is_none() => kernel_column(&s.input, k),
        LogicalPlan::SubqueryAlias(s) => kernel_column(&s.input, k),
        LogicalPlan::TableScan(s) if s.table_name.table() == KERNEL_INPUT => {
            Ok(Source::Column(s.projection.as_ref().map_or(k, |p| p[k])))
        }
        LogicalPlan::Filter(_) => Err(what("HAVING".into())),
        LogicalPlan::Limit(_) | LogicalPlan::Sort(_) => Err(what("LIMIT".into())),
        LogicalPlan::Aggregate(a) => {
            let from_kernel = |i: usize| match kernel_column(&a.input, i)? {
                Source::Column(i) => Ok(i),
                Source::DistinctCount(_) => Err(what("an aggregate of an aggregate".into())),
            };
            if let Some(g) = a.group_expr.get(k) {
                return Ok(Source::Column(from_kernel(column(g, &a.input)?)?));
            }
            match a.aggr_expr[k - a.group_expr.len()].clone().unalias() {
                Expr::AggregateFunction(f)
                    if f.func.name() == "count"
                        && !f.params.distinct
                        && f.params.filter.is_none()
                        && f.params.args.len() == 1 =>
                {
                    Ok(Source::DistinctCount(from_kernel(column(&f.params.args[0], &a.input)?)?))
                }
                // DataFusion plans COUNT(DISTINCT x) beside other aggregates as partial
                // aggregates over the kernel's groups of (keys, x), finished here.
                other => Err((
                    format!("`{other}` over the kernel's groups (COUNT(DISTINCT x) beside other aggregates, as DataFusion plans it)"),
                    Some("query the distinct counts alone (their sets are written as rows), or use approx_distinct(x) (a HyperLogLog sketch)"),
                )),
            }
        }
        other => Err(what(format!("`{}`", other.display()))),
    }
}

/// The plan's aggregate: each GROUP BY key's name (a column's own name,
/// else the expression's), and each aggregate expression's SQL function
/// and constant parameters, in its order (which is the group spec's).
type AggregateParts = (Vec<String>, Vec<(String, Vec<String>)>);

/// [`AggregateParts`] of the first aggregate of `plan`.
fn aggregate_parts(plan: &LogicalPlan) -> AggregateParts {
    let mut out = AggregateParts::default();
    let _ = plan.apply(|n| {
        let LogicalPlan::Aggregate(a) = n else {
            return Ok(TreeNodeRecursion::Continue);
        };
        out.0 = a
            .group_expr
            .iter()
            .map(|e| match e {
                Expr::Column(c) => c.name.clone(),
                other => other.schema_name().to_string(),
            })
            .collect();
        out.1 = a
            .aggr_expr
            .iter()
            .map(|e| match e.clone().unalias() {
                Expr::AggregateFunction(f) => (
                    f.func.name().to_lowercase(),
                    f.params
                        .args
                        .iter()
                        .skip(1)
                        .map(|a| match a {
                            Expr::Literal(v, _) => v.to_string(),
                            other => other.to_string(),
                        })
                        .collect(),
                ),
                other => (other.to_string(), Vec::new()),
            })
            .collect();
        Ok(TreeNodeRecursion::Stop)
    });
    out
}

/// The partial remainder: the group rows with the identity columns, and
/// UNION ALL one window row counting them.
fn rows_plan(
    input: &Arc<WindowInput>,
    id: &Identity,
    schema: &Schema,
) -> Result<LogicalPlan, CompileError> {
    let internal = |e: datafusion::error::DataFusionError| CompileError::Internal(e.to_string());
    let scan = || LogicalPlanBuilder::scan(KERNEL_INPUT, provider_as_source(input.clone()), None);
    let identity = || {
        vec![
            lit(id.host_id.as_str()).alias("host_id"),
            lit(id.query_id.as_str()).alias("query_id"),
            lit(id.query_hash.as_str()).alias("query_hash"),
            lit(VERSION).alias("partial_version"),
            lit(ScalarValue::UInt64(id.clock_error_ns)).alias("clock_error_ns"),
        ]
    };
    let column = |f: &Field| Expr::Column(Column::new(Some(KERNEL_INPUT), f.name()));
    let null = |f: &Field| -> Result<Expr, CompileError> {
        let v = ScalarValue::try_from(f.data_type()).map_err(internal)?;
        Ok(lit(v).alias(f.name()))
    };
    let mut group_cols = identity();
    group_cols.push(lit(ScalarValue::UInt64(None)).alias("window_groups"));
    group_cols.extend(schema.fields().iter().map(|f| column(f).alias(f.name())));
    let groups = scan()
        .and_then(|b| b.project(group_cols))
        .map_err(internal)?
        .build()
        .map_err(internal)?;
    let count = datafusion::functions_aggregate::count::count_all().alias("n");
    let mut window_cols = identity();
    window_cols.push(
        datafusion::logical_expr::cast(Expr::Column(Column::from_name("n")), DataType::UInt64)
            .alias("window_groups"),
    );
    for f in schema.fields() {
        window_cols.push(null(f)?);
    }
    let window = scan()
        .and_then(|b| b.aggregate(Vec::<Expr>::new(), vec![count]))
        .and_then(|b| b.project(window_cols))
        .map_err(internal)?
        .build()
        .map_err(internal)?;
    LogicalPlanBuilder::from(groups)
        .union(window)
        .and_then(|b| b.build())
        .map_err(internal)
}
