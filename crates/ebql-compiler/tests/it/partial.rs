//! `--partial`'s rewrite (`ebql_compiler::partial::apply`) on fixed tracefs
//! formats: the rows' schema, each aggregate's state columns, the keys'
//! names, and the refusals.

use ebql_catalog::samples::SYS_ENTER_PREAD64;
use ebql_catalog::{parse_format, CatalogError, EventName, EventSchema};
use ebql_compiler::partial::{apply, Identity, PartialLayout};
use ebql_compiler::{compile_query, CodegenOptions, CompileError, EventSource};

struct Fixed;

impl EventSource for Fixed {
    fn event(&self, name: &EventName) -> Result<EventSchema, CatalogError> {
        match (name.category.as_str(), name.name.as_str()) {
            ("syscalls", "sys_enter_pread64") => parse_format(name.clone(), SYS_ENTER_PREAD64),
            _ => Err(CatalogError::UnknownEvent {
                name: name.table_name(),
                suggestion: None,
            }),
        }
    }
}

fn identity() -> Identity {
    Identity {
        host_id: "h1".into(),
        query_id: "q".into(),
        query_hash: "0123456789abcdef".into(),
        clock_error_ns: None,
    }
}

fn partial(sql: &str) -> Result<(Vec<String>, PartialLayout), CompileError> {
    let mut c =
        compile_query(sql, &Fixed, &CodegenOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let layout = apply(&mut c, &identity())?;
    let names = c
        .split
        .remainder
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    Ok((names, layout))
}

fn refusal(sql: &str) -> String {
    match partial(sql) {
        Err(CompileError::Query(d)) => format!("{} | {}", d.message, d.hint.unwrap_or_default()),
        other => panic!("{sql}: {:?}", other.map(|(n, _)| n)),
    }
}

const EV: &str = "tracepoint/syscalls/sys_enter_pread64";

#[test]
fn rows_hold_the_identity_the_keys_and_each_state_in_order() {
    let (names, layout) = partial(&format!(
        "SELECT fd AS file, COUNT(*) AS n, AVG(count) AS mean, MAX(count) AS hi, VAR_POP(count) AS v, \
         HIST(count) AS h, approx_distinct(pos) AS d FROM {EV} GROUP BY fd WINDOW(time, 1000, 500)"
    ))
    .unwrap();
    assert_eq!(
        names,
        [
            "host_id",
            "query_id",
            "query_hash",
            "partial_version",
            "clock_error_ns",
            "window_groups",
            "file",
            "n[count]",
            "mean[count]",
            "mean[sum]",
            "hi[max]",
            "v[count]",
            "v[mean]",
            "v[m2]",
            "h[counts]",
            "d[hll]"
        ]
    );
    assert_eq!(layout.window_ns, (1_000_000_000, 500_000_000));
    let functions: Vec<&str> = layout
        .aggregates
        .iter()
        .map(|a| a.function.as_str())
        .collect();
    assert_eq!(
        functions,
        ["count", "avg", "max", "var_pop", "hist", "approx_distinct"]
    );
    assert_eq!(layout.keys.len(), 1);
    assert_eq!(layout.keys[0].name(), "file");
}

#[test]
fn a_quantiles_q_is_a_parameter_and_its_state_the_sketchs_buckets() {
    let (names, layout) = partial(&format!(
        "SELECT QUANTILE(count, 0.99) AS p99 FROM {EV} WINDOW(time, 1000, 1000)"
    ))
    .unwrap();
    assert!(
        names.ends_with(&["p99[buckets]".to_string(), "p99[counts]".to_string()]),
        "{names:?}"
    );
    assert_eq!(layout.aggregates[0].params, ["0.99"]);
}

#[test]
fn every_key_is_written_once_selected_or_not() {
    let (names, _) = partial(&format!(
        "SELECT cpu AS a, cpu AS b, COUNT(*) AS n FROM {EV} GROUP BY fd, cpu WINDOW(time, 1000, 1000)"
    ))
    .unwrap();
    // fd is not selected: its own name; cpu is selected twice: its first name.
    assert_eq!(names[6..], ["fd", "a", "n[count]"]);
}

#[test]
fn what_does_not_merge_is_refused_with_why() {
    assert!(refusal(&format!(
        "SELECT fd, COUNT(*) AS n FROM {EV} GROUP BY fd HAVING COUNT(*) > 1 WINDOW(time, 1000, 1000)"
    ))
    .starts_with("with --partial, HAVING cannot run"));
    assert!(refusal(&format!(
        "SELECT fd, COUNT(*) AS n FROM {EV} GROUP BY fd ORDER BY n DESC LIMIT 3 WINDOW(time, 1000, 1000)"
    ))
    .starts_with("with --partial, LIMIT cannot run"));
    assert!(refusal(&format!(
        "SELECT COUNT(*) * 2 AS n FROM {EV} WINDOW(time, 1000, 1000)"
    ))
    .contains("cannot run on one host's states"));
    assert!(
        refusal(&format!("SELECT fd, COUNT(*) AS n FROM {EV} GROUP BY fd"))
            .contains("needs a time window")
    );
    assert!(refusal(&format!(
        "SELECT fd, pos FROM {EV} WINDOW(time, 1000, 1000)"
    ))
    .contains("this query has none there"));
    assert!(refusal(&format!(
        "SELECT fd, COUNT(DISTINCT pos) AS n, COUNT(*) AS c FROM {EV} GROUP BY fd WINDOW(time, 1000, 1000)"
    ))
    .contains("approx_distinct(x)"));
}

#[test]
fn distinct_counts_write_their_sets_as_rows() {
    let (names, layout) = partial(&format!(
        "SELECT fd, COUNT(DISTINCT pos) AS n FROM {EV} GROUP BY fd WINDOW(time, 1000, 1000)"
    ))
    .unwrap();
    assert_eq!(names[6..], ["fd", "n[value]"]);
    assert_eq!(layout.keys.len(), 1);
    assert_eq!(layout.aggregates[0].function, "count_distinct");
    assert_eq!(layout.aggregates[0].columns[0].name(), "n[value]");
}
