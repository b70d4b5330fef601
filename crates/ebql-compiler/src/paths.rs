//! Field paths through kernel structs (`prev.comm`, `rq.q.disk.first_minor`)
//! for events with BTF-typed arguments (tp_btf, raw tracepoints,
//! fentry/fexit).
//!
//! A path is a column of its own, named with its dots (`prev.comm`), that
//! the event table gets only when the query mentions it: the planner finds
//! the dotted names in the SQL ([`dotted_names`]), asks the catalog to
//! resolve those rooted at an argument ([`crate::planner::EventSource::field_path`]),
//! and DataFusion, which reads `prev.comm` as field `comm` of column `prev`,
//! is told by [`PathPlanner`] that it means the column `prev.comm` (argument
//! columns that can root a path carry the [`PATH_ROOT`] metadata key).

use std::ops::Range;

use datafusion::arrow::datatypes::Field;
use datafusion::common::{Column, Result, TableReference};
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult};
use datafusion::logical_expr::Expr;
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

/// Arrow field metadata key marking an argument column that points to a
/// kernel struct (its fields are reachable as `<column>.<field>`).
pub const PATH_ROOT: &str = "ebql.btf_struct";

/// Every chain `a.b[.c…]` of unquoted or quoted words in `sql`, as its
/// parts and its byte range (comments and string literals are skipped by
/// the tokenizer). Unreadable SQL gives no chains (the planner reports it).
pub fn dotted_names(sql: &str) -> Vec<(Vec<String>, Range<usize>)> {
    let Ok(tokens) = Tokenizer::new(&GenericDialect {}, sql).tokenize_with_location() else {
        return vec![];
    };
    let at = |t: &datafusion::sql::sqlparser::tokenizer::TokenWithSpan, end: bool| {
        let l = if end { t.span.end } else { t.span.start };
        crate::diag::offset_of(sql, l.line, l.column).unwrap_or(sql.len())
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let Token::Word(w) = &tokens[i].token else {
            i += 1;
            continue;
        };
        let mut parts = vec![w.value.clone()];
        let start = at(&tokens[i], false);
        let mut j = i;
        while let (Some(Token::Period), Some(Token::Word(next))) = (
            tokens.get(j + 1).map(|t| &t.token),
            tokens.get(j + 2).map(|t| &t.token),
        ) {
            parts.push(next.value.clone());
            j += 2;
        }
        if parts.len() > 1 {
            out.push((parts, start..at(&tokens[j], true)));
        }
        i = j + 1;
    }
    out
}

/// Plans `prev.comm` (DataFusion: field `comm` of column `prev`) as the
/// column `prev.comm` when `prev` is a struct-pointer argument ([`PATH_ROOT`]).
#[derive(Debug)]
pub struct PathPlanner;

impl ExprPlanner for PathPlanner {
    fn plan_compound_identifier(
        &self,
        field: &Field,
        qualifier: Option<&TableReference>,
        nested_names: &[String],
    ) -> Result<PlannerResult<Vec<Expr>>> {
        if !field.metadata().contains_key(PATH_ROOT) {
            return Ok(PlannerResult::Original(vec![]));
        }
        let name = std::iter::once(field.name().as_str())
            .chain(nested_names.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(".");
        Ok(PlannerResult::Planned(Expr::Column(Column::new(
            qualifier.cloned(),
            name,
        ))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_chains_outside_strings_and_comments() {
        let sql = "SELECT s.prev.comm, next.pid FROM t s WHERE x = 'a.b' -- c.d\n AND y.z > 1";
        let got: Vec<(String, &str)> = dotted_names(sql)
            .into_iter()
            .map(|(p, r)| (p.join("."), &sql[r]))
            .collect();
        assert_eq!(
            got,
            vec![
                ("s.prev.comm".into(), "s.prev.comm"),
                ("next.pid".into(), "next.pid"),
                ("y.z".into(), "y.z")
            ]
        );
    }
}
