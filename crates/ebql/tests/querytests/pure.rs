//! Pure tier: `error` and `explain` cases, compiled against the built-in
//! tracefs formats of `ebql_catalog::samples` (no tracefs, no BPF, any user).

use ebql_catalog::samples::{RAW_SYS_ENTER, SCHED_SWITCH, SYS_ENTER_PREAD64, SYS_EXIT_PREAD64};
use ebql_catalog::{parse_format, CatalogError, EventKind, EventName, EventSchema};
use ebql_compiler::{compile_query, explain::explain, CodegenOptions, CompileError, EventSource};

/// The sample tracepoints and `profile:hz:N`; any other name is unknown (with a suggestion, as the real catalog gives).
struct Samples;

impl EventSource for Samples {
    fn event(&self, name: &EventName) -> Result<EventSchema, CatalogError> {
        match (name.kind, name.category.as_str(), name.name.as_str()) {
            (EventKind::Tracepoint, "syscalls", "sys_enter_pread64") => {
                parse_format(name.clone(), SYS_ENTER_PREAD64)
            }
            (EventKind::Tracepoint, "syscalls", "sys_exit_pread64") => {
                parse_format(name.clone(), SYS_EXIT_PREAD64)
            }
            (EventKind::Tracepoint, "sched", "sched_switch") => {
                parse_format(name.clone(), SCHED_SWITCH)
            }
            (EventKind::Tracepoint, "raw_syscalls", "sys_enter") => {
                parse_format(name.clone(), RAW_SYS_ENTER)
            }
            // At Linux's default kernel.perf_event_max_sample_rate.
            (EventKind::Profile, _, _) => {
                ebql_catalog::source::profile::schema(name, Some(100_000))
            }
            _ => Err(CatalogError::UnknownEvent {
                name: name.table_name(),
                suggestion: Some("tracepoint/syscalls/sys_enter_pread64".into()),
            }),
        }
    }
}

/// Output lines of an `error` case: the rendered diagnostic (position, source
/// line, underline, hint), or a description of why there is none.
pub fn error_lines(sql: &str) -> Result<Vec<String>, String> {
    match compile_query(sql, &Samples, &CodegenOptions::default()) {
        Err(CompileError::Query(d)) => Ok(d
            .render(sql)
            .lines()
            .map(|l| l.trim_end().to_string())
            .collect()),
        Err(other) => Err(format!("not a query error (exit code 1, not 2): {other}")),
        Ok(_) => Err("the query compiled; an `error` case expects it not to".into()),
    }
}

/// Output lines of an `explain` case (blank lines dropped: they end a block in the file format).
pub fn explain_lines(sql: &str, split_only: bool) -> Result<Vec<String>, String> {
    let c = compile_query(sql, &Samples, &CodegenOptions::default()).map_err(|e| match e {
        CompileError::Query(d) => d.render(sql),
        other => other.to_string(),
    })?;
    let text = explain(&c);
    let text = if split_only {
        text.split("== BPF:").next().unwrap_or_default().to_string()
    } else {
        text
    };
    Ok(text
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect())
}
