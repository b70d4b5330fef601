//! [`MetricsPlan`]: how a query's result columns become metrics, read from
//! its SQL text before it runs (module docs of [`super`]).

use datafusion::sql::sqlparser::ast::{
    DuplicateTreatment, Expr, FunctionArguments, GroupByExpr, SelectItem, SetExpr, Statement,
};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::Parser;
use ebql_compiler::diag::Diagnostic;
use ebql_compiler::prepass::{self, WindowSpec};

use super::text::metric_name;

/// What one SELECT item is, from the query text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Item {
    /// A group key: a plain column or a GROUP BY expression.
    Key,
    /// A value; `func` is the lowercase name of its top-level function call, if any.
    Value {
        func: Option<String>,
        distinct: bool,
    },
}

/// How a query's results become metrics, decided from its text before it runs
/// (so a query `serve` cannot expose is refused before anything is attached).
#[derive(Debug, Clone)]
pub struct MetricsPlan {
    /// The metric prefix (already sanitized).
    pub name: String,
    /// True when the user chose the name (`--name`); a derived one may get a `_2` suffix.
    pub explicit: bool,
    /// The query as the user typed it.
    pub sql: String,
    pub(super) items: Vec<Item>,
}

impl MetricsPlan {
    /// Reads `sql`'s SELECT list and WINDOW clause. `name` is the user's
    /// `--name`, else the name is derived (module docs).
    ///
    /// Errors (positioned when a position applies): no WINDOW clause, a
    /// hopping window, `SELECT *`, no value column (a raw stream).
    pub fn new(sql: &str, name: Option<&str>) -> Result<MetricsPlan, crate::Error> {
        let fail = |d: Diagnostic| crate::Error::Query {
            query: sql.to_string(),
            diagnostic: d,
        };
        let prepared = prepass::prepare(sql).map_err(fail)?;
        match prepared.window {
            None => {
                return Err(fail(Diagnostic::new("serve exposes windowed queries; this one has no WINDOW clause", None)
                    .with_hint("add e.g. WINDOW(time, 1000, 1000) to expose each second's results")))
            }
            Some(WindowSpec::Time { size_ns, step_ns }) if size_ns != step_ns => {
                return Err(fail(Diagnostic::new("serve exposes tumbling windows only: in a hopping window every event counts in several windows, so totals would count it several times", prepared.window_span.clone())
                    .with_hint(format!("use a tumbling window, WINDOW(time, {0}, {0}), and let Prometheus aggregate over time (rate, *_over_time)", step_ns / 1_000_000))))
            }
            Some(_) => {}
        }
        let mut statements = Parser::parse_sql(&GenericDialect {}, &prepared.sql)
            .map_err(|e| fail(Diagnostic::new(format!("parsing the query: {e}"), None)))?;
        let select = match statements.pop() {
            Some(Statement::Query(q)) => match *q.body {
                SetExpr::Select(s) => s,
                _ => return Err(fail(Diagnostic::new("serve exposes a single SELECT", None))),
            },
            _ => return Err(fail(Diagnostic::new("serve exposes a single SELECT", None))),
        };
        let group_by: Vec<Expr> = match &select.group_by {
            GroupByExpr::Expressions(e, _) => e.clone(),
            GroupByExpr::All(_) => vec![],
        };
        let is_group_expr = |e: &Expr, alias: Option<&str>| {
            group_by.iter().any(|g| g.to_string() == e.to_string() || matches!((g, alias), (Expr::Identifier(i), Some(a)) if i.value.eq_ignore_ascii_case(a)))
        };
        let mut items = Vec::new();
        for it in &select.projection {
            let (e, alias) = match it {
                SelectItem::UnnamedExpr(e) => (e, None),
                SelectItem::ExprWithAlias { expr, alias } => (expr, Some(alias.value.as_str())),
                _ => {
                    return Err(fail(Diagnostic::new("serve needs each column named in the SELECT list, not `*`", None)
                        .with_hint("list the group keys and aggregates, e.g. SELECT fd, COUNT(*) AS reads … GROUP BY fd")))
                }
            };
            let key = matches!(e, Expr::Identifier(_) | Expr::CompoundIdentifier(_))
                || is_group_expr(e, alias);
            items.push(if key {
                Item::Key
            } else {
                match e {
                    Expr::Function(f) => Item::Value {
                        func: Some(f.name.to_string().to_ascii_lowercase()),
                        distinct: matches!(&f.args, FunctionArguments::List(l) if l.duplicate_treatment == Some(DuplicateTreatment::Distinct)),
                    },
                    _ => Item::Value { func: None, distinct: false },
                }
            });
        }
        if !items.iter().any(|i| matches!(i, Item::Value { .. })) {
            return Err(fail(Diagnostic::new("serve exposes aggregates, and this query has none: every column is a plain column or a group key", None)
                .with_hint("aggregate the events, e.g. SELECT fd, COUNT(*) AS reads … GROUP BY fd WINDOW(time, 1000, 1000)")));
        }
        let (name, explicit) = match name {
            Some(n) => (metric_name(n), true),
            None => (
                metric_name(&format!(
                    "ebql_{}",
                    prepared
                        .events
                        .first()
                        .map(|e| e.event.name.as_str())
                        .unwrap_or("query")
                )),
                false,
            ),
        };
        Ok(MetricsPlan {
            name,
            explicit,
            sql: sql.to_string(),
            items,
        })
    }
}
