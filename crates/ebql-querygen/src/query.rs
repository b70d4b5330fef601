//! Whole queries: raw projections or aggregates, the mandatory pid filter,
//! HAVING / ORDER BY / LIMIT and windows, and their SQL text.
//!
//! Results are deterministic given the events: LIMIT only comes with an
//! ORDER BY over every group key (aggregates) or every column (raw streams),
//! so which rows survive never depends on row order.

use crate::events::{Column, Event};
use crate::expr::{expr_gen, int_literal, CmpOp, Expr, Pred};
use proptest::prelude::*;
use proptest::sample::select;
use std::fmt::Write as _;

/// Placeholder for the workload's pid in [`Query::template`].
pub const PID: &str = "$PID";

/// The WINDOW clause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// No WINDOW: aggregates emit once at stop; raw streams stream.
    None,
    /// `WINDOW(time, ms, ms)`: tumbling windows of this many milliseconds.
    Time(u32),
    /// `WINDOW(count, n, n)`: tumbling windows of n matching events.
    Count(u32),
    /// `WINDOW(time, size, step)`: hopping windows, size a multiple of step (ms).
    Hop(u32, u32),
}

/// Aggregate functions; all but MEDIAN, BIT_OR and BOOL_AND may run in the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggFunc {
    CountStar,
    Count,
    Sum,
    Min,
    Max,
    Avg,
    CountDistinct,
    Stddev,
    VarPop,
    ApproxDistinct,
    /// `approx_percentile_cont(a, 0.99)`.
    P99,
    Hist,
    /// `LHIST(a, 0, 1000, 100)`.
    Lhist,
    /// `approx_top_k(a, 3)`.
    TopK,
    Median,
    BitOr,
    BoolAnd,
}

/// One aggregate call. `BoolAnd` aggregates `arg <> 0`.
#[derive(Debug, Clone, PartialEq)]
pub struct Aggregate {
    /// The function.
    pub func: AggFunc,
    /// Its argument (ignored by `CountStar`).
    pub arg: Expr,
}

impl std::fmt::Display for Aggregate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let a = &self.arg;
        match self.func {
            AggFunc::CountStar => write!(f, "COUNT(*)"),
            AggFunc::Count => write!(f, "COUNT({a})"),
            AggFunc::Sum => write!(f, "SUM({a})"),
            AggFunc::Min => write!(f, "MIN({a})"),
            AggFunc::Max => write!(f, "MAX({a})"),
            AggFunc::Avg => write!(f, "AVG({a})"),
            AggFunc::CountDistinct => write!(f, "COUNT(DISTINCT {a})"),
            AggFunc::Stddev => write!(f, "STDDEV({a})"),
            AggFunc::VarPop => write!(f, "VAR_POP({a})"),
            AggFunc::ApproxDistinct => write!(f, "approx_distinct({a})"),
            AggFunc::P99 => write!(f, "approx_percentile_cont({a}, 0.99)"),
            AggFunc::Hist => write!(f, "HIST({a})"),
            AggFunc::Lhist => write!(f, "LHIST({a}, 0, 1000, 100)"),
            AggFunc::TopK => write!(f, "approx_top_k({a}, 3)"),
            AggFunc::Median => write!(f, "MEDIAN({a})"),
            AggFunc::BitOr => write!(f, "BIT_OR({a})"),
            AggFunc::BoolAnd => write!(f, "BOOL_AND({a} <> 0)"),
        }
    }
}

/// A GROUP BY key: a column (integer or string) or an integer expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Key {
    /// A column by name (e.g. `cpu`, `comm`, `prev_comm`).
    Col(&'static str),
    /// An integer expression.
    Expr(Expr),
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Key::Col(c) => write!(f, "{c}"),
            Key::Expr(e) => write!(f, "{e}"),
        }
    }
}

/// A raw-stream output column.
#[derive(Debug, Clone, PartialEq)]
pub enum Proj {
    /// A string column.
    Str(&'static str),
    /// An integer expression.
    Int(Expr),
    /// A boolean expression.
    Bool(Pred),
}

impl std::fmt::Display for Proj {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Proj::Str(c) => write!(f, "{c}"),
            Proj::Int(e) => write!(f, "{e}"),
            Proj::Bool(p) => write!(f, "{p}"),
        }
    }
}

/// `HAVING agg op lit`.
#[derive(Debug, Clone, PartialEq)]
pub struct Having {
    /// The aggregate compared.
    pub agg: Aggregate,
    /// The comparison.
    pub op: CmpOp,
    /// The literal compared with.
    pub lit: i64,
}

/// What the query selects.
#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    /// No aggregate: one row per matching event.
    Raw(Vec<Proj>),
    /// GROUP BY `keys` (none: a global aggregate) with these aggregates.
    Agg {
        keys: Vec<Key>,
        aggs: Vec<Aggregate>,
        having: Option<Having>,
    },
    /// `SELECT DISTINCT ON (keys) keys, columns`: each key's latest event.
    Latest { keys: Vec<Key>, cols: Vec<Proj> },
    /// A `UNION ALL` of the query's event (its filter) and `other` (its
    /// own filter), as many columns each; `agg`: grouped by the first
    /// column, counted, and the last summed and maxed.
    Union {
        other: Event,
        left: Vec<Expr>,
        right: Vec<Expr>,
        right_filter: Option<Pred>,
        agg: bool,
    },
    /// A join of two aggregated relations on their keys: the query's event
    /// (its filter) counted per `left_key`, `other` (its own filter)
    /// summed (`right_arg`) per `right_key`.
    Join {
        other: Event,
        left_key: Expr,
        right_key: Expr,
        right_arg: Expr,
        right_filter: Option<Pred>,
    },
}

/// ORDER BY: one direction per ordered column; `agg_first` puts the first
/// aggregate before the keys. No directions: no ORDER BY, only the LIMIT
/// (a LIMIT under the projection, issue 19's bug 1).
#[derive(Debug, Clone, PartialEq)]
pub struct Order {
    /// `DESC` flags, used cyclically over the ordered columns.
    pub desc: Vec<bool>,
    /// ORDER BY the first aggregate, then the keys.
    pub agg_first: bool,
    /// `LIMIT n`.
    pub limit: Option<u32>,
}

/// A generated query. Render it with [`Query::template`] (`$PID` left in)
/// or [`Query::sql`].
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    /// The event selected from.
    pub event: Event,
    /// Raw stream or aggregate.
    pub shape: Shape,
    /// Filter besides the pid test.
    pub filter: Option<Pred>,
    /// Put the pid test after the filter instead of before it.
    pub pid_last: bool,
    /// Write GROUP BY before WHERE (the thesis' order).
    pub thesis_order: bool,
    /// ORDER BY / LIMIT.
    pub order: Option<Order>,
    /// The WINDOW clause.
    pub window: Window,
}

impl Query {
    /// The query text with [`PID`] in place of the workload's pid.
    pub fn template(&self) -> String {
        if let Shape::Union { .. } | Shape::Join { .. } = &self.shape {
            return self.union_template();
        }
        let mut s = String::from("SELECT ");
        let (items, ordered): (Vec<String>, Vec<String>) = match &self.shape {
            Shape::Raw(cols) => {
                let items = cols
                    .iter()
                    .enumerate()
                    .map(|(i, c)| format!("{c} AS c{i}"))
                    .collect();
                (items, (0..cols.len()).map(|i| format!("c{i}")).collect())
            }
            Shape::Agg { keys, aggs, .. } => {
                let mut items: Vec<String> = keys
                    .iter()
                    .enumerate()
                    .map(|(i, k)| format!("{k} AS k{i}"))
                    .collect();
                items.extend(aggs.iter().enumerate().map(|(i, a)| format!("{a} AS a{i}")));
                let mut ordered: Vec<String> = (0..keys.len()).map(|i| format!("k{i}")).collect();
                if ordered.is_empty() || self.order.as_ref().is_some_and(|o| o.agg_first) {
                    ordered.insert(0, "a0".into());
                }
                (items, ordered)
            }
            Shape::Latest { keys, cols } => {
                let on: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
                s.push_str(&format!("DISTINCT ON ({}) ", on.join(", ")));
                let mut items: Vec<String> = keys
                    .iter()
                    .enumerate()
                    .map(|(i, k)| format!("{k} AS k{i}"))
                    .collect();
                items.extend(cols.iter().enumerate().map(|(i, c)| format!("{c} AS c{i}")));
                // ORDER BY must begin with the DISTINCT ON expressions themselves.
                (items, on)
            }
            Shape::Union { .. } | Shape::Join { .. } => unreachable!("union_template"),
        };
        s.push_str(&items.join(", "));
        let _ = write!(s, " FROM {}", self.event.table());
        let group_by = match &self.shape {
            Shape::Agg { keys, .. } if !keys.is_empty() => Some(format!(
                " GROUP BY {}",
                keys.iter()
                    .map(|k| k.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            _ => None,
        };
        if self.thesis_order {
            if let Some(g) = &group_by {
                s.push_str(g);
            }
        }
        let pid = format!("{} = {PID}", self.event.pid());
        let filter = match &self.filter {
            None => pid,
            Some(p) if self.pid_last => format!("{p} AND {pid}"),
            Some(p) => format!("{pid} AND {p}"),
        };
        let _ = write!(s, " WHERE {filter}");
        if !self.thesis_order {
            if let Some(g) = &group_by {
                s.push_str(g);
            }
        }
        if let Shape::Agg {
            having: Some(h), ..
        } = &self.shape
        {
            let _ = write!(s, " HAVING {} {} {}", h.agg, h.op.sql(), h.lit);
        }
        if let Some(o) = self.order.as_ref().filter(|o| o.desc.is_empty()) {
            if let Some(n) = o.limit {
                let _ = write!(s, " LIMIT {n}");
            }
        } else if let Some(o) = &self.order {
            let cols: Vec<String> = ordered
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    if o.desc
                        .get(i % o.desc.len().max(1))
                        .copied()
                        .unwrap_or(false)
                    {
                        format!("{c} DESC")
                    } else {
                        c.clone()
                    }
                })
                .collect();
            let _ = write!(s, " ORDER BY {}", cols.join(", "));
            if let Some(n) = o.limit {
                let _ = write!(s, " LIMIT {n}");
            }
        }
        match self.window {
            Window::None => {}
            Window::Time(ms) => {
                let _ = write!(s, " WINDOW(time, {ms}, {ms})");
            }
            Window::Count(n) => {
                let _ = write!(s, " WINDOW(count, {n}, {n})");
            }
            Window::Hop(size, step) => {
                let _ = write!(s, " WINDOW(time, {size}, {step})");
            }
        }
        s
    }

    /// [`Query::template`] of a [`Shape::Union`] or a [`Shape::Join`].
    fn union_template(&self) -> String {
        let where_ = |event: Event, filter: Option<&Pred>| {
            let pid = format!("{} = {PID}", event.pid());
            match filter {
                Some(p) => format!("{pid} AND {p}"),
                None => pid,
            }
        };
        if let Shape::Join {
            other,
            left_key,
            right_key,
            right_arg,
            right_filter,
        } = &self.shape
        {
            let mut s = format!(
                "SELECT l.k AS k0, l.n AS a0, r.m AS a1 FROM (SELECT {left_key} AS k, COUNT(*) AS n FROM {} WHERE {} GROUP BY {left_key}) AS l JOIN (SELECT {right_key} AS k, SUM({right_arg}) AS m FROM {} WHERE {} GROUP BY {right_key}) AS r ON l.k = r.k",
                self.event.table(),
                where_(self.event, self.filter.as_ref()),
                other.table(),
                where_(*other, right_filter.as_ref()),
            );
            self.push_window(&mut s);
            return s;
        }
        let Shape::Union {
            other,
            left,
            right,
            right_filter,
            agg,
        } = &self.shape
        else {
            unreachable!("a union's template");
        };
        let branch = |event: Event, exprs: &[Expr], filter: Option<&Pred>| {
            let cols: Vec<String> = exprs
                .iter()
                .enumerate()
                .map(|(i, e)| format!("{e} AS c{i}"))
                .collect();
            let pid = format!("{} = {PID}", event.pid());
            let filter = match filter {
                Some(p) => format!("{pid} AND {p}"),
                None => pid,
            };
            format!(
                "SELECT {} FROM {} WHERE {filter}",
                cols.join(", "),
                event.table()
            )
        };
        let body = format!(
            "{} UNION ALL {}",
            branch(self.event, left, self.filter.as_ref()),
            branch(*other, right, right_filter.as_ref())
        );
        let last = left.len() - 1;
        let mut s = match (agg, last) {
            (false, _) => format!("SELECT * FROM ({body})"),
            (true, 0) => format!("SELECT c0 AS k0, COUNT(*) AS a0 FROM ({body}) GROUP BY c0"),
            (true, _) => format!(
                "SELECT c0 AS k0, COUNT(*) AS a0, SUM(c{last}) AS a1, MAX(c{last}) AS a2 FROM ({body}) GROUP BY c0"
            ),
        };
        self.push_window(&mut s);
        s
    }

    /// A query over several events' WINDOW clause.
    fn push_window(&self, s: &mut String) {
        match self.window {
            Window::None => {}
            Window::Count(n) => {
                let _ = write!(s, " WINDOW(count, {n}, {n})");
            }
            Window::Time(ms) => {
                let _ = write!(s, " WINDOW(time, {ms}, {ms})");
            }
            Window::Hop(size, step) => {
                let _ = write!(s, " WINDOW(time, {size}, {step})");
            }
        }
    }

    /// The query text for a workload with this pid.
    pub fn sql(&self, pid: u32) -> String {
        self.template().replace(PID, &pid.to_string())
    }
}

/// Tunables of [`query`].
#[derive(Debug, Clone, Copy)]
pub struct QueryConfig {
    /// Nesting depth of expressions and predicates.
    pub depth: u32,
    /// Time window sizes are drawn from 100..=this many ms (step = size).
    pub max_window_ms: u32,
    /// Only pairings of two events ([`pairing`]).
    pub pairings_only: bool,
}

impl Default for QueryConfig {
    fn default() -> Self {
        QueryConfig {
            depth: 3,
            max_window_ms: 500,
            pairings_only: false,
        }
    }
}

/// Aggregates; `numeric` leaves out BOOL_AND, the histograms and the top k (their
/// results are compared with integers in HAVING).
fn aggregate(e: BoxedStrategy<Expr>, numeric: bool) -> BoxedStrategy<Aggregate> {
    use AggFunc::*;
    let kernel = select(vec![CountStar, Count, Sum, Min, Max, Avg]);
    let distributions = select(if numeric {
        vec![CountDistinct, Stddev, VarPop, ApproxDistinct, P99]
    } else {
        vec![
            CountDistinct,
            Stddev,
            VarPop,
            ApproxDistinct,
            P99,
            Hist,
            Lhist,
            TopK,
        ]
    });
    let user = select(if numeric {
        vec![Median, BitOr]
    } else {
        vec![Median, BitOr, BoolAnd]
    });
    (prop_oneof![4 => kernel, 2 => distributions, 1 => user], e)
        .prop_map(|(func, arg)| Aggregate { func, arg })
        // BIT_OR, the histograms, the quantile and the top k take integers
        // only (not the decimals CASE/NULLIF may produce).
        .prop_filter("needs an integer", |a| {
            !matches!(a.func, BitOr | P99 | Hist | Lhist | TopK) || a.arg.bitwise_ok()
        })
        .boxed()
}

/// Strategy for queries over `event`.
pub fn query_for(event: Event, cfg: QueryConfig) -> BoxedStrategy<Query> {
    let g = expr_gen(event, cfg.depth);
    // A LEFT JOIN's WHERE reads only the start (README, "Pairing two events").
    let filters = match event {
        Event::PairPread { outer: true, .. } => expr_gen(Event::PairStart, cfg.depth).pred,
        _ => g.pred.clone(),
    };
    let shallow = expr_gen(event, cfg.depth.min(1));
    let keys: Vec<&'static str> = event
        .columns()
        .iter()
        .filter(|c| c.key)
        .map(|c: &Column| c.name)
        .collect();
    let strs: Vec<&'static str> = event.str_columns().iter().map(|c| c.name).collect();
    let key = prop_oneof![
        3 => select(keys).prop_map(Key::Col),
        2 => shallow.expr.clone().prop_filter("a bare integer in GROUP BY is a column position", Expr::has_col).prop_map(Key::Expr),
    ];
    let agg = aggregate(g.expr.clone(), false);
    let having = (
        aggregate(shallow.expr.clone(), true),
        select(vec![CmpOp::Gt, CmpOp::Ge, CmpOp::Lt, CmpOp::Ne]),
        int_literal(),
    )
        .prop_map(|(agg, op, lit)| Having { agg, op, lit });
    let agg_shape = (
        proptest::collection::vec(key.clone(), 0..3),
        proptest::collection::vec(agg, 1..4),
        proptest::option::weighted(0.3, having),
    )
        .prop_map(|(keys, aggs, having)| Shape::Agg { keys, aggs, having });
    let proj = prop_oneof![
        3 => g.expr.clone().prop_map(Proj::Int),
        1 => select(strs).prop_map(Proj::Str),
        1 => g.pred.clone().prop_map(Proj::Bool),
    ];
    let raw_shape = proptest::collection::vec(proj.clone(), 1..4).prop_map(Shape::Raw);
    let latest_shape = (
        proptest::collection::vec(key, 1..3),
        proptest::collection::vec(proj, 1..4),
    )
        // DataFusion refuses a DISTINCT ON naming one key twice.
        .prop_map(|(mut keys, cols)| {
            let mut seen = Vec::new();
            keys.retain(|k| {
                let text = k.to_string();
                let new = !seen.contains(&text);
                seen.push(text);
                new
            });
            Shape::Latest { keys, cols }
        });
    // Over a pairing `time` is ambiguous: which event's is latest is the user's to say.
    let latest = if event.paired() { 0 } else { 1 };
    // A union with pread64's entries or exits (the workload makes both), or with itself.
    let unions = if event.paired() { 0 } else { 1 };
    let union_shape = select(vec![event, Event::EnterPread, Event::ExitPread])
        .prop_flat_map(move |other| {
            let right = expr_gen(other, cfg.depth.min(2));
            (
                Just(other),
                1usize..3,
                proptest::option::weighted(0.5, right.pred.clone()),
                any::<bool>(),
                Just(right.expr),
            )
        })
        .prop_flat_map(move |(other, n, right_filter, agg, right)| {
            let left = expr_gen(event, cfg.depth.min(2)).expr;
            (
                proptest::collection::vec(left, n),
                proptest::collection::vec(right, n),
            )
                .prop_map(move |(left, right)| Shape::Union {
                    other,
                    left,
                    right,
                    right_filter: right_filter.clone(),
                    agg,
                })
        });
    // A join of two aggregated relations: the query's event with pread64's entries or exits.
    let join_shape = select(vec![Event::EnterPread, Event::ExitPread])
        .prop_flat_map(move |other| {
            let right = expr_gen(other, cfg.depth.min(1));
            (
                Just(other),
                right
                    .expr
                    .clone()
                    .prop_filter("a key reads a column", Expr::has_col),
                right.expr,
                proptest::option::weighted(0.5, right.pred),
            )
        })
        .prop_flat_map(move |(other, right_key, right_arg, right_filter)| {
            expr_gen(event, cfg.depth.min(1))
                .expr
                .prop_filter("a key reads a column", Expr::has_col)
                .prop_map(move |left_key| Shape::Join {
                    other,
                    left_key,
                    right_key: right_key.clone(),
                    right_arg: right_arg.clone(),
                    right_filter: right_filter.clone(),
                })
        });
    let shape = prop_oneof![
        2 => raw_shape,
        3 => agg_shape,
        latest => latest_shape,
        unions => union_shape,
        unions => join_shape,
    ];
    let order = (
        prop_oneof![4 => proptest::collection::vec(any::<bool>(), 1..3), 1 => Just(Vec::new())],
        any::<bool>(),
        proptest::option::of(1u32..6),
    )
        .prop_map(|(desc, agg_first, limit)| Order {
            desc,
            agg_first,
            limit,
        });
    let max_ms = cfg.max_window_ms.max(100);
    // `ebql check` does not compare count windows over pairs.
    let counts = if event.paired() { 0 } else { 1 };
    let window = prop_oneof![
        1 => Just(Window::None),
        1 => (100u32..=max_ms).prop_map(|ms| Window::Time(ms / 50 * 50)),
        counts => (1u32..40).prop_map(Window::Count),
        1 => (100u32..=max_ms, 2u32..4).prop_map(|(ms, panes)| {
            let step = (ms / 50 * 50).max(50);
            Window::Hop(step * panes, step)
        }),
    ];
    (
        shape,
        proptest::option::weighted(0.8, filters),
        any::<bool>(),
        any::<bool>(),
        proptest::option::weighted(0.3, order),
        window,
    )
        .prop_map(
            move |(shape, filter, pid_last, thesis_order, order, window)| {
                // A union's or join's text has no ORDER BY.
                let union = matches!(shape, Shape::Union { .. } | Shape::Join { .. });
                Query {
                    event,
                    shape,
                    filter,
                    pid_last,
                    thesis_order,
                    order: if union { None } else { order },
                    window,
                }
            },
        )
        .boxed()
}

/// Strategy for queries over any of [`Event::ALL`] (pread64 enter and exit weighted higher:
/// the workload controls their values exactly).
pub fn query(cfg: QueryConfig) -> BoxedStrategy<Query> {
    if cfg.pairings_only {
        return pairing(cfg);
    }
    prop_oneof![
        3 => query_for(Event::EnterPread, cfg),
        2 => query_for(Event::ExitPread, cfg),
        2 => query_for(Event::SchedSwitch, cfg),
        1 => query_for(Event::EnterOpenat, cfg),
        1 => query_for(Event::RawEnter, cfg),
        2 => pairing(cfg),
    ]
    .boxed()
}

/// Strategy for pairings only (inner and LEFT, each key).
pub fn pairing(cfg: QueryConfig) -> BoxedStrategy<Query> {
    use crate::events::PairKey::*;
    let pair = |outer, key| query_for(Event::PairPread { outer, key }, cfg);
    prop_oneof![
        3 => pair(false, Tid),
        1 => pair(false, Pid),
        1 => pair(false, TidPid),
        2 => pair(true, Tid),
        1 => pair(true, TidPid),
    ]
    .boxed()
}
