//! `--format live`: the current window redrawn in place, top-like.
//!
//! Each closed window replaces the previous one on the terminal (cursor home,
//! lines overwritten, the rest cleared: no flicker, no scrolling). Rows are
//! sorted by the first aggregate column descending (the busiest group on
//! top), or kept in the query's order when it says ORDER BY; histograms are
//! drawn as in the table format; what does not fit the terminal's height is
//! counted, not shown. A status line gives the events/s that passed the
//! filter and those seen (of the processes it selects), and the events lost. The last view stays on
//! screen when the query stops. [`super::for_format`] builds this sink only
//! when stdout is a terminal (the table sink otherwise).

use std::time::Instant;

use arrow::array::RecordBatch;
use arrow::compute::SortOptions;
use datafusion::sql::sqlparser::ast::{Expr, SelectItem, SetExpr, Statement};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::Parser;

use super::contract::{QueryInfo, Sink, SinkError, TextOutput, WindowKind};
use super::table::{render, window_heading};
use super::wall_clock::WallClock;
use crate::window::{QueryStats, WindowBatch};

/// Cursor home; clear to the end of the line; clear to the end of the screen.
const HOME: &str = "\x1b[H";
const CLEAR_LINE: &str = "\x1b[K";
const CLEAR_BELOW: &str = "\x1b[J";
const HIDE_CURSOR: &str = "\x1b[?25l";
const SHOW_CURSOR: &str = "\x1b[?25h";

/// How rows are ordered on screen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowOrder {
    /// As the query emits them (it has an ORDER BY).
    Query,
    /// By this column (of the rows without window bounds), descending.
    Descending(usize),
    /// No aggregate to sort by: as emitted.
    Emitted,
}

/// Redraws the current window in place on a terminal.
pub struct LiveSink {
    out: TextOutput,
    title: String,
    window: WindowKind,
    order: RowOrder,
    clock: WallClock,
    /// The last window's heading and table.
    shown: Option<(String, String)>,
    /// Counters at the previous progress call, and when.
    last: Option<(QueryStats, Instant)>,
    status: String,
}

impl LiveSink {
    /// A live view on `out` (a terminal).
    pub fn new(out: TextOutput) -> LiveSink {
        LiveSink {
            out,
            title: String::new(),
            window: WindowKind::None,
            order: RowOrder::Emitted,
            clock: WallClock::now(),
            shown: None,
            last: None,
            status: String::new(),
        }
    }

    fn redraw(&mut self) -> Result<(), SinkError> {
        let (rows, cols) = terminal_size();
        let mut lines: Vec<String> = vec![truncate(&self.title, cols), String::new()];
        match &self.shown {
            Some((heading, table)) => {
                lines.push(truncate(heading, cols));
                // Title, blank, heading, the table, status.
                let room = rows.saturating_sub(lines.len() + 2).max(1);
                let table: Vec<&str> = table.lines().collect();
                let cut = table.len() > room;
                let keep = if cut {
                    room.saturating_sub(1)
                } else {
                    table.len()
                };
                lines.extend(table[..keep].iter().map(|l| truncate(l, cols)));
                if cut {
                    lines.push(format!(
                        "… {} more lines (a taller terminal or LIMIT shows them)",
                        table.len() - keep
                    ));
                }
            }
            None => lines.push("waiting for the first window…".to_string()),
        }
        lines.push(String::new());
        lines.push(truncate(&self.status, cols));
        let mut screen = String::from(HOME);
        for l in &lines {
            screen += l;
            screen += CLEAR_LINE;
            screen.push('\n');
        }
        screen += CLEAR_BELOW;
        self.out.write_all(screen.as_bytes())
    }
}

impl Sink for LiveSink {
    fn open(&mut self, info: &QueryInfo) -> Result<(), SinkError> {
        self.out.open()?;
        self.window = info.window;
        self.clock = info.clock;
        self.order = row_order(&info.sql);
        self.title = format!(
            "ebql {} — {}",
            info.version,
            info.sql.split_whitespace().collect::<Vec<_>>().join(" ")
        );
        self.status = "starting…".to_string();
        self.out
            .write_all(format!("{HIDE_CURSOR}\x1b[2J").as_bytes())?;
        self.redraw()
    }

    fn write(&mut self, w: &WindowBatch) -> Result<(), SinkError> {
        if let Some(failed) = super::table::failure_line(self.window, &self.clock, w) {
            self.shown = Some((format!("error: {failed}"), String::new()));
            return self.redraw();
        }
        let rows = sorted(&w.rows_without_bounds(), self.order)?;
        let heading = match w.bounds {
            Some(_) => window_heading(self.window, &self.clock, w),
            None => format!("{} rows", rows.num_rows()),
        };
        self.shown = Some((heading, render(&rows)?));
        self.redraw()
    }

    fn progress(&mut self, stats: &QueryStats) -> Result<(), SinkError> {
        let now = Instant::now();
        let rates = self.last.map(|(prev, at)| {
            let secs = now.duration_since(at).as_secs_f64().max(1e-3);
            let per_s = |a: u64, b: u64| a.saturating_sub(b) as f64 / secs;
            (
                per_s(stats.events_matched, prev.events_matched),
                per_s(stats.events_seen, prev.events_seen),
            )
        });
        self.last = Some((*stats, now));
        self.status = format!("{} — Ctrl-C stops", status_line(stats, rates));
        self.redraw()
    }

    fn finish(&mut self, stats: &QueryStats) -> Result<(), SinkError> {
        self.status = format!("stopped: {}", status_line(stats, None));
        let drawn = self.redraw();
        let shown = self.out.write_all(SHOW_CURSOR.as_bytes());
        drawn.and(shown).and(self.out.close())
    }
}

/// `1234 events/s matched of 5678 seen, no events lost, 7 windows, 40 rows`
/// (seen: the events of the processes the query selects, `QueryStats::events_seen`).
fn status_line(s: &QueryStats, rates: Option<(f64, f64)>) -> String {
    let rates = match rates {
        Some((matched, seen)) => format!("{matched:.0} events/s matched of {seen:.0} seen, "),
        None => String::new(),
    };
    let lost = match s.events_dropped() {
        0 => "no events lost".to_string(),
        n => format!(
            "{n} events lost ({})",
            crate::window::DropCause::describe(&s.drop_causes())
        ),
    };
    let failed = match s.windows_failed {
        0 => String::new(),
        n => format!(" ({n} failed)"),
    };
    format!(
        "{rates}{lost}, {} windows{failed}, {} rows",
        s.windows_emitted, s.rows_emitted
    )
}

/// How to order a query's rows on screen: its own ORDER BY, else its first
/// aggregate (a function call in the SELECT list) descending. Read from the
/// query's SQL (after eBQL's pre-pass); anything unreadable keeps the
/// emitted order.
pub fn row_order(sql: &str) -> RowOrder {
    let Ok(prepared) = ebql_compiler::prepass::prepare(sql) else {
        return RowOrder::Emitted;
    };
    let Ok(statements) = Parser::parse_sql(&GenericDialect {}, &prepared.sql) else {
        return RowOrder::Emitted;
    };
    let Some(Statement::Query(query)) = statements.first() else {
        return RowOrder::Emitted;
    };
    if query.order_by.is_some() {
        return RowOrder::Query;
    }
    let SetExpr::Select(select) = query.body.as_ref() else {
        return RowOrder::Emitted;
    };
    let first_aggregate = select.projection.iter().position(|item| match item {
        SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
            matches!(e, Expr::Function(_))
        }
        _ => false,
    });
    let wildcard = select.projection.iter().any(|i| {
        matches!(
            i,
            SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..)
        )
    });
    match first_aggregate {
        Some(i) if !wildcard => RowOrder::Descending(i),
        _ => RowOrder::Emitted,
    }
}

/// `batch` in the screen's order (a non-numeric sort column keeps the emitted order).
fn sorted(batch: &RecordBatch, order: RowOrder) -> Result<RecordBatch, SinkError> {
    let RowOrder::Descending(col) = order else {
        return Ok(batch.clone());
    };
    let Some(column) = batch
        .columns()
        .get(col)
        .filter(|c| c.data_type().is_numeric())
    else {
        return Ok(batch.clone());
    };
    let indices = arrow::compute::sort_to_indices(
        column,
        Some(SortOptions {
            descending: true,
            nulls_first: false,
        }),
        None,
    )
    .map_err(|e| SinkError::new("sorting rows", e))?;
    arrow::compute::take_record_batch(batch, &indices)
        .map_err(|e| SinkError::new("sorting rows", e))
}

/// `line` cut to `cols` characters.
fn truncate(line: &str, cols: usize) -> String {
    match line.char_indices().nth(cols) {
        Some((at, _)) => line[..at].to_string(),
        None => line.to_string(),
    }
}

/// (rows, columns) of the terminal on stdout; 24×80 when unknown.
fn terminal_size() -> (usize, usize) {
    // SAFETY: plain C struct, all-zero is valid.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ fills a winsize; stdout is a valid descriptor number.
    let r = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) };
    if r == 0 && ws.ws_row > 0 && ws.ws_col > 0 {
        (ws.ws_row as usize, ws.ws_col as usize)
    } else {
        (24, 80)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{StringArray, UInt64Array};
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    const EV: &str = "tracepoint/syscalls/sys_enter_pread64";

    #[test]
    fn rows_follow_the_first_aggregate_or_the_query_order() {
        assert_eq!(row_order(&format!("SELECT fd, cpu, COUNT(*), MAX(count) FROM {EV} GROUP BY fd, cpu WINDOW(time, 1000, 1000)")), RowOrder::Descending(2));
        assert_eq!(
            row_order(&format!(
                "SELECT comm, SUM(count) AS bytes FROM {EV} GROUP BY comm"
            )),
            RowOrder::Descending(1)
        );
        assert_eq!(
            row_order(&format!(
                "SELECT fd, COUNT(*) AS n FROM {EV} GROUP BY fd ORDER BY fd"
            )),
            RowOrder::Query
        );
        assert_eq!(
            row_order(&format!("SELECT fd, count FROM {EV}")),
            RowOrder::Emitted
        );
    }

    #[test]
    fn sorting_puts_the_largest_first() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("comm", DataType::Utf8, false),
            Field::new("n", DataType::UInt64, false),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(vec!["a", "b", "c"])),
                Arc::new(UInt64Array::from(vec![2, 9, 5])),
            ],
        )
        .unwrap();
        let s = sorted(&batch, RowOrder::Descending(1)).unwrap();
        assert_eq!(
            s.column(0)
                .as_any()
                .downcast_ref::<StringArray>()
                .unwrap()
                .iter()
                .flatten()
                .collect::<Vec<_>>(),
            ["b", "c", "a"]
        );
        assert_eq!(
            sorted(&batch, RowOrder::Descending(0)).unwrap(),
            batch,
            "a string column is no sort key"
        );
    }
}
