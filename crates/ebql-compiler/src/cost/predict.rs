//! A whole query's cost at given rates ([`predict`]), and the choice of
//! where its aggregate runs ([`choose_placement`]).

use crate::choose::{Optimize, Placement};
use crate::contract::OutputLayout;
use crate::cost::model::*;
use crate::cost::placement::{per_s_text, total_cpu, PlacementDecision};
use crate::cost::profile::*;
use crate::pipeline::CompiledQuery;
use crate::prepass::WindowSpec;

/// Predicts what `q` costs given its events' `rates`.
pub fn predict(model: &CostModel, q: &CompiledQuery, rates: &Rates) -> Prediction {
    let code = &q.code;
    let programs: Vec<ProgramCost> = code
        .programs
        .iter()
        .map(|p| profile_program(model, p, &code.maps))
        .collect();
    let main = programs.last().expect("a compiled query has a program");
    let last = programs.len() - 1;
    let fraction = |i: usize| rates.matched_fraction.get(i).copied().flatten();
    let rate = |i: usize| rates.events_per_s.get(i).copied().flatten();
    let main_fraction = if main.filtered {
        fraction(last).unwrap_or(1.0)
    } else {
        1.0
    };
    let ns_per_event_at_hook = main.hook_ns.map(|h| h + main.body_at(main_fraction));
    let ns_per_matched_event = programs
        .iter()
        .map(|p| p.hook_ns.map(|h| h + p.matched_ns))
        .sum::<Option<f64>>();
    let ns_per_unmatched_event = main.hook_ns.map(|h| h + main.unmatched_ns);

    // Kernel CPU and the share of it that falls on untraced work.
    let mut kernel = Some(0.0);
    let mut untraced = Some(0.0);
    for (i, p) in programs.iter().enumerate() {
        let (r, f) = (rate(i), if p.filtered { fraction(i) } else { Some(1.0) });
        let per_event = p.hook_ns.map(|h| h + p.body_at(f.unwrap_or(1.0)));
        kernel = match (kernel, r, per_event) {
            (Some(k), Some(0.0), _) => Some(k),
            (Some(k), Some(r), Some(e)) => Some(k + r * e),
            _ => None,
        };
        untraced = match (untraced, r, f, p.hook_ns) {
            // No event at this hook: nothing to reject.
            (Some(u), Some(0.0), _, _) => Some(u),
            (Some(u), Some(r), Some(f), Some(h)) => Some(u + r * (1.0 - f) * (h + p.unmatched_ns)),
            _ => None,
        };
    }
    // Syscall tracepoints: every other system call of the machine takes the slow path.
    if code.programs.iter().any(is_syscall_tracepoint) {
        untraced = match (untraced, rates.syscalls_per_s) {
            (Some(u), Some(all)) => {
                let traced: f64 = code
                    .programs
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| is_syscall_tracepoint(p))
                    .filter_map(|(k, _)| rate(k))
                    .sum();
                // An enter and an exit program see the same calls.
                let distinct = if code.programs.len() > 1 {
                    traced / 2.0
                } else {
                    traced
                };
                Some(u + (all - distinct).max(0.0) * model.untraced_syscall_ns)
            }
            _ => None,
        };
    }

    let (user_cpu_per_s, user_breakdown) =
        user_cost(model, q, rates, rate(last).map(|r| r * main_fraction));
    Prediction {
        bpf_stats_ns_per_run: main.body_at(main_fraction) + model.stats_overhead_ns,
        programs,
        ns_per_event_at_hook,
        ns_per_matched_event,
        ns_per_unmatched_event,
        ns_on_untraced_work_per_s: untraced,
        kernel_cpu_per_s: kernel,
        user_cpu_per_s,
        user_fixed_ns: model.user_query_ns,
        user_breakdown,
    }
}

/// User-space CPU per second: rows for streams, windows × groups × CPUs for group tables.
fn user_cost(
    model: &CostModel,
    q: &CompiledQuery,
    rates: &Rates,
    matched_per_s: Option<f64>,
) -> (Option<f64>, Vec<CostItem>) {
    let idle = CostItem {
        what: "polling (10 ms period)".into(),
        ns: model.user_idle_ns_per_s,
    };
    let (rest, items) = user_work(model, q, rates, matched_per_s);
    (
        rest.map(|r| r + idle.ns),
        std::iter::once(idle).chain(items).collect(),
    )
}

/// User-space CPU per second that depends on the events.
fn user_work(
    model: &CostModel,
    q: &CompiledQuery,
    rates: &Rates,
    matched_per_s: Option<f64>,
) -> (Option<f64>, Vec<CostItem>) {
    let windows_per_s = match q.split.kernel.window {
        Some(WindowSpec::Time { step_ns, .. }) => Some(1e9 / step_ns.max(1) as f64),
        Some(WindowSpec::Count { step, .. }) => matched_per_s.map(|r| r / step.max(1) as f64),
        // Drained once, at the stop.
        None => Some(0.0),
    };
    let window_item = |w: f64| CostItem {
        what: format!(
            "{w:.1} windows/s × {:.0} µs per window",
            model.user_window_ns / 1e3
        ),
        ns: w * model.user_window_ns,
    };
    match &q.code.layout {
        OutputLayout::Stream { .. } => {
            // Rows DataFusion aggregates cost more than rows it passes on.
            let (row_ns, what) = if aggregates_in_user_space(q) {
                (model.user_agg_row_ns, "aggregated row")
            } else {
                (model.user_row_ns, "row")
            };
            let windowed = q.split.kernel.window.is_some();
            match (matched_per_s, windows_per_s) {
                (Some(r), Some(w)) => {
                    let mut items = vec![CostItem {
                        what: format!("{r:.0} rows/s × {row_ns:.0} ns per {what}"),
                        ns: r * row_ns,
                    }];
                    if windowed {
                        items.push(window_item(w));
                    }
                    (Some(items.iter().map(|i| i.ns).sum()), items)
                }
                _ => (
                    None,
                    vec![CostItem {
                        what: format!("per streamed {what} (rate unknown)"),
                        ns: row_ns,
                    }],
                ),
            }
        }
        OutputLayout::Groups { .. } => {
            let groups = rates.groups_per_window.unwrap_or(1.0);
            let cpus = rates.cpus.max(1) as f64;
            let per_window = model.user_window_ns + groups * cpus * model.user_merge_ns;
            match windows_per_s {
                Some(w) => (
                    Some(w * per_window),
                    vec![
                        window_item(w),
                        CostItem {
                            what: format!("{w:.1} windows/s × {groups:.0} group(s){} × {cpus:.0} CPUs × {:.0} ns per merged value", if rates.groups_per_window.is_some() { "" } else { " (assumed)" }, model.user_merge_ns),
                            ns: w * groups * cpus * model.user_merge_ns,
                        },
                    ],
                ),
                None => (None, vec![CostItem { what: "per window (count-window rate unknown)".into(), ns: per_window }]),
            }
        }
    }
}

/// Whether the user-space remainder of `q` aggregates.
fn aggregates_in_user_space(q: &CompiledQuery) -> bool {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    let mut found = false;
    let _ = q.split.remainder.apply(|n| {
        found |= matches!(n, datafusion::logical_expr::LogicalPlan::Aggregate(_));
        Ok(if found {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    });
    found
}

/// Chooses where an aggregate that both sides can run goes, from the
/// predictions of the two plans at the same sampled rates (`kernel` priced
/// with `groups_per_window`, the estimate of groups a window holds;
/// `matched_per_s`: events per second that pass the filters, `None` when
/// not sampled).
///
/// Rule: with no event seen while sampling, the kernel (nothing to weigh;
/// the kernel costs the least per event). When the estimated groups exceed
/// the group table's `max_groups`, user space: the kernel would drop groups,
/// user space aggregates every row exactly. [`Optimize::Traced`]: the lower
/// cost per matched event in the probe. Otherwise ([`Optimize::Total`],
/// [`Optimize::Host`]: the untraced share is the same for both plans, whose
/// filters and hooks are the same): user space when its kernel + user CPU
/// per second is below the kernel plan's (ties keep the kernel, whose group
/// table bounds what crosses to user space should the rate rise).
pub fn choose_placement(
    optimize: Optimize,
    kernel: Prediction,
    user: Prediction,
    matched_per_s: Option<f64>,
    groups_per_window: Option<f64>,
    max_groups: u32,
) -> PlacementDecision {
    let (chosen, why) = match (matched_per_s, groups_per_window) {
        (None, _) => (Placement::Kernel, "no event rate sampled: the kernel costs the least per event".to_string()),
        (Some(0.0), _) => (Placement::Kernel, "no event matched while sampling: the kernel costs the least per event".to_string()),
        (_, Some(g)) if g > f64::from(max_groups) => {
            (Placement::User, format!("≈{g:.0} groups per window would overflow the group table (--max-groups {max_groups}); user space aggregates every row exactly"))
        }
        _ if optimize == Optimize::Traced => match (kernel.ns_per_matched_event, user.ns_per_matched_event) {
            (Some(k), Some(u)) if u < k => (Placement::User, format!("--optimize traced: a ring-buffer record costs the traced event {u:.0} ns, the group-table update {k:.0} ns")),
            (Some(k), Some(u)) => (Placement::Kernel, format!("--optimize traced: the group-table update costs the traced event {k:.0} ns, a ring-buffer record {u:.0} ns")),
            _ => (Placement::Kernel, "--optimize traced: the hook's cost is unknown; the kernel".to_string()),
        },
        _ => {
            let groups = groups_per_window.map_or("1 group per window (assumed)".to_string(), |g| format!("≈{g:.0} group(s) per window"));
            match (total_cpu(&kernel), total_cpu(&user)) {
                (Some(k), Some(u)) if u < k => {
                    (Placement::User, format!("least CPU in all at the sampled rates, {groups}: user space {}/s, kernel {}/s", per_s_text(Some(u)), per_s_text(Some(k))))
                }
                (Some(k), Some(u)) => (Placement::Kernel, format!("least CPU in all at the sampled rates, {groups}: kernel {}/s, user space {}/s", per_s_text(Some(k)), per_s_text(Some(u)))),
                _ => (Placement::Kernel, "a cost is unknown (hook not measured, or count-window rate unknown): the kernel".to_string()),
            }
        }
    };
    PlacementDecision {
        chosen,
        why,
        kernel,
        user,
    }
}
