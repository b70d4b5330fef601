//! Where a query's aggregate runs when both sides can run it: the kernel's
//! group table (one map update per event, the table drained every window)
//! or user space (one ring-buffer record per event, DataFusion aggregating
//! each window's rows). The kernel is cheaper per event; user space wins
//! for rare events with many keys, whose per-window drain costs more than
//! the rows themselves, and when the groups would overflow the table.
//! The rule is [`crate::cost::choose_placement`]; [`weigh`] prices both
//! compiled plans at the query's sampled rates.

use crate::choose::{AggregateChoice, Optimize, Placement};
use crate::contract::OutputLayout;
use crate::cost::{choose_placement, predict, CostModel, Rates};
use crate::pipeline::CompiledQuery;

/// Whether the aggregate's place in `c` is weighed: `aggregate` is
/// [`AggregateChoice::Auto`] and the kernel runs an aggregate in `c` (the
/// alternative streams its rows).
pub fn weighed(c: &CompiledQuery, aggregate: AggregateChoice) -> bool {
    // A union's programs share their group table: not weighed (yet).
    aggregate == AggregateChoice::Auto
        && matches!(c.code.layout, OutputLayout::Groups { .. })
        && c.split.kernel.branches.is_empty()
}

/// Weighs `kernel` (the plan with the aggregate in the kernel, whose
/// sample gave `rates`) against `user` (the same query with
/// [`AggregateChoice::User`]) and returns the chosen plan with its
/// [`crate::physical::PhysicalPlan::placement`] set.
pub fn weigh(
    model: &CostModel,
    optimize: Optimize,
    max_groups: u32,
    kernel: CompiledQuery,
    user: CompiledQuery,
    rates: &Rates,
) -> CompiledQuery {
    let k = predict(model, &kernel, rates);
    // The user plan streams every matched event; groups do not matter to it.
    let u = predict(
        model,
        &user,
        &Rates {
            groups_per_window: None,
            ..rates.clone()
        },
    );
    let decision = choose_placement(
        optimize,
        k,
        u,
        matched_per_s(rates),
        rates.groups_per_window,
        max_groups,
    );
    let mut chosen = match decision.chosen {
        Placement::Kernel => kernel,
        Placement::User => user,
    };
    chosen.physical.placement = Some(decision);
    chosen
}

/// Matched events per second of the output program, if sampled (0 when
/// its hook saw events but none passed the filters).
fn matched_per_s(rates: &Rates) -> Option<f64> {
    let r = rates.events_per_s.last().copied().flatten()?;
    Some(
        r * rates
            .matched_fraction
            .last()
            .copied()
            .flatten()
            .unwrap_or(0.0),
    )
}
