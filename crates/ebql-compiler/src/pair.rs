//! Enter/exit pairing (issue 7, item 4; issue 10: strings, LEFT JOIN): an
//! equi-join of two events, run in the kernel as two programs sharing a
//! keyed start map.
//!
//! ```text
//! FROM tracepoint:syscalls:sys_enter_pread64 AS e
//! JOIN tracepoint:syscalls:sys_exit_pread64 AS x ON e.tid = x.tid
//! ```
//!
//! The left event is the *start*, the right one the *end*. The start program
//! tests the filters on the start event's own columns, then stores the start
//! columns the rest of the query reads (and nothing else; strings too, read
//! at the start: [`PairPlan::stored_strs`]) in a hash map keyed
//! by the start side's ON expressions, or, when the key is exactly the thread
//! ([`PairPlan::keyed_by_thread_only`]) and the kernel has it, in the thread's
//! task-local storage (see `codegen`'s `StartStore`). The end program computes its side's key,
//! looks the start up, copies the stored columns to its stack, deletes the
//! entry, then runs the remaining filters (the end event's own and the join's
//! `x.time - e.time > …` conditions) and the usual output exactly as a
//! single-event query would; the pair belongs to the end event's window.
//!
//! **Pairing rule**: an end pairs with the latest unmatched start of the same
//! key. A start that overwrites an unmatched start counts that older start as
//! unmatched; an end that finds no start is counted; a start the full map
//! cannot take is counted; starts still in the map when the query stops are
//! counted by user space. None of these is a row, none is silently dropped.
//!
//! **LEFT JOIN** (`FROM s LEFT JOIN x ON …`): every start is a row. A pair's
//! row is as above; an unmatched start's row has the start's columns and
//! NULL end columns (a `matched` word in the row, [`crate::contract::Outer`]).
//! The start program writes it when a newer start of the same key replaces
//! the unmatched one (taking it as an end would: copy, then delete, so a
//! start is one row exactly once), and user space writes one for each start
//! left in the start map at stop. That needs a map user space can list: a
//! LEFT pairing always uses the hash, never task storage (whose slots cannot
//! be listed, and die silently with their thread). No condition on the end
//! event is allowed (an end failing it would still take its start), and the
//! rows are streamed (any aggregate runs in user space).
//!
//! **Thread filters**: when the key pairs `tid` with `tid`, a start and its end
//! run on the same thread, so filters reading only `pid`/`tid` hold for both or
//! for neither. Such filters of either side run first in *both* programs: other
//! threads cost one test in each, the start map only holds starts of selected
//! threads, and "ends without a start" counts only the selected threads' ends.

use crate::diag::Diagnostic;
use crate::error::CompileError;
use crate::kexpr::{conjuncts, translate_pred, translate_value, KExpr, KPred, Scope, StartSide};
use crate::planner::Planned;
use crate::split::parts::{
    column_value, finish, internal, kernel_aggregate, replace_node, scan_filters,
};
pub use crate::split::plan::PairPlan;
use crate::split::plan::{KernelOutput, KernelPlan, Split, ValueSrc};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::DFSchema;
use datafusion::logical_expr::{Expr, Join, JoinType, LogicalPlan, TableScan};
use ebql_catalog::{EventKind, EventSchema, SystemAttr};

/// What the kernel pairing supports, for errors.
const PAIR_HINT: &str = "the kernel pairs two events with `FROM start AS s [LEFT] JOIN end AS e ON s.k = e.k [AND s.k2 = e.k2 …]` \
(integer equality keys, one column side each; LEFT JOIN: unmatched starts are rows too); other conditions go in WHERE";

/// The part of the query from ON to the next clause, or the second event.
fn on_span(planned: &Planned) -> Option<std::ops::Range<usize>> {
    let q = &planned.query;
    let Some(on) = crate::planner::find_word(q, "on") else {
        return planned.prepared.events.get(1).map(|e| e.span.clone());
    };
    let end = ["where", "group", "window", "order", "limit", "having"]
        .iter()
        .filter_map(|w| crate::planner::find_word(&q[on.end..], w).map(|r| r.start + on.end))
        .min()
        .unwrap_or(q.len());
    let end = on.start
        + q[on.start..end]
            .trim_end()
            .trim_end_matches(';')
            .trim_end()
            .len();
    Some(on.start..end.max(on.end))
}

fn unsupported(planned: &Planned, what: impl Into<String>) -> CompileError {
    CompileError::Query(Diagnostic::new(what, on_span(planned)).with_hint(PAIR_HINT))
}

/// The alias (or table name) and scan under one join input.
fn side(p: &LogicalPlan) -> Option<(String, TableScan)> {
    match p {
        LogicalPlan::SubqueryAlias(a) => match a.input.as_ref() {
            LogicalPlan::TableScan(s) => Some((a.alias.table().to_string(), s.clone())),
            _ => None,
        },
        LogicalPlan::TableScan(s) => Some((s.table_name.table().to_string(), s.clone())),
        _ => None,
    }
}

/// Whether end-side filter `f` is a start filter moved across the keys:
/// with each end key column of `on` replaced by its start column, `f` is
/// one of `start_filters` (`e.pid = x.pid` and `e.pid = 7` give `x.pid = 7`;
/// `e.tid = x.tid` and `CAST(e.tid AS BOOLEAN)` give `CAST(x.tid AS BOOLEAN)`).
/// An end failing it has a key no stored start has. Columns compare by name
/// (the scans qualify them by their tables); an end column that is not a
/// key makes `f` the end's own.
fn implied_by_keys(f: &Expr, on: &[(Expr, Expr)], start_filters: &[Expr]) -> bool {
    use datafusion::common::tree_node::Transformed;
    use datafusion::common::Column;
    let unqualified = |e: &Expr| {
        e.clone()
            .transform(|x| match x {
                Expr::Column(c) => Ok(Transformed::yes(Expr::Column(Column::new_unqualified(
                    c.name,
                )))),
                other => Ok(Transformed::no(other)),
            })
            .map(|t| t.data)
            .ok()
    };
    let mut own = false;
    let Ok(mapped) = f.clone().transform(|x| match x {
        Expr::Column(c) => {
            let start = on.iter().find_map(|(s, x)| match (s, x) {
                (Expr::Column(sc), Expr::Column(xc)) if xc.name == c.name => Some(sc.name.clone()),
                _ => None,
            });
            own |= start.is_none();
            let name = start.unwrap_or(c.name);
            Ok(Transformed::yes(Expr::Column(Column::new_unqualified(
                name,
            ))))
        }
        other => Ok(Transformed::no(other)),
    }) else {
        return false;
    };
    !own && start_filters
        .iter()
        .any(|sf| unqualified(sf).as_ref() == Some(&mapped.data))
}

/// Projections and aliases down to the join.
fn over_join(p: &LogicalPlan) -> bool {
    match p {
        LogicalPlan::Join(_) => true,
        LogicalPlan::Projection(pr) => over_join(&pr.input),
        LogicalPlan::SubqueryAlias(a) => over_join(&a.input),
        _ => false,
    }
}

/// True if the predicate reads only `pid`/`tid` (no record field, no stored column, no string).
fn thread_only(p: &KPred) -> bool {
    let mut attrs = Vec::new();
    p.attrs(&mut attrs);
    !attrs.is_empty()
        && reads_only(p, &|e| {
            matches!(e, KExpr::Attr(SystemAttr::Pid | SystemAttr::Tid, _))
        })
}

/// True when every value `p` reads is a constant or passes `leaf`.
fn reads_only(p: &KPred, leaf: &dyn Fn(&KExpr) -> bool) -> bool {
    fn expr_ok(e: &KExpr, leaf: &dyn Fn(&KExpr) -> bool) -> bool {
        match e {
            KExpr::Const(..) => true,
            KExpr::Neg(x, _) | KExpr::BitNot(x, _) | KExpr::Cast(x, _) => expr_ok(x, leaf),
            KExpr::Arith(_, l, r, _) => expr_ok(l, leaf) && expr_ok(r, leaf),
            other => leaf(other),
        }
    }
    match p {
        KPred::Const(_) => true,
        KPred::Cmp { l, r, .. } => expr_ok(l, leaf) && expr_ok(r, leaf),
        KPred::And(v) | KPred::Or(v) => v.iter().all(|q| reads_only(q, leaf)),
        KPred::Not(q) => reads_only(q, leaf),
        KPred::In { e, .. } => expr_ok(e, leaf),
        KPred::StrEq { .. } => false,
    }
}

/// True when `p` tests only the system call number of a
/// `raw_syscalls:sys_exit` paired by thread with `raw_syscalls:sys_enter`
/// (`id` on the tracefs tracepoint, `regs.orig_ax` on tp_btf or raw_tp):
/// on one thread an exit follows the entry of the same call, so an exit
/// failing the test has no start of its own to take (a start its call left
/// behind is replaced by the thread's next one, and counted). Such a test
/// runs before the lookup: an unrelated system call's exit costs no lookup
/// and is no "end without a start".
fn syscall_number_only(p: &KPred, start: &EventSchema, end: &EventSchema) -> bool {
    let raw =
        |e: &EventSchema, name: &str| e.event.category == "raw_syscalls" && e.event.name == name;
    let number = match end.event.kind {
        EventKind::Tracepoint => "id".to_string(),
        _ => format!("regs.{}", ebql_catalog::syscalls::NR_REG),
    };
    raw(start, "sys_enter")
        && raw(end, "sys_exit")
        && start.event.kind == end.event.kind
        && reads_only(
            p,
            &|e| matches!(e, KExpr::Field { name, .. } if *name == number),
        )
        && !matches!(p, KPred::Const(_))
}

/// Splits a query over two events: an inner equi-join becomes a paired
/// kernel plan; any other shape is a positioned error saying what the kernel
/// pairing supports.
/// Whether `planned` pairs two events (enter/exit, README "Pairing two
/// events"): its FROM, as written, joins two events directly, neither side
/// a subquery, and it has no UNION. Any other query over several events is
/// a windowed relational query ([`crate::multi`]): a subquery on a side is
/// how a user asks for a join of relations, whose rows all meet in their
/// window, instead of a pairing's latest unmatched start.
pub(crate) fn is_pairing(planned: &Planned) -> bool {
    let state = planned.ctx.state();
    let Ok(written) = futures::executor::block_on(state.create_logical_plan(&planned.prepared.sql))
    else {
        return true; // planned once already: the pairing's own checks report it
    };
    let mut union = false;
    let mut join = None;
    let _ = written.apply(|n| {
        match n {
            LogicalPlan::Union(_) => union = true,
            LogicalPlan::Join(j) if join.is_none() => join = Some(j.clone()),
            _ => {}
        }
        Ok(TreeNodeRecursion::Continue)
    });
    fn direct(p: &LogicalPlan) -> bool {
        match p {
            LogicalPlan::TableScan(_) => true,
            LogicalPlan::SubqueryAlias(a) => direct(&a.input),
            _ => false,
        }
    }
    !union && join.is_some_and(|j| direct(&j.left) && direct(&j.right))
}

pub(crate) fn split_pair(planned: &Planned, scans: &[TableScan]) -> Result<Split, CompileError> {
    let mut join: Option<Join> = None;
    planned
        .plan
        .apply(|n| {
            if let LogicalPlan::Join(j) = n {
                join = Some(j.clone());
                return Ok(TreeNodeRecursion::Stop);
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .map_err(|e| internal(e.to_string()))?;
    let Some(j) = join else {
        return Err(unsupported(
            planned,
            "queries over two events must join them",
        ));
    };
    let outer = j.join_type == JoinType::Left;
    if j.join_type != JoinType::Inner && !outer {
        return Err(unsupported(planned, format!("queries over several events run in the kernel as inner joins or LEFT JOINs only; this is a {} join (from JOIN, IN/EXISTS, EXCEPT or INTERSECT)", j.join_type)));
    }
    if outer && j.filter.is_some() {
        return Err(unsupported(planned, "a LEFT JOIN pairing takes only equalities in ON; conditions on the start event go in WHERE"));
    }
    if j.on.is_empty() {
        return Err(unsupported(planned, "the join has no equality between a column of each event; the kernel pairs events by equal keys"));
    }
    let (Some((start_alias, start_scan)), Some((end_alias, end_scan))) =
        (side(&j.left), side(&j.right))
    else {
        return Err(unsupported(
            planned,
            "each side of a paired join must be one event (with filters the kernel compiles)",
        ));
    };
    if scans.len() != 2 || start_scan.table_name == end_scan.table_name {
        return Err(unsupported(
            planned,
            "joins of an event with itself are not paired in the kernel",
        ));
    }
    let (start, start_table_schema) = crate::split::parts::scan_event(planned, &start_scan)?;
    let (end, end_table_schema) = crate::split::parts::scan_event(planned, &end_scan)?;
    let mut start_filters = scan_filters(
        &start_scan,
        &Scope {
            event: &start,
            schema: &start_table_schema,
            start: None,
        },
    )?;
    let mut end_scan = end_scan;
    if outer {
        // Conditions the optimizer derived onto the end from a key and a
        // start filter (`e.pid = x.pid` and `e.pid = 7` give `x.pid = 7`):
        // an end failing one has a key no start has, so it takes no start
        // whether it is tested or not; the user never wrote it (issue 19).
        let start_filters = start_scan.filters.clone();
        end_scan
            .filters
            .retain(|f| !implied_by_keys(f, &j.on, &start_filters));
    }
    let end_own = scan_filters(
        &end_scan,
        &Scope {
            event: &end,
            schema: &end_table_schema,
            start: None,
        },
    )?;
    if outer && !end_own.is_empty() {
        // An end that fails them would still take its start (module doc), which then never is a row.
        return Err(unsupported(planned, format!("a LEFT JOIN pairing takes no condition on the end event (`{}`): every end takes its start", end_own[0].1)));
    }

    // Keys: one integer expression of each side per ON equality.
    let (mut start_key, mut end_key, mut key_text) = (Vec::new(), Vec::new(), Vec::new());
    for (l, r) in &j.on {
        let ls = Scope {
            event: &start,
            schema: j.left.schema(),
            start: None,
        };
        let rs = Scope {
            event: &end,
            schema: j.right.schema(),
            start: None,
        };
        let (lk, rk) = match (translate_value(l, &ls), translate_value(r, &rs)) {
            (Ok(lk), Ok(rk)) => (lk, rk),
            (Err(why), _) | (_, Err(why)) => {
                return Err(unsupported(
                    planned,
                    format!("join key `{l} = {r}` cannot be computed in the kernel: {why}"),
                ))
            }
        };
        start_key.push(lk);
        end_key.push(rk);
        key_text.push(format!("{l} = {r}"));
    }
    let by_thread = start_key.iter().zip(&end_key).any(|(l, r)| {
        matches!(
            (l, r),
            (
                KExpr::Attr(SystemAttr::Tid, _),
                KExpr::Attr(SystemAttr::Tid, _)
            )
        )
    });

    // Everything after the lookup reads start columns as stored values.
    let start_side = StartSide {
        event: &start,
        qualifiers: vec![
            start_alias.clone(),
            start_scan.table_name.table().to_string(),
        ],
        stored: Default::default(),
        stored_strs: Default::default(),
    };
    let scope = Scope {
        event: &end,
        schema: &j.schema,
        start: Some(&start_side),
    };
    let mut filters = end_own.clone();
    if let Some(f) = &j.filter {
        let p = translate_pred(f, &scope).map_err(|why| {
            unsupported(
                planned,
                format!("the join condition `{f}` cannot run in the kernel: {why}"),
            )
        })?;
        let mut parts = Vec::new();
        conjuncts(p, &mut parts);
        filters.extend(
            parts
                .into_iter()
                .filter(|p| *p != KPred::Const(true))
                .map(|p| (p, f.to_string())),
        );
    }

    let mut user_ops = Vec::new();
    let kernel_agg = if outer {
        // Unmatched starts are rows the start program (or user space, at stop) writes: the rows are streamed.
        if planned
            .plan
            .exists(|n| Ok(matches!(n, LogicalPlan::Aggregate(_))))
            .unwrap_or(false)
        {
            user_ops.push("Aggregate in user space: a LEFT JOIN pairing streams its rows, unmatched starts included".into());
        }
        None
    } else {
        kernel_aggregate(planned, &scope, over_join, &mut user_ops)?
    };
    let (output, replaced, strs) = match kernel_agg {
        Some((node, spec)) => (KernelOutput::Groups(spec), node, Vec::new()),
        None => {
            let mut columns = Vec::new();
            for (q, f) in j.schema.iter() {
                let col = datafusion::common::Column::new(q.cloned(), f.name());
                let value = match scope.start_of(&col) {
                    // A start string (comm, a char array, a __data_loc field) is stored with the start.
                    Some(_) => match crate::kexpr::str_src(&Expr::Column(col.clone()), &scope) {
                        Ok(Some(src)) => Ok(ValueSrc::Str(src)),
                        Ok(None) => {
                            translate_value(&Expr::Column(col.clone()), &scope).map(ValueSrc::Int)
                        }
                        Err(why) => Err(why),
                    },
                    None => column_value(f.name(), &end),
                }
                .map_err(|why| {
                    unsupported(
                        planned,
                        format!("column `{col}` cannot be paired in the kernel: {why}"),
                    )
                })?;
                columns.push((col.flat_name(), value, f.data_type().clone()));
            }
            // Strings read through pointers (of either event) are streamed as columns of their own.
            let strs = crate::split::parts::str_columns(&planned.plan, &scope, &planned.query)?;
            for s in &strs {
                columns.push((s.name.clone(), s.value.clone(), s.data_type.clone()));
            }
            (
                KernelOutput::Stream {
                    columns,
                    latest: None,
                },
                LogicalPlan::Join(j.clone()),
                strs,
            )
        }
    };
    // The kernel's rows: the replaced node's columns, then the string columns (qualified by the end event).
    let str_fields: Vec<datafusion::arrow::datatypes::Field> = strs
        .iter()
        .map(|s| datafusion::arrow::datatypes::Field::new(&s.name, s.data_type.clone(), true))
        .collect();
    let str_schema = DFSchema::try_from_qualified_schema(
        datafusion::common::TableReference::bare(end_alias.as_str()),
        &datafusion::arrow::datatypes::Schema::new(str_fields),
    )
    .map_err(|e| internal(e.to_string()))?;
    let rows_schema = replaced
        .schema()
        .join(&str_schema)
        .map_err(|e| internal(e.to_string()))?;
    let (kernel_schema, input, with) =
        crate::split::parts::placeholder(&std::sync::Arc::new(rows_schema))?;
    let remainder = replace_node(&planned.plan, &replaced, with)?;
    let remainder = crate::split::parts::replace_str_calls(remainder, &strs, &end_alias)?;
    let stored = start_side.stored.into_inner();
    let stored_strs = start_side.stored_strs.into_inner();

    // Thread filters run first in both programs (module doc).
    let mut end_pre = Vec::new();
    if by_thread {
        end_pre = start_filters
            .iter()
            .filter(|(p, _)| thread_only(p))
            .cloned()
            .collect();
        let moved: Vec<_> = end_own
            .iter()
            .filter(|(p, _)| thread_only(p))
            .cloned()
            .collect();
        end_pre.extend(moved.iter().cloned());
        start_filters.extend(moved);
        end_pre.extend(
            end_own
                .iter()
                .filter(|(p, _)| syscall_number_only(p, &start, &end))
                .cloned(),
        );
        filters.retain(|f| !end_pre.contains(f));
    }
    let pair = PairPlan {
        start,
        start_filters,
        start_key,
        end_key,
        key_text,
        stored,
        stored_strs,
        end_pre,
        by_thread,
        outer,
    };
    if pair.task_value_size() > crate::kexpr::MAX_RECORD_BYTES {
        return Err(unsupported(
            planned,
            format!("the start's stored columns and strings take {} bytes; a start value holds at most {}: read shorter strings (str(p, n))", pair.task_value_size(), crate::kexpr::MAX_RECORD_BYTES),
        ));
    }
    let kernel = KernelPlan {
        event: end,
        filters,
        output,
        window: planned.prepared.window,
        pair: Some(pair),
        hooks: Vec::new(),
        branch: None,
        branches: Vec::new(),
    };
    finish(planned, kernel, kernel_schema, input, remainder, user_ops)
}
