//! Issue 23: `--partial` rows hold the aggregates' states, and DataFusion's
//! own accumulators merge them (what its Final aggregate mode does) into
//! the values of one query over every host's events: three queries with
//! different host ids on three workloads with known calls, merged here.

use crate::common::{kernel_lock, require_root, u64s, Workload};
use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use datafusion::arrow::compute::{concat, filter_record_batch, is_null};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::ScalarValue;
use datafusion::execution::FunctionRegistry;
use datafusion::logical_expr::AggregateUDF;
use datafusion::physical_expr::aggregate::AggregateExprBuilder;
use datafusion::physical_expr::expressions::col;
use ebql::partial::PartialOptions;
use ebql::{Executor, ExecutorOptions};
use std::sync::Arc;

/// Per host: pread size and calls.
const HOSTS: [(u64, u64); 3] = [(512, 40), (4096, 25), (100, 60)];

/// The partial rows of three hosts' runs of one aggregate query, group rows only.
fn three_hosts_partial_rows() -> RecordBatch {
    let mut runs = Vec::new();
    for (i, &(size, calls)) in HOSTS.iter().enumerate() {
        let mut w = Workload::start();
        let fd = w.file();
        let sql = format!(
            "SELECT COUNT(*) AS calls, SUM(count) AS bytes, MIN(count) AS lo, MAX(count) AS hi, \
             AVG(count) AS mean, VAR_SAMP(count) AS var, HIST(count) AS sizes \
             FROM tracepoint/syscalls/sys_enter_pread64 WHERE pid = {} WINDOW(time, 60000, 60000)",
            w.pid
        );
        let mut ex = Executor::with_options(ExecutorOptions {
            partial: Some(PartialOptions {
                host_id: Some(format!("h{i}")),
                query_id: Some("fleet".into()),
            }),
            ..Default::default()
        });
        let mut q = ex
            .execute(&sql)
            .unwrap_or_else(|e| panic!("{}", e.render()));
        let rx = q.take_receiver().unwrap();
        runs.push((w, fd, size, calls, q, rx));
    }
    for (w, fd, size, calls, _, _) in runs.iter_mut() {
        w.pread(*fd, *size, *calls);
    }
    let mut batches = Vec::new();
    for (_, _, _, _, q, rx) in runs {
        q.stop().unwrap_or_else(|e| panic!("{}", e.render()));
        batches.extend(rx.try_iter());
    }
    let all = datafusion::arrow::compute::concat_batches(&batches[0].schema(), &batches).unwrap();
    // The window rows say which hosts closed each window; one per host here.
    let window_rows = u64s(
        &filter_record_batch(
            &all,
            &datafusion::arrow::compute::not(
                &is_null(all.column_by_name("window_groups").unwrap()).unwrap(),
            )
            .unwrap(),
        )
        .unwrap(),
        "window_groups",
    );
    assert_eq!(
        window_rows,
        vec![1, 1, 1],
        "one window row per host, one group each"
    );
    filter_record_batch(
        &all,
        &is_null(all.column_by_name("window_groups").unwrap()).unwrap(),
    )
    .unwrap()
}

/// DataFusion's accumulator of `udaf` over an argument of type `arg`, fed
/// the state columns `parts` of `rows` with `merge_batch`, evaluated.
fn merged(
    udaf: Arc<AggregateUDF>,
    arg: DataType,
    rows: &RecordBatch,
    parts: &[&str],
) -> ScalarValue {
    let schema = Arc::new(Schema::new(vec![Field::new("x", arg, true)]));
    let expr = AggregateExprBuilder::new(udaf, vec![col("x", &schema).unwrap()])
        .schema(schema)
        .alias("merged")
        .build()
        .unwrap();
    let states: Vec<ArrayRef> = parts
        .iter()
        .map(|p| {
            rows.column_by_name(p)
                .unwrap_or_else(|| panic!("no state column {p} in {:?}", rows.schema()))
                .clone()
        })
        .collect();
    // The state fields DataFusion expects are the ones the rows carry, in order and type.
    let fields = expr.state_fields().unwrap();
    for (f, s) in fields.iter().zip(&states) {
        assert_eq!(
            f.data_type(),
            s.data_type(),
            "state {} of {}",
            f.name(),
            expr.name()
        );
    }
    assert_eq!(fields.len(), states.len());
    let mut acc = expr.create_accumulator().unwrap();
    acc.merge_batch(&states).unwrap();
    acc.evaluate().unwrap()
}

#[test]
fn datafusion_merges_three_hosts_partial_states_into_exact_values() {
    require_root();
    let _k = kernel_lock();
    let rows = three_hosts_partial_rows();
    assert_eq!(rows.num_rows(), 3, "one group row per host");
    let values: Vec<u64> = HOSTS
        .iter()
        .flat_map(|&(size, calls)| std::iter::repeat_n(size, calls as usize))
        .collect();
    let n = values.len() as f64;
    let total: u64 = values.iter().sum();
    let mean = total as f64 / n;
    let var = values
        .iter()
        .map(|&v| (v as f64 - mean).powi(2))
        .sum::<f64>()
        / (n - 1.0);
    use datafusion::functions_aggregate as fa;
    let u64_arg = DataType::UInt64;
    assert_eq!(
        merged(
            fa::count::count_udaf(),
            u64_arg.clone(),
            &rows,
            &["calls[count]"]
        ),
        ScalarValue::Int64(Some(values.len() as i64))
    );
    assert_eq!(
        merged(fa::sum::sum_udaf(), u64_arg.clone(), &rows, &["bytes[sum]"]),
        ScalarValue::UInt64(Some(total))
    );
    assert_eq!(
        merged(
            fa::min_max::min_udaf(),
            u64_arg.clone(),
            &rows,
            &["lo[min]"]
        ),
        ScalarValue::UInt64(Some(100))
    );
    assert_eq!(
        merged(
            fa::min_max::max_udaf(),
            u64_arg.clone(),
            &rows,
            &["hi[max]"]
        ),
        ScalarValue::UInt64(Some(4096))
    );
    assert_eq!(
        merged(
            fa::average::avg_udaf(),
            DataType::Float64,
            &rows,
            &["mean[count]", "mean[sum]"]
        ),
        ScalarValue::Float64(Some(mean))
    );
    let ScalarValue::Float64(Some(v)) = merged(
        fa::variance::var_samp_udaf(),
        DataType::Float64,
        &rows,
        &["var[count]", "var[mean]", "var[m2]"],
    ) else {
        panic!("VAR_SAMP merged to NULL");
    };
    assert!((v - var).abs() <= 1e-9 * var, "VAR_SAMP {v}, exact {var}");
    // HIST: eBQL's own user-space accumulator (the oracle's) merges the counters.
    let ctx = datafusion::prelude::SessionContext::new();
    ebql_compiler::udaf::register(&ctx);
    let hist = merged(
        ctx.udaf("hist").unwrap(),
        u64_arg,
        &rows,
        &["sizes[counts]"],
    );
    let ScalarValue::List(list) = hist else {
        panic!("HIST merged to {hist:?}")
    };
    let buckets = list.value(0);
    let counts: Vec<u64> = {
        let s = buckets.as_struct();
        let c = concat(&[s.column_by_name("count").unwrap().as_ref()]).unwrap();
        c.as_primitive::<datafusion::arrow::datatypes::UInt64Type>()
            .values()
            .to_vec()
    };
    // 100 in [64, 127], 512 in [512, 1023], 4096 in [4096, 8191].
    assert_eq!(counts, vec![60, 40, 25]);
    assert_eq!(buckets.len(), 3);
}
