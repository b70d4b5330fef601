//! Where the aggregate runs, as decided and shown by `explain`
//! ([`PlacementDecision`]), and CPU per second as text.

use crate::choose::Placement;
use crate::cost::model::{Alternative, Prediction};

/// Where the query's aggregate runs, with the two predictions compared
/// ([`choose_placement`]).
#[derive(Clone, Debug)]
pub struct PlacementDecision {
    /// Where it runs.
    pub chosen: Placement,
    /// Why, for `explain`.
    pub why: String,
    /// The plan with the aggregate in the kernel (group table).
    pub kernel: Prediction,
    /// The plan with the aggregate in user space (rows streamed).
    pub user: Prediction,
}

impl PlacementDecision {
    /// Both plans as `explain`'s alternatives, the chosen one marked.
    pub fn alternatives(&self) -> Vec<Alternative> {
        [
            (
                Placement::Kernel,
                &self.kernel,
                "aggregate in the kernel (group table, drained per window)",
            ),
            (
                Placement::User,
                &self.user,
                "aggregate in user space (rows streamed through the ring buffer)",
            ),
        ]
        .into_iter()
        .map(|(p, pred, what)| Alternative {
            what: what.into(),
            chosen: p == self.chosen,
            prediction: pred.clone(),
            why: Some(format!("{} of CPU per second", per_s_text(total_cpu(pred)))),
        })
        .collect()
    }
}

/// Kernel + user-space CPU per second of a prediction, when both are known.
pub fn total_cpu(p: &Prediction) -> Option<f64> {
    Some(p.kernel_cpu_per_s? + p.user_cpu_per_s?)
}

pub(super) fn per_s_text(ns: Option<f64>) -> String {
    match ns {
        Some(v) if v >= 1e6 => format!("{:.2} ms", v / 1e6),
        Some(v) => format!("{:.1} µs", v / 1e3),
        None => "unknown".into(),
    }
}
