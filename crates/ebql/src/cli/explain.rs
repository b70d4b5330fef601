//! `ebql explain`: the plan, the kernel/user split, the generated BPF and
//! its predicted cost (with --rates, at the query's sampled rates).

use super::args::PlanArgs;
use super::common::Busy;
use ebql::{Error, Executor, ExecutorOptions};
use std::io::Write;
use std::time::Duration;

/// Prints `sql`'s plan and predicted cost, as the planning choices in `plan` make them.
pub(super) fn explain(rates: bool, plan: PlanArgs, sql: String) -> Result<(), Error> {
    let mut opts = ExecutorOptions::default();
    plan.apply(&mut opts);
    let mut ex = Executor::with_options(opts.clone());
    let sample = Duration::from_millis(150);
    let mut q = if rates {
        let _busy = Busy::start("sampling the query's event rates");
        ex.compile_with_rates(&sql, sample)?
    } else {
        ex.compile_for_explain(&sql)?
    };
    let missing: Vec<String> = q
        .code
        .programs
        .iter()
        .filter_map(|p| {
            ebql_runtime::features::missing(p.event.kind).map(|(_, why)| {
                format!(
                    "note: {} cannot run on this kernel: {why}; {}",
                    p.event,
                    p.event.kind.alternative()
                )
            })
        })
        .collect();
    let loaded = ebql::cost::load();
    if let Some(why) = &loaded.ignored {
        note!("ebql: cost model: ignored {why}");
    }
    let cpus = ebql_runtime::num_possible_cpus().unwrap_or(1);
    let rates = match q.physical.rates.take() {
        Some(r) => r,
        // A query whose aggregate's place is not weighed is sampled for its cost alone.
        None if rates && missing.is_empty() => {
            let _busy = Busy::start("sampling the query's event rates");
            ebql::cost::rates::sample(&sql, &q, &opts, sample)?
        }
        None => ebql_compiler::cost::Rates::unknown(cpus),
    };
    print!("{}", ebql_compiler::explain::explain(&q));
    for m in &missing {
        println!("{m}");
    }
    let alternatives = q
        .physical
        .placement
        .as_ref()
        .map(|d| d.alternatives())
        .unwrap_or_default();
    let prediction = match alternatives.iter().find(|a| a.chosen) {
        Some(a) => a.prediction.clone(),
        None => ebql_compiler::cost::predict(&loaded.model, &q, &rates),
    };
    print!(
        "\n{}",
        ebql_compiler::explain::cost_section(&loaded.model, &prediction, &rates, &alternatives)
    );
    Ok(())
}
