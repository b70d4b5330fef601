//! The query's SQL as DuckDB runs it, from the pre-pass's standard SQL
//! (`Prepared::sql`) by sqlparser alone: no DataFusion plan is involved, so
//! an optimizer rewrite cannot reach the second reference.
//!
//! Only standard SQL is sent: a query that calls one of eBQL's own
//! functions (sketches, histograms, `str()`, stack or memory reads) is not
//! evaluated by DuckDB, and the reason says which. A paired query's join is
//! replaced by the table of its pairs (made by `check::pairing`, the same
//! the first reference reads), its columns named `alias.column`. A query
//! over several events that does not pair them is sent whole (set
//! operations, joins, subqueries), each event's name a table of its own
//! made from its branch of the tap.
//! Type names DataFusion spells MySQL's way (`BIGINT UNSIGNED`) become
//! DuckDB's (`UBIGINT`); everything else is sent as written.

use datafusion::sql::sqlparser::ast::{
    visit_expressions, visit_expressions_mut, visit_relations, BinaryOperator, DataType, Distinct,
    Expr, Ident, ObjectName, OrderBy, OrderByExpr, OrderByKind, OrderByOptions, Query, SetExpr,
    Statement, UnaryOperator, Value,
};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::Parser;
use std::ops::ControlFlow;

/// Functions whose meaning DuckDB and DataFusion share (and eBQL's
/// `signed`/`unsigned`, which `reference.py` defines).
const SHARED_FUNCTIONS: &[&str] = &[
    "count", "sum", "min", "max", "avg", "abs", "coalesce", "nullif", "lower", "upper", "length",
    "signed", "unsigned",
];

/// A query DuckDB can evaluate: its SQL and the one table it reads.
#[derive(Debug, Clone, PartialEq)]
pub struct DuckDbQuery {
    /// The SQL to run.
    pub sql: String,
    /// The table it reads (the event's name), under which the tap rows
    /// are registered; empty for a query over several events.
    pub table: String,
    /// Every table its FROM clauses name (without quotes): over several
    /// events, each is one event's rows.
    pub tables: Vec<String>,
    /// The query adds, subtracts or multiplies values (not only
    /// constants): eBQL wraps such integer arithmetic, DuckDB computes it
    /// exactly (raising on overflow, or rewriting it away, as `a - b < 0`
    /// into `a < b`), so a disagreement of DuckDB alone decides nothing.
    pub wraps: bool,
}

/// `standard_sql` for DuckDB over a table of `columns`, or why it cannot
/// be evaluated there (shown to the user). A struct path (`prev.comm`,
/// `s.prev.comm`) is one column of the tap, quoted as such. `paired`: the
/// query pairs two events and `columns` are its pairs' (`e.fd`, `x.ret`);
/// its FROM becomes the pairs' table, and an unqualified column the one
/// pairs column it names.
pub fn duckdb_query(
    standard_sql: &str,
    columns: &[String],
    paired: bool,
) -> Result<DuckDbQuery, String> {
    translate(standard_sql, columns, paired, false)
}

/// [`duckdb_query`] of a query over several events that does not pair
/// them (`ebql_compiler::multi`): any SELECT, set operations included,
/// over tables of the events' names ([`DuckDbQuery::tables`]), which the
/// caller makes from each event's branch of the tap. `columns`: the
/// events' column names.
pub fn duckdb_query_several(standard_sql: &str, columns: &[String]) -> Result<DuckDbQuery, String> {
    translate(standard_sql, columns, false, true)
}

fn translate(
    standard_sql: &str,
    columns: &[String],
    paired: bool,
    several: bool,
) -> Result<DuckDbQuery, String> {
    let mut statements = Parser::parse_sql(&GenericDialect {}, standard_sql)
        .map_err(|e| format!("sqlparser cannot read it: {e}"))?;
    let [Statement::Query(query)] = statements.as_mut_slice() else {
        return Err("not one SELECT".into());
    };
    if !several && !matches!(query.body.as_ref(), SetExpr::Select(_)) {
        return Err("not a plain SELECT (set operations are not compared)".into());
    }
    let mut tables: Vec<String> = Vec::new();
    let _ = visit_relations(query, |name: &ObjectName| {
        let name = name.to_string().trim_matches('"').to_string();
        if !tables.contains(&name) {
            tables.push(name);
        }
        ControlFlow::<()>::Continue(())
    });
    let table = match tables.as_slice() {
        _ if paired => {
            let SetExpr::Select(select) = query.body.as_mut() else {
                return Err("not a plain SELECT".into());
            };
            select.from = pairs_from()?;
            ebql_compiler::check::PAIRS_TABLE.to_string()
        }
        _ if several => String::new(),
        [one] => one.clone(),
        _ => return Err("it reads more than one event without pairing them".into()),
    };
    let refused = visit_expressions(query, |e: &Expr| match e {
        // eBQL (as DataFusion) takes a shift's amount modulo the width;
        // DuckDB gives 0 or fails. Amounts below 8 fit every width.
        Expr::BinaryOp {
            op: BinaryOperator::PGBitwiseShiftLeft | BinaryOperator::PGBitwiseShiftRight,
            right,
            ..
        } if !small_amount(right) => ControlFlow::Break(format!(
            "the shift by {right} may reach the width, which eBQL wraps and DuckDB does not"
        )),
        Expr::Function(f) => {
            let name = f.name.to_string().to_ascii_lowercase();
            if (name == "signed" || name == "unsigned") && nests_signedness(f) {
                ControlFlow::Break(format!(
                    "{name}() of signed()/unsigned(): DuckDB's definitions return HUGEINT, which loses the width the outer one needs"
                ))
            } else if f.over.is_some() {
                ControlFlow::Break(format!("{name}() OVER is a window function"))
            } else if SHARED_FUNCTIONS.contains(&name.as_str()) {
                ControlFlow::Continue(())
            } else {
                ControlFlow::Break(format!("{name}() is not standard SQL"))
            }
        }
        _ => ControlFlow::Continue(()),
    });
    if let ControlFlow::Break(why) = refused {
        return Err(why);
    }
    order_by_recency(query, columns)?;
    let wraps = visit_expressions(query, |e: &Expr| match e {
        Expr::BinaryOp {
            op: BinaryOperator::Plus | BinaryOperator::Minus | BinaryOperator::Multiply,
            ..
        } => ControlFlow::Break(()),
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } if !matches!(expr.as_ref(), Expr::Value(_)) => ControlFlow::Break(()),
        _ => ControlFlow::Continue(()),
    })
    .is_break();
    let rewritten = visit_expressions_mut(query, |e: &mut Expr| {
        match e {
            Expr::CompoundIdentifier(parts) => {
                let names: Vec<&str> = parts.iter().map(|p| p.value.as_str()).collect();
                if let Some(path) = (0..names.len())
                    .map(|k| names[k..].join("."))
                    .find(|p| p.contains('.') && columns.contains(p))
                {
                    *e = Expr::Identifier(Ident::with_quote('"', path));
                }
            }
            Expr::Identifier(id) if paired && !columns.contains(&id.value) => {
                let suffix = format!(".{}", id.value);
                let mut named = columns.iter().filter(|c| c.ends_with(&suffix));
                if let (Some(one), None) = (named.next(), named.next()) {
                    *e = Expr::Identifier(Ident::with_quote('"', one));
                }
            }
            // DataFusion's LIKE escapes with `\` by default, DuckDB's with nothing.
            Expr::Like {
                escape_char: escape @ None,
                ..
            }
            | Expr::ILike {
                escape_char: escape @ None,
                ..
            } => {
                *escape = Some(Value::SingleQuotedString("\\".into()).with_empty_span());
            }
            Expr::Cast { data_type, .. } => {
                if let Some(t) = duckdb_type(data_type) {
                    *data_type = DataType::Custom(ObjectName::from(vec![Ident::new(t)]), vec![]);
                }
            }
            // `^` is XOR in DataFusion, power in DuckDB.
            Expr::BinaryOp {
                left,
                op: BinaryOperator::BitwiseXor,
                right,
            } => match Parser::new(&GenericDialect {})
                .try_with_sql(&format!("xor({left}, {right})"))
                .and_then(|mut p| p.parse_expr())
            {
                Ok(call) => *e = call,
                Err(err) => return ControlFlow::Break(format!("rewriting {e} as xor(): {err}")),
            },
            _ => {}
        }
        ControlFlow::Continue(())
    });
    if let ControlFlow::Break(why) = rewritten {
        return Err(why);
    }
    Ok(DuckDbQuery {
        sql: query.to_string(),
        table,
        tables,
        wraps,
    })
}

/// Whether a `signed`/`unsigned` call's arguments hold another one.
/// A `DISTINCT ON` whose ORDER BY leaves a key's row unchosen keeps the
/// key's latest event in eBQL (`ebql_compiler::latest`): DuckDB is told so
/// with `time DESC` after the keys. `Err` when the tap has no `time`.
fn order_by_recency(query: &mut Query, columns: &[String]) -> Result<(), String> {
    let SetExpr::Select(select) = query.body.as_ref() else {
        return Ok(());
    };
    let Some(Distinct::On(keys)) = &select.distinct else {
        return Ok(());
    };
    let mut order = match &query.order_by {
        None => Vec::new(),
        Some(OrderBy {
            kind: OrderByKind::Expressions(order),
            ..
        }) => order.clone(),
        Some(_) => return Err("ORDER BY ALL".into()),
    };
    if order.iter().any(|o| !keys.contains(&o.expr)) {
        return Ok(()); // the query's own ORDER BY picks the row
    }
    if !columns.iter().any(|c| c == "time") {
        return Err(
            "DISTINCT ON keeps each key's latest event, by `time`, which the query does not read"
                .into(),
        );
    }
    let by = |expr: Expr, asc: Option<bool>| OrderByExpr {
        expr,
        options: OrderByOptions {
            asc,
            nulls_first: None,
        },
        with_fill: None,
    };
    if order.is_empty() {
        order = keys.iter().map(|k| by(k.clone(), None)).collect();
    }
    order.push(by(
        Expr::Identifier(Ident::with_quote('"', "time")),
        Some(false),
    ));
    query.order_by = Some(OrderBy {
        kind: OrderByKind::Expressions(order),
        interpolate: None,
    });
    Ok(())
}

fn nests_signedness(f: &datafusion::sql::sqlparser::ast::Function) -> bool {
    let mut inner = false;
    let _ = visit_expressions(&f.args, |e: &Expr| {
        if let Expr::Function(g) = e {
            let name = g.name.to_string().to_ascii_lowercase();
            if name == "signed" || name == "unsigned" {
                inner = true;
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    });
    inner
}

/// Whether a shift amount is a constant below 8 (within every integer width).
fn small_amount(e: &Expr) -> bool {
    match e {
        Expr::Nested(inner) => small_amount(inner),
        Expr::Value(v) => {
            matches!(&v.value, Value::Number(n, _) if n.parse::<u64>().is_ok_and(|n| n < 8))
        }
        _ => false,
    }
}

/// `FROM "__pairs"`, as sqlparser reads it.
fn pairs_from() -> Result<Vec<datafusion::sql::sqlparser::ast::TableWithJoins>, String> {
    let sql = format!(r#"SELECT 1 FROM "{}""#, ebql_compiler::check::PAIRS_TABLE);
    let mut parsed = Parser::parse_sql(&GenericDialect {}, &sql).map_err(|e| e.to_string())?;
    match parsed.pop() {
        Some(Statement::Query(q)) => match *q.body {
            SetExpr::Select(select) => Ok(select.from),
            _ => Err("FROM of the pairs".into()),
        },
        _ => Err("FROM of the pairs".into()),
    }
}

/// DuckDB's name of an unsigned integer type spelled the MySQL way.
fn duckdb_type(t: &DataType) -> Option<&'static str> {
    Some(match t {
        DataType::TinyIntUnsigned(_) => "UTINYINT",
        DataType::SmallIntUnsigned(_) | DataType::Int2Unsigned(_) => "USMALLINT",
        DataType::IntUnsigned(_) | DataType::IntegerUnsigned(_) | DataType::Int4Unsigned(_) => {
            "UINTEGER"
        }
        DataType::BigIntUnsigned(_) | DataType::Int8Unsigned(_) => "UBIGINT",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_signedness_is_not_sent() {
        let why = duckdb_query(
            r#"SELECT comm FROM "tracepoint:a:b" WHERE signed(unsigned(ret)) >= 135"#,
            &[],
            false,
        )
        .unwrap_err();
        assert!(why.contains("loses the width"), "{why}");
        assert!(duckdb_query(
            r#"SELECT signed(ret), unsigned(fd) FROM "tracepoint:a:b""#,
            &[],
            false
        )
        .is_ok());
    }

    #[test]
    fn arithmetic_of_values_is_where_the_engines_may_differ() {
        let wraps = |sql: &str| duckdb_query(sql, &[], false).unwrap().wraps;
        assert!(wraps(
            r#"SELECT fd FROM "tracepoint:a:b" WHERE (fd - pos) < 0"#
        ));
        assert!(wraps(r#"SELECT MIN(fd * 3) FROM "tracepoint:a:b""#));
        assert!(wraps(r#"SELECT -fd FROM "tracepoint:a:b""#));
        assert!(!wraps(
            r#"SELECT fd FROM "tracepoint:a:b" WHERE CAST(pos AS BIGINT) BETWEEN -10 AND 10"#
        ));
        assert!(!wraps(r#"SELECT fd / 2, fd % 3 FROM "tracepoint:a:b""#));
    }

    #[test]
    fn standard_sql_is_sent_as_written_with_duckdb_type_names() {
        let q = duckdb_query(
            r#"SELECT fd, COUNT(*) FROM "tracepoint:syscalls:sys_enter_pread64" WHERE CAST(fd AS INT UNSIGNED) < 5 GROUP BY fd"#,
            &[],
            false,
        )
        .unwrap();
        assert_eq!(q.table, "tracepoint:syscalls:sys_enter_pread64");
        assert!(q.sql.contains("CAST(fd AS UINTEGER)"), "{}", q.sql);
        let q = duckdb_query(r#"SELECT (fd ^ 3) ^ pid FROM "tracepoint:a:b""#, &[], false).unwrap();
        assert!(q.sql.contains("xor((xor(fd, 3)), pid)"), "{}", q.sql);
    }

    #[test]
    fn ebql_functions_and_joins_are_refused_with_the_reason() {
        let why =
            duckdb_query(r#"SELECT hist(count) FROM "tracepoint:a:b""#, &[], false).unwrap_err();
        assert!(why.contains("hist()"), "{why}");
        let why = duckdb_query(
            r#"SELECT COUNT(*) FROM "tracepoint:a:b" AS s JOIN "tracepoint:a:c" AS e ON s.tid = e.tid"#,
            &[],
            false,
        )
        .unwrap_err();
        assert!(why.contains("more than one event"), "{why}");
    }

    /// A shift that may reach the width is not sent: eBQL wraps the amount.
    #[test]
    fn wide_shifts_are_refused() {
        let ok = duckdb_query(r#"SELECT fd >> 3 FROM "tracepoint:a:b""#, &[], false);
        assert!(ok.is_ok(), "{ok:?}");
        for sql in [
            r#"SELECT time >> 70 FROM "tracepoint:a:b""#,
            r#"SELECT fd << fd FROM "tracepoint:a:b""#,
        ] {
            let why = duckdb_query(sql, &[], false).unwrap_err();
            assert!(why.contains("eBQL wraps"), "{why}");
        }
    }

    /// LIKE escapes with a backslash in both engines.
    #[test]
    fn like_escapes_with_a_backslash() {
        let q = duckdb_query(
            r#"SELECT COUNT(*) FROM "tracepoint:a:b" WHERE comm LIKE '%50\%' AND comm NOT LIKE 'x%'"#,
            &[],
            false,
        )
        .unwrap();
        assert!(
            q.sql
                .contains(r#"comm LIKE '%50\%' ESCAPE '\' AND comm NOT LIKE 'x%' ESCAPE '\'"#),
            "{}",
            q.sql
        );
    }

    /// A pairing reads the pairs' table; qualified and unqualified columns
    /// name its `alias.column` columns.
    #[test]
    fn a_pairing_reads_its_pairs() {
        let columns = [
            "s.fd".to_string(),
            "s.time".into(),
            "e.time".into(),
            "e.ret".into(),
        ];
        let q = duckdb_query(
            r#"SELECT s.fd, SUM(e.time - s.time) FROM "tracepoint:a:b" AS s LEFT JOIN "tracepoint:a:c" AS e ON s.tid = e.tid WHERE ret > 0 GROUP BY s.fd"#,
            &columns,
            true,
        )
        .unwrap();
        assert_eq!(q.table, "__pairs");
        assert_eq!(
            q.sql,
            r#"SELECT "s.fd", SUM("e.time" - "s.time") FROM "__pairs" WHERE "e.ret" > 0 GROUP BY "s.fd""#
        );
    }

    #[test]
    fn struct_paths_are_one_quoted_column() {
        let q = duckdb_query(
            r#"SELECT s.prev.comm, prev.pid FROM "tp_btf:sched:sched_switch" AS s"#,
            &["prev.comm".into(), "prev.pid".into()],
            false,
        )
        .unwrap();
        assert!(
            q.sql.contains(r#"SELECT "prev.comm", "prev.pid" FROM"#),
            "{}",
            q.sql
        );
    }

    #[test]
    fn several_events_are_sent_whole_with_their_tables() {
        let q = duckdb_query_several(
            r#"SELECT fd FROM "tracepoint/a/b" UNION ALL SELECT ret AS fd FROM "tracepoint/a/c" EXCEPT SELECT fd FROM "tracepoint/a/b""#,
            &["fd".into(), "ret".into()],
        )
        .unwrap();
        assert_eq!(q.tables, ["tracepoint/a/b", "tracepoint/a/c"]);
        assert!(
            q.sql.contains("UNION ALL") && q.sql.contains("EXCEPT"),
            "{}",
            q.sql
        );
        let one = duckdb_query(
            r#"SELECT fd FROM "tracepoint/a/b" UNION ALL SELECT fd FROM "tracepoint/a/c""#,
            &[],
            false,
        );
        assert_eq!(
            one.unwrap_err(),
            "not a plain SELECT (set operations are not compared)"
        );
    }
}
