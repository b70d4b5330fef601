//! The split's steps, shared by the single-event split ([`super::split`])
//! and the pairing ([`crate::pair`]): pushed-down filters, the kernel
//! aggregate and its group table, kernel columns and strings, the
//! placeholder scan the user-space remainder reads, and the finish.

use crate::agg::Slot;
use crate::choose::AggregateChoice;
use crate::diag::Diagnostic;
use crate::error::CompileError;
use crate::kexpr::{
    conjuncts, never_null, translate_pred, translate_value, IntType, KExpr, KPred, Scope, StrSrc,
};
use crate::planner::{PlanMode, Planned, WindowInput};
use crate::prepass::WindowSpec;
use crate::split::plan::{
    GroupKey, GroupSpec, KernelPlan, Split, ValueSrc, KERNEL_INPUT, MAX_VALUE_BYTES,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::default_table_source::provider_as_source;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder, Projection};
use ebql_catalog::{Column as EventColumn, EventSchema, SystemAttr};
use std::sync::Arc;

pub(crate) fn internal(msg: impl Into<String>) -> CompileError {
    CompileError::Internal(msg.into())
}

/// The event `scan` reads and its columns qualified by the scan's table
/// name, as the scan's expressions name them.
///
/// Errors: an `Internal` error for a table the planner did not resolve.
pub(crate) fn scan_event(
    planned: &Planned,
    scan: &datafusion::logical_expr::TableScan,
) -> Result<(EventSchema, datafusion::common::DFSchema), CompileError> {
    let table = scan.table_name.table();
    let event = planned
        .events
        .get(table)
        .cloned()
        .ok_or_else(|| internal(format!("scan of unknown table {table}")))?;
    let schema = datafusion::common::DFSchema::try_from_qualified_schema(
        datafusion::common::TableReference::bare(table),
        &crate::planner::event_arrow_schema(&event),
    )
    .map_err(|e| internal(e.to_string()))?;
    Ok((event, schema))
}

/// A call of `str`, `ustr`, `kstr` or `truncated` ([`crate::strfn`]), of
/// a memory load (`u64_at`…, [`crate::memfn`]) or of `uregs`
/// ([`crate::uregs`]): what only the probe can evaluate.
pub(crate) fn is_str_call(e: &Expr) -> bool {
    matches!(e, Expr::ScalarFunction(f) if crate::kexpr::STR_FUNCTIONS.contains(&f.name()) || f.name() == crate::kexpr::BYTES_FUNCTION || f.name() == crate::kexpr::TRUNCATED_FUNCTION || crate::memfn::load_type(f.name()).is_some() || f.name() == crate::uregs::FUNCTION)
}

/// A kernel column standing for a `str()`, `truncated()` or memory-load call of the plan.
#[derive(Clone)]
pub(crate) struct StrColumn {
    /// Column name, `__ebql_str<i>`.
    pub name: String,
    /// The call, inlined down to the event's columns.
    pub call: Expr,
    /// How the probe reads it.
    pub value: ValueSrc,
    /// Utf8, Boolean for `truncated()`, the loaded integer type for a load.
    pub data_type: DataType,
}

/// How the kernel reads a `str()`/`truncated()` call (inlined), or why it cannot.
fn str_call_value(call: &Expr, scope: &Scope) -> Result<(ValueSrc, DataType), String> {
    let Expr::ScalarFunction(f) = call else {
        return Err(format!("`{call}` is not a string function"));
    };
    if let Some(dt) = crate::memfn::load_type(f.name()) {
        return Ok((ValueSrc::Int(translate_value(call, scope)?), dt));
    }
    if f.name() == crate::uregs::FUNCTION {
        return Ok((
            ValueSrc::Int(translate_value(call, scope)?),
            DataType::UInt64,
        ));
    }
    if f.name() != crate::kexpr::TRUNCATED_FUNCTION {
        return match crate::kexpr::str_src(call, scope)? {
            Some(src @ StrSrc::Bytes { .. }) => Ok((ValueSrc::Str(src), DataType::Binary)),
            Some(src) => Ok((ValueSrc::Str(src), DataType::Utf8)),
            None => Err(format!("`{call}` is not a string the kernel reads")),
        };
    }
    let arg = f.args.first().ok_or("truncated() needs a string")?;
    match crate::kexpr::str_src(arg, scope)? {
        Some(src) if src.helper_buffer().is_some() || matches!(src, StrSrc::Bytes { .. }) => {
            Ok((ValueSrc::Truncated(src), DataType::Boolean))
        }
        Some(src) => Err(format!("`{src}` has a fixed size and is never cut")),
        None => Err(format!(
            "{} is not a string the probe reads",
            shown_arg(arg)
        )),
    }
}

/// An argument as the user wrote it, near enough: a column unqualified, a
/// string constant quoted.
fn shown_arg(arg: &Expr) -> String {
    match crate::kexpr::strip_alias(arg) {
        Expr::Column(c) => format!("`{}`", c.name),
        Expr::Literal(ScalarValue::Utf8(Some(s)), _) => format!("the constant '{s}'"),
        Expr::Literal(..) => "a constant".into(),
        other => format!("`{other}`"),
    }
}

/// What to write instead of a `truncated(arg)` the probe cannot read,
/// for the argument at hand.
fn truncated_hint(arg: Option<&Expr>, scope: &Scope) -> String {
    use ebql_catalog::FieldKind;
    let general = "truncated(s) says whether s was cut to its buffer: s is str(pointer, n) or a __data_loc string field; `ebql describe EVENT` shows the columns";
    let Some(Expr::Column(c)) = arg.map(crate::kexpr::strip_alias) else {
        return general.into();
    };
    match scope.event.resolve(&c.name) {
        Some(EventColumn::Attr(SystemAttr::Comm)) => "`comm` is the task name, always read whole (16 bytes): truncated() would always be false; drop it".into(),
        Some(EventColumn::Field(f)) => match f.kind {
            FieldKind::CharArray { len } => format!("`{0}` is a char[{len}] array, always read whole: truncated() would always be false; drop it", c.name),
            FieldKind::Int { .. } => format!("`{0}` is an integer, not a string: truncated() takes str(pointer, n) or a __data_loc string field; `ebql describe EVENT` shows the columns", c.name),
            FieldKind::Pointer => format!("`{0}` is a pointer, not its string: write truncated(str({0}, n)) with the buffer size n you read it with", c.name),
            _ => general.into(),
        },
        _ => general.into(),
    }
}

/// The `str()` and `truncated()` calls a streamed plan evaluates above the
/// kernel's input: the memory they read is gone once the event is over, so
/// the probe reads each distinct call (inlined down to the event's columns)
/// into a streamed column of its own.
pub(crate) fn str_columns(
    plan: &LogicalPlan,
    scope: &Scope,
    query: &str,
) -> Result<Vec<StrColumn>, CompileError> {
    str_columns_over(plan, scope, query, &|_| true)
}

/// [`str_columns`] of the nodes whose (first) input `reads` says reads
/// `scope`'s event: in a query over several events, one event's calls.
pub(crate) fn str_columns_over(
    plan: &LogicalPlan,
    scope: &Scope,
    query: &str,
    reads: &dyn Fn(&LogicalPlan) -> bool,
) -> Result<Vec<StrColumn>, CompileError> {
    let mut out: Vec<StrColumn> = Vec::new();
    let mut failed: Option<CompileError> = None;
    plan.apply(|node| {
        let input = match (node, node.inputs().first().copied()) {
            (LogicalPlan::TableScan(_), _) | (_, None) => return Ok(TreeNodeRecursion::Continue),
            (_, Some(i)) if !reads(i) => return Ok(TreeNodeRecursion::Continue),
            (_, Some(i)) => i,
        };
        for e in node.expressions() {
            e.apply(|x| {
                if !is_str_call(x) {
                    return Ok(TreeNodeRecursion::Continue);
                }
                let Expr::ScalarFunction(f) = x else { unreachable!("a str call") };
                let read = inline_projections(x, input).and_then(|inl| str_call_value(&inl, scope).map(|v| (inl, v)));
                match read {
                    Ok((call, (value, data_type))) if !out.iter().any(|c| c.call == call) => {
                        out.push(StrColumn { name: format!("__ebql_str{}", out.len()), call, value, data_type })
                    }
                    Ok(_) => {}
                    Err(why) => {
                        let hint = if f.name() == crate::uregs::FUNCTION {
                            "uregs('name') reads a register of struct pt_regs (x86-64 system call arguments: di, si, dx, r10, r8, r9; its number: orig_ax) on a tp_btf, fentry or fexit event".to_string()
                        } else if crate::memfn::load_type(f.name()).is_some() {
                            "u64_at(p) and the other loads read at an address computed in the kernel from the event's columns (e.g. u64_at(arg0 + 8)); `ebql describe EVENT` shows the columns".to_string()
                        } else if f.name() == crate::kexpr::TRUNCATED_FUNCTION {
                            let arg = inline_projections(x, input).ok().and_then(|inl| match inl {
                                Expr::ScalarFunction(g) => g.args.first().cloned(),
                                _ => None,
                            });
                            truncated_hint(arg.as_ref(), scope)
                        } else if f.name() == crate::kexpr::BYTES_FUNCTION {
                            "bytes(p, len, n) reads the len bytes at a pointer-valued column of the event, at most n; in a pairing, a start's buffer is read at the end when len is the end's (bytes(e.buf, x.ret, 512))".to_string()
                        } else {
                            "str(x) reads a pointer-valued column of the event (e.g. str(filename)) or a __data_loc string; `ebql describe EVENT` shows the columns".to_string()
                        };
                        failed.get_or_insert(CompileError::Query(
                            Diagnostic::new(format!("{}() cannot be read in the probe: {why}", f.name()), crate::planner::find_word(query, f.name())).with_hint(hint),
                        ));
                    }
                }
                Ok(TreeNodeRecursion::Jump)
            })?;
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .map_err(|e| internal(e.to_string()))?;
    match failed {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// Replaces every `str()` call of `plan` by the kernel column that holds it
/// ([`str_columns`]), keeping the output names the user sees. Projections
/// between the scan and a node that reads such a column forward it (the
/// optimizer pruned them to what the call's argument needed), and the
/// plan's output is cut back to its own columns.
pub(crate) fn replace_str_calls(
    plan: LogicalPlan,
    strs: &[StrColumn],
    table: &str,
) -> Result<LogicalPlan, CompileError> {
    // A projection that reads the column itself consumed it (its parents
    // name its output), unless a parent calls the same str() again (the
    // optimizer's common subexpressions name only some uses): then every
    // projection passes it on.
    replace_str_calls_passing(plan.clone(), strs, table, false)
        .or_else(|_| replace_str_calls_passing(plan, strs, table, true))
}

/// [`replace_str_calls`]; `pass_all`: every projection passes the columns on.
fn replace_str_calls_passing(
    plan: LogicalPlan,
    strs: &[StrColumn],
    table: &str,
    pass_all: bool,
) -> Result<LogicalPlan, CompileError> {
    use datafusion::common::{Column, DataFusionError};
    use datafusion::logical_expr::expr_rewriter::NamePreserver;
    if strs.is_empty() {
        return Ok(plan);
    }
    let outputs = plan.schema().fields().len();
    let rewritten = plan
        .transform_up(|node| {
            let input = match (&node, node.inputs().first()) {
                (LogicalPlan::TableScan(_), _) | (_, None) => return Ok(Transformed::no(node)),
                (_, Some(i)) => (*i).clone(),
            };
            let names = NamePreserver::new(&node);
            let mut t = node.map_expressions(|e| {
                let saved = names.save(&e);
                // Outermost calls first: `truncated(str(p))` is one column, not a flag of a column.
                let t = e.transform_down(|x| {
                    if !is_str_call(&x) {
                        return Ok(Transformed::no(x));
                    }
                    let inl = inline_projections(&x, &input).map_err(DataFusionError::Plan)?;
                    // The input is already rewritten: a call below (a common
                    // subexpression `str(p)` of `truncated(str(p))`) is its column now.
                    let inl = inl
                        .transform_up(|y| match &y {
                            Expr::Column(col) => match strs.iter().find(|c| c.name == col.name) {
                                Some(c) => Ok(Transformed::yes(c.call.clone())),
                                None => Ok(Transformed::no(y)),
                            },
                            _ => Ok(Transformed::no(y)),
                        })?
                        .data;
                    match strs.iter().find(|c| c.call == inl) {
                        Some(c) => Ok(Transformed::new(
                            Expr::Column(Column::new(
                                Some(datafusion::common::TableReference::bare(table)),
                                &c.name,
                            )),
                            true,
                            TreeNodeRecursion::Jump,
                        )),
                        None => Ok(Transformed::no(x)),
                    }
                })?;
                Ok(if t.transformed {
                    t.update_data(|e| saved.restore(e))
                } else {
                    t
                })
            })?;
            if let LogicalPlan::Projection(p) = &mut t.data {
                for StrColumn { name, .. } in strs {
                    let read_here = p
                        .expr
                        .iter()
                        .any(|e| e.column_refs().iter().any(|c| c.name == *name));
                    let passed = p
                        .expr
                        .iter()
                        .any(|e| matches!(e, Expr::Column(c) if c.name == *name));
                    let pass = !passed && (pass_all || !read_here);
                    if pass && input.schema().has_column_with_unqualified_name(name) {
                        p.expr.push(Expr::Column(Column::new(
                            Some(datafusion::common::TableReference::bare(table)),
                            name,
                        )));
                        t.transformed = true;
                    }
                }
            }
            // Passed columns stop at a union: each input keeps the union's
            // width (a call over a union reads no one branch, `crate::multi`).
            if let LogicalPlan::Union(u) = &mut t.data {
                let width = u.schema.fields().len();
                for input in &mut u.inputs {
                    if input.schema().fields().len() > width {
                        let keep = input
                            .schema()
                            .columns()
                            .into_iter()
                            .take(width)
                            .map(Expr::Column);
                        let cut = LogicalPlanBuilder::from(input.as_ref().clone())
                            .project(keep)?
                            .build()?;
                        *input = Arc::new(cut);
                        t.transformed = true;
                    }
                }
            }
            t.map_data(|n| n.recompute_schema())
        })
        .map(|t| t.data)
        .map_err(|e| internal(e.to_string()))?;
    if rewritten.schema().fields().len() == outputs {
        return Ok(rewritten);
    }
    let keep: Vec<Expr> = rewritten
        .schema()
        .columns()
        .into_iter()
        .take(outputs)
        .map(Expr::Column)
        .collect();
    LogicalPlanBuilder::from(rewritten)
        .project(keep)
        .and_then(|b| b.build())
        .map_err(|e| internal(e.to_string()))
}

/// The kernel rows' placeholder: columns `c0…` of `schema`'s types, and the
/// projection that gives them back their qualified names for the remainder.
pub(crate) fn placeholder(
    schema: &datafusion::common::DFSchemaRef,
) -> Result<(SchemaRef, Arc<WindowInput>, LogicalPlan), CompileError> {
    // Metadata travels along: it marks stack columns, symbolized in user space.
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            Field::new(format!("c{i}"), f.data_type().clone(), f.is_nullable())
                .with_metadata(f.metadata().clone())
        })
        .collect();
    let kernel_schema = Arc::new(Schema::new(fields));
    let input = Arc::new(WindowInput::new(kernel_schema.clone()));
    let scan = LogicalPlanBuilder::scan(KERNEL_INPUT, provider_as_source(input.clone()), None)
        .and_then(|b| b.build())
        .map_err(|e| internal(e.to_string()))?;
    let exprs: Vec<Expr> = schema
        .iter()
        .enumerate()
        .map(|(i, (q, f))| {
            Expr::Column(datafusion::common::Column::new(
                Some(KERNEL_INPUT),
                format!("c{i}"),
            ))
            .alias_qualified(q.cloned(), f.name())
        })
        .collect();
    let plan = LogicalPlan::Projection(
        Projection::try_new(exprs, Arc::new(scan)).map_err(|e| internal(e.to_string()))?,
    );
    Ok((kernel_schema, input, plan))
}

/// A raw stream's LIMIT the executor can apply by counting output rows:
/// a `LIMIT n` (no OFFSET) reached from the root through row-for-row
/// nodes only (projections, aliases), with no other LIMIT below it. Returns
/// `n` and the plan without that LIMIT. Any other LIMIT (under a filter,
/// with an OFFSET, or a second one) is `None`: the remainder then runs once
/// over all the rows, since running it per drained batch would apply the
/// LIMIT to every batch (issue 19, bug 1).
fn hoist_limit(plan: &LogicalPlan) -> Result<Option<(usize, LogicalPlan)>, CompileError> {
    let mut node = plan;
    let limit = loop {
        match node {
            LogicalPlan::Projection(p) => node = p.input.as_ref(),
            LogicalPlan::SubqueryAlias(a) => node = a.input.as_ref(),
            LogicalPlan::Limit(l) => break l,
            _ => return Ok(None),
        }
    };
    let fetch = match limit.fetch.as_deref() {
        Some(Expr::Literal(ScalarValue::Int64(Some(n)), _)) if *n >= 0 => *n as usize,
        _ => return Ok(None),
    };
    let no_skip = matches!(
        limit.skip.as_deref(),
        None | Some(Expr::Literal(ScalarValue::Int64(Some(0)), _))
    );
    if !no_skip || contains_limit(&limit.input)? {
        return Ok(None);
    }
    let target = limit.input.clone();
    let mut replaced = false;
    let rest = plan
        .clone()
        .transform_down(|n| match n {
            LogicalPlan::Limit(_) if !replaced => {
                replaced = true;
                Ok(Transformed::yes(target.as_ref().clone()))
            }
            other => Ok(Transformed::no(other)),
        })
        .map_err(|e| internal(e.to_string()))?
        .data;
    // The projections above keep their schemas: their input's schema is unchanged.
    Ok(Some((fetch, rest)))
}

/// Whether `plan` has a LIMIT anywhere.
fn contains_limit(plan: &LogicalPlan) -> Result<bool, CompileError> {
    plan.exists(|n| Ok(matches!(n, LogicalPlan::Limit(_))))
        .map_err(|e| internal(e.to_string()))
}

/// Describes the user-space part (what runs there and why) and decides how it is driven.
pub(crate) fn finish(
    planned: &Planned,
    kernel: KernelPlan,
    kernel_schema: SchemaRef,
    input: Arc<WindowInput>,
    remainder: LogicalPlan,
    mut user_ops: Vec<String>,
) -> Result<Split, CompileError> {
    let window = kernel.window;
    let mut streamable = true;
    let mut stream_limit = None;
    let mut remainder = remainder;
    remainder
        .apply(|n| {
            match n {
                LogicalPlan::TableScan(_)
                | LogicalPlan::Projection(_)
                | LogicalPlan::SubqueryAlias(_) => {}
                // A query over several events routes each branch's rows (crate::multi).
                LogicalPlan::Filter(f)
                    if f.predicate.column_refs().iter().any(|c| {
                        c.name == super::plan::BRANCH_COLUMN || c.name == super::plan::SIDE_KEY
                    }) => {}
                LogicalPlan::Filter(f) => user_ops.push(format!(
                    "Filter `{}` in user space: not compiled to BPF",
                    f.predicate
                )),
                LogicalPlan::Limit(_) => {}
                // Row by row too: a batch's rows of each event, one after the other.
                LogicalPlan::Union(_) => user_ops.push("Union in user space".into()),
                other => {
                    streamable = false;
                    user_ops.push(format!("{} in user space", other.display()));
                }
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .map_err(|e| internal(e.to_string()))?;
    if streamable && window.is_none() {
        match hoist_limit(&remainder)? {
            Some((n, rest)) => {
                stream_limit = Some(n);
                remainder = rest;
            }
            None if contains_limit(&remainder)? => streamable = false,
            None => {}
        }
    }
    let remainder = rename_outputs(
        remainder,
        &planned.events.keys().cloned().collect::<Vec<_>>(),
    )?;
    Ok(Split {
        kernel,
        kernel_schema,
        input,
        remainder,
        user_ops,
        streamable,
        stream_limit,
    })
}

/// The filters DataFusion pushed into `scan`, as kernel conjuncts in the
/// query's order, each with its SQL text (the physical pass orders them
/// for emission: [`crate::physical::choose`]).
pub(crate) fn scan_filters(
    scan: &datafusion::logical_expr::TableScan,
    scope: &Scope,
) -> Result<Vec<(KPred, String)>, CompileError> {
    let mut filters = Vec::new();
    for f in &scan.filters {
        let p = translate_pred(f, scope)
            .map_err(|why| internal(format!("pushed filter `{f}` does not compile: {why}")))?;
        let mut parts = Vec::new();
        conjuncts(p, &mut parts);
        for part in parts {
            if part != KPred::Const(true) {
                filters.push((part, f.to_string()));
            }
        }
    }
    Ok(filters)
}

pub(crate) fn over_scan(p: &LogicalPlan) -> bool {
    match p {
        LogicalPlan::TableScan(_) => true,
        LogicalPlan::Projection(pr) => over_scan(&pr.input),
        LogicalPlan::SubqueryAlias(a) => over_scan(&a.input),
        _ => false,
    }
}

/// The kernel's input scan, or (`branches`) its rows of one branch (a
/// filter on [`super::plan::BRANCH_COLUMN`] over it, `crate::multi`).
fn kernel_rows(plan: &LogicalPlan, branches: bool) -> bool {
    match plan {
        LogicalPlan::TableScan(s) => s.table_name.table() == KERNEL_INPUT,
        LogicalPlan::Filter(f) if branches => {
            matches!(f.input.as_ref(), LogicalPlan::TableScan(s) if s.table_name.table() == KERNEL_INPUT)
        }
        _ => false,
    }
}

/// Replaces projected column references in `e` by the projection's expressions,
/// down to the scan (through filters and aliases), so expressions over a
/// row-at-a-time chain refer to event columns.
pub(crate) fn inline_projections(e: &Expr, input: &LogicalPlan) -> Result<Expr, String> {
    inline(e, input, true)
}

/// [`inline_projections`] through a branch's rows too (`crate::multi`):
/// down to the stream's own columns (`{i}.name`, `__branch`).
pub(crate) fn inline_to_stream(e: &Expr, input: &LogicalPlan) -> Result<Expr, String> {
    inline(e, input, false)
}

/// `branches`: stop at a branch's rows, whose names are the scan's.
fn inline(e: &Expr, input: &LogicalPlan, branches: bool) -> Result<Expr, String> {
    match input {
        // The kernel rows' placeholder (`placeholder`, or a branch's rows
        // in a query over several events) names the columns the kernel
        // produces: stop there.
        LogicalPlan::Projection(pr) if kernel_rows(&pr.input, branches) => Ok(e.clone()),
        LogicalPlan::Projection(pr) => {
            let inlined = e
                .clone()
                .transform_up(|x| {
                    if let Expr::Column(c) = &x {
                        if let Ok(i) = pr.schema.index_of_column(c) {
                            return Ok(Transformed::yes(pr.expr[i].clone().unalias()));
                        }
                    }
                    Ok(Transformed::no(x))
                })
                .map_err(|err| err.to_string())?
                .data;
            inline(&inlined, &pr.input, branches)
        }
        LogicalPlan::SubqueryAlias(a) => inline(e, &a.input, branches),
        LogicalPlan::Filter(f) => inline(e, &f.input, branches),
        _ => Ok(e.clone()),
    }
}

fn value_src(e: &Expr, scope: &Scope) -> Result<ValueSrc, String> {
    let start_column =
        matches!(e.clone().unalias(), Expr::Column(c) if scope.start_of(&c).is_some());
    if start_column || matches!(e.clone().unalias(), Expr::ScalarFunction(_)) {
        if let Some(s) = crate::kexpr::str_src(e, scope)? {
            return Ok(ValueSrc::Str(s));
        }
    }
    if let Expr::Column(c) = e.clone().unalias() {
        if let (None, Ok(v)) = (scope.start_of(&c), column_value(&c.name, scope.event)) {
            return Ok(v);
        }
    }
    translate_value(e, scope).map(ValueSrc::Int)
}

/// The aggregate directly above the kernel's input (`over_input`: the
/// scan, or a pairing's join, through projections) with the group spec the
/// kernel runs it by, when every key and argument compiles; when one does
/// not, the reason is added to `user_ops` and the aggregate stays in user
/// space. `None` also in [`PlanMode::Reference`], where nothing is pushed,
/// and when the planner placed the aggregate in user space
/// ([`AggregateChoice::User`]).
pub(crate) fn kernel_aggregate(
    planned: &Planned,
    scope: &Scope,
    over_input: fn(&LogicalPlan) -> bool,
    user_ops: &mut Vec<String>,
) -> Result<Option<(LogicalPlan, GroupSpec)>, CompileError> {
    let mut found = None;
    planned
        .plan
        .apply(|n| {
            if let LogicalPlan::Aggregate(agg) = n {
                if over_input(&agg.input) && planned.mode == PlanMode::Kernel {
                    match group_spec(agg, scope, planned.prepared.window) {
                        Ok(_) if planned.aggregate == AggregateChoice::User => {
                            user_ops.push("Aggregate in user space: placed there by the planner (--aggregate user, or the cost rule: see Planning choices); the kernel streams the rows it reads".into())
                        }
                        Ok(spec) => found = Some((n.clone(), spec)),
                        Err(why) => user_ops.push(format!("Aggregate in user space: {why}")),
                    }
                    return Ok(TreeNodeRecursion::Stop);
                }
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .map_err(|e| internal(e.to_string()))?;
    Ok(found)
}

/// How the kernel reads a table column.
pub(crate) fn column_value(name: &str, event: &EventSchema) -> Result<ValueSrc, String> {
    use ebql_catalog::FieldKind;
    Ok(match event.resolve(name) {
        Some(EventColumn::Attr(SystemAttr::Comm)) => ValueSrc::Str(StrSrc::Comm),
        Some(EventColumn::Attr(a)) => {
            let ty = IntType::of(&crate::attrs::attr_type(a)).expect("integer attribute");
            ValueSrc::Int(KExpr::Attr(a, ty))
        }
        Some(EventColumn::Field(f)) if matches!(f.access, ebql_catalog::Access::StackId { .. }) => {
            ValueSrc::Int(KExpr::Field {
                name: f.name.clone(),
                access: f.access.clone(),
                offset: 0,
                size: 8,
                ty: IntType::U64,
            })
        }
        Some(EventColumn::Field(f)) => match (&f.kind, crate::kexpr::field_expr(&f)) {
            (_, Some(e)) => ValueSrc::Int(e),
            (FieldKind::CharArray { len }, _) => ValueSrc::Str(StrSrc::char_array(&f, *len)),
            (FieldKind::DataLocString, _) => ValueSrc::Str(StrSrc::DataLoc {
                name: f.name.clone(),
                offset: f.offset,
                size: crate::kexpr::STR_DEFAULT_BYTES,
            }),
            (other, _) => return Err(format!("{other:?} fields are not supported")),
        },
        None => return Err(format!("unknown column {name}")),
    })
}

/// For a searched `CASE WHEN p1 THEN v1 [WHEN p2 THEN v2 …] [ELSE NULL] END`
/// whose results are never NULL: the predicate under which it is not NULL
/// (`p1 OR p2 …`), so COUNT of it is a conditional count in the kernel.
fn non_null_when(e: &Expr, scope: &Scope) -> Result<KPred, String> {
    let Expr::Case(case) = e.clone().unalias() else {
        return Err(format!("`{e}` is not a CASE"));
    };
    let else_is_null = match case.else_expr.as_deref() {
        None => true,
        Some(Expr::Literal(v, _)) => v.is_null(),
        Some(_) => false,
    };
    if case.expr.is_some() || !else_is_null {
        return Err(format!(
            "`{e}`: only CASE WHEN … THEN … END without ELSE is counted in the kernel"
        ));
    }
    let mut preds = Vec::new();
    for (when, then) in &case.when_then_expr {
        never_null(then, scope)?;
        preds.push(translate_pred(when, scope)?);
    }
    Ok(KPred::Or(preds))
}

/// Longest char-array group key: the key copy zeroes the bytes after the NUL
/// one by one, which costs instructions per byte.
const MAX_STR_KEY: u32 = 64;

/// The kernel keys of `agg`'s GROUP BY, in plan order (at most 256 bytes
/// together); `Err` says why one has no kernel implementation.
pub(crate) fn group_keys(
    agg: &datafusion::logical_expr::Aggregate,
    scope: &Scope,
) -> Result<Vec<GroupKey>, String> {
    let mut keys = Vec::new();
    let mut key_bytes = 0u32;
    for (i, g) in agg.group_expr.iter().enumerate() {
        if matches!(g, Expr::GroupingSet(_)) {
            return Err("grouping sets (ROLLUP/CUBE) have no kernel implementation".into());
        }
        let e = inline_projections(g, &agg.input)?;
        let value = value_src(&e, scope)?;
        if let ValueSrc::Str(StrSrc::CtxChars { len, .. } | StrSrc::Btf { len, .. }) = &value {
            if *len > MAX_STR_KEY {
                return Err(format!(
                    "`{g}`: string keys longer than {MAX_STR_KEY} bytes are grouped in user space"
                ));
            }
        }
        let per_cpu = matches!(value, ValueSrc::Int(KExpr::Attr(SystemAttr::Cpu, _)));
        key_bytes += match &value {
            // A kernel key is NUL-padded text; bytes may hold NULs anywhere.
            ValueSrc::Str(StrSrc::Bytes { .. }) => {
                return Err(format!("`{g}`: bytes() keys are grouped in user space"))
            }
            ValueSrc::Str(s) => s.len().div_ceil(8) * 8,
            ValueSrc::Int(_) => 8,
            ValueSrc::Truncated(_) => {
                return Err(format!("`{g}`: truncated() keys are grouped in user space"))
            }
        };
        let data_type = agg.schema.field(i).data_type().clone();
        keys.push(GroupKey {
            value,
            per_cpu,
            data_type,
            text: g.to_string(),
        });
    }
    if key_bytes > 256 {
        return Err("the group key is larger than 256 bytes".into());
    }
    Ok(keys)
}

/// The kernel aggregate for `agg`, or why it runs in user space. `window`:
/// the query's window (states that cannot merge across the panes of a
/// hopping window keep such aggregates in user space).
pub(crate) fn group_spec(
    agg: &datafusion::logical_expr::Aggregate,
    scope: &Scope,
    window: Option<WindowSpec>,
) -> Result<GroupSpec, String> {
    let keys = group_keys(agg, scope)?;
    let mut slots: Vec<Slot> = Vec::new();
    let mut slot = |s: Slot| -> usize {
        match slots.iter().position(|x| *x == s) {
            Some(i) => i,
            None => {
                slots.push(s);
                slots.len() - 1
            }
        }
    };
    let mut aggs = Vec::new();
    for (j, a) in agg.aggr_expr.iter().enumerate() {
        let inner = match a {
            Expr::Alias(al) => al.expr.as_ref(),
            other => other,
        };
        let Expr::AggregateFunction(f) = inner else {
            return Err(format!("`{a}` is not an aggregate function call"));
        };
        let p = &f.params;
        if p.filter.is_some() || !p.order_by.is_empty() {
            return Err(format!(
                "`{a}`: FILTER and ORDER BY inside aggregates run in user space"
            ));
        }
        let field = agg.schema.field(agg.group_expr.len() + j);
        let mut call = AggCall {
            name: f.func.name().to_ascii_lowercase(),
            args: &p.args,
            input: &agg.input,
            scope,
            result_type: field.data_type(),
            distinct: p.distinct,
        };
        let out =
            crate::agg::resolve(&mut call, &mut slot).map_err(|why| format!("`{a}`: {why}"))?;
        aggs.push((out, field.data_type().clone(), a.to_string()));
    }
    // The distinct set's key holds one value: one COUNT(DISTINCT) argument per query.
    if slots
        .iter()
        .filter(|s| matches!(s.state, crate::agg::State::Distinct(_)))
        .count()
        > 1
    {
        return Err("COUNT(DISTINCT …) of more than one argument: the kernel keeps one distinct set per query".into());
    }
    if slots.len() > 32 {
        return Err("more than 32 aggregates".into());
    }
    if window.is_some_and(|w| w.panes() > 1) {
        if let Some(s) = slots.iter().find(|s| !s.state.merges_across_panes()) {
            return Err(format!(
                "{} cannot be merged across the panes of a hopping window",
                s.state.synopsis().describe()
            ));
        }
    }
    let spec = GroupSpec { keys, slots, aggs };
    // The key (≤ 256 bytes + the window tag) is built on the BPF stack; the
    // value is created from an all-zero map value, so only the per-CPU limit binds it.
    if spec.value_size() > MAX_VALUE_BYTES {
        return Err(format!(
            "the aggregates' state ({} bytes per group per CPU) exceeds the kernel's {MAX_VALUE_BYTES}-byte limit for per-CPU map values",
            spec.value_size()
        ));
    }
    Ok(spec)
}

/// An aggregate call of the plan, as [`crate::agg::resolve`] sees it.
struct AggCall<'a> {
    name: String,
    args: &'a [Expr],
    input: &'a LogicalPlan,
    scope: &'a Scope<'a>,
    result_type: &'a DataType,
    distinct: bool,
}

impl AggCall<'_> {
    fn arg(&self, k: usize) -> Result<Expr, String> {
        inline_projections(self.args.get(k).ok_or("missing argument")?, self.input)
    }
}

impl crate::agg::Call for AggCall<'_> {
    fn name(&self) -> &str {
        &self.name
    }

    fn arg_count(&self) -> usize {
        self.args.len()
    }

    fn int_arg(&mut self, k: usize) -> Result<KExpr, String> {
        // (A cast shared by several aggregates arrives as an aliased common subexpression.)
        let mut e = self.arg(k)?.unalias();
        // AVG casts integers to Float64 before summing; the kernel sums integers
        // exactly and user space divides.
        if let Expr::Cast(c) = &e {
            // So do the variance functions: the kernel keeps exact integer moments
            // (each aggregate says whether it reads through the cast).
            let through_cast = crate::agg::registry::lookup(&self.name, self.distinct)
                .is_some_and(|a| a.reads_through_float_cast(&self.name));
            if through_cast && c.field.data_type() == &DataType::Float64 {
                e = c.expr.as_ref().clone();
            }
        }
        translate_value(&e, self.scope)
    }

    fn nullable_arg(&mut self, k: usize) -> Result<Option<KPred>, String> {
        let x = self.arg(k)?;
        match never_null(&x, self.scope) {
            Ok(()) => Ok(None),
            Err(why) => non_null_when(&x, self.scope).map(Some).map_err(|_| why),
        }
    }

    fn result_type(&self) -> &DataType {
        self.result_type
    }

    fn distinct(&self) -> bool {
        self.distinct
    }

    fn literal(&mut self, k: usize) -> Result<ScalarValue, String> {
        match self.arg(k)?.unalias() {
            Expr::Literal(v, _) => Ok(v),
            Expr::Cast(c) => match c.expr.as_ref() {
                Expr::Literal(v, _) => v.cast_to(c.field.data_type()).map_err(|e| e.to_string()),
                other => Err(format!("`{other}` is not a constant")),
            },
            other => Err(format!("`{other}` is not a constant")),
        }
    }
}

pub(crate) fn replace_node(
    plan: &LogicalPlan,
    target: &LogicalPlan,
    with: LogicalPlan,
) -> Result<LogicalPlan, CompileError> {
    let mut done = false;
    let out = plan
        .clone()
        .transform_down(|n| {
            if !done && n == *target {
                done = true;
                return Ok(Transformed::new(
                    with.clone(),
                    true,
                    TreeNodeRecursion::Jump,
                ));
            }
            Ok(Transformed::no(n))
        })
        .map_err(|e| internal(e.to_string()))?
        .data;
    if !done {
        return Err(internal("kernel part not found in the plan"));
    }
    Ok(out)
}

/// Output columns named as the user wrote them: `max(count)`, not `max(sys_enter_pread64.count)`.
fn rename_outputs(plan: LogicalPlan, tables: &[String]) -> Result<LogicalPlan, CompileError> {
    let schema = plan.schema().clone();
    let mut changed = false;
    let exprs: Vec<Expr> = schema
        .iter()
        .map(|(q, f)| {
            let mut name = f.name().clone();
            for t in tables {
                name = name.replace(&format!("{t}."), "");
            }
            changed |= name != *f.name();
            Expr::Column(datafusion::common::Column::new(q.cloned(), f.name())).alias(name)
        })
        .collect();
    if !changed {
        return Ok(plan);
    }
    Projection::try_new(exprs, Arc::new(plan))
        .map(LogicalPlan::Projection)
        .map_err(|e| internal(e.to_string()))
}
