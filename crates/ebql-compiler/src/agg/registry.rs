//! The aggregates with a kernel implementation, and the lookup of a call's.
//! Adding an aggregate: its file under `agg/` and one line in [`AGGREGATES`].

use super::function::{Aggregate, Call, Func};
use super::synopsis::Slot;
use super::{count, distinct, hist, hll, min_max, moments, quantile, sum, topk};

/// Every aggregate with a kernel implementation. A call resolves to the
/// first entry serving its name and its DISTINCT-ness.
pub static AGGREGATES: &[&dyn Aggregate] = &[
    &count::CountFn,
    &distinct::CountDistinctFn,
    &sum::SumFn,
    &min_max::MinMaxFn,
    &moments::MomentsFn,
    &hll::ApproxDistinctFn,
    &hist::HistFn,
    &hist::LhistFn,
    &quantile::QuantileFn,
    &topk::ApproxTopKFn,
];

/// The aggregate serving a call of `name` (lower case), DISTINCT or not.
pub fn lookup(name: &str, distinct: bool) -> Option<&'static dyn Aggregate> {
    AGGREGATES
        .iter()
        .copied()
        .find(|a| a.distinct() == distinct && a.names().contains(&name))
}

/// Resolves an aggregate call to its output function, adding the states it
/// needs through `slot` (which deduplicates: SUM(x) and AVG(x) share one).
/// `Err` says why the call has no kernel implementation (it then runs in user space).
pub fn resolve(call: &mut dyn Call, slot: &mut dyn FnMut(Slot) -> usize) -> Result<Func, String> {
    let name = call.name().to_string();
    let distinct = call.distinct();
    match lookup(&name, distinct) {
        Some(a) => a.resolve(&name, call, slot),
        None if distinct => {
            let served: Vec<String> = AGGREGATES
                .iter()
                .filter(|a| a.distinct())
                .flat_map(|a| a.names())
                .map(|n| format!("{}(DISTINCT x)", n.to_uppercase()))
                .collect();
            Err(format!(
                "{name}(DISTINCT …) has no kernel implementation ({} does)",
                served.join(", ")
            ))
        }
        None => Err(format!("aggregate `{name}` has no kernel implementation")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn each_name_has_one_aggregate() {
        let mut seen = HashSet::new();
        for a in AGGREGATES {
            for n in a.names() {
                assert_eq!(*n, n.to_lowercase(), "names are lower case");
                assert!(seen.insert((*n, a.distinct())), "{n} registered twice");
                assert!(lookup(n, a.distinct()).is_some());
            }
            assert!(!a.doc().is_empty());
        }
        assert!(lookup("count", true).is_some() && lookup("sum", true).is_none());
    }
}
