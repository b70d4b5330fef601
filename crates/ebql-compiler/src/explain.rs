//! `ebql explain`: the optimized logical plan, the kernel/user split and the
//! generated BPF, each instruction range annotated with the plan node it came from.

use crate::pipeline::CompiledQuery;
use crate::prepass::WindowSpec;
use crate::split::KernelOutput;
use std::fmt::Write;

/// An event's table name as `explain` shows it.
fn shown(e: &ebql_catalog::EventName) -> String {
    match e.kind {
        ebql_catalog::EventKind::Tracepoint => format!("tracepoint/{}/{}", e.category, e.name),
        _ => e.to_string(),
    }
}

/// For uprobes and USDT probes pinned to one process: the line saying so.
fn attach_scope(p: &crate::codegen::ProgramSpec) -> Option<String> {
    let pid = p.pid?;
    matches!(p.attach, ebql_catalog::Attach::Uprobe { .. })
        .then(|| format!("attached to process {pid} only (perf_event pid, from `pid = {pid}`): other processes running the binary never trap"))
}

/// Renders the explanation of a compiled query.
pub fn explain(q: &CompiledQuery) -> String {
    let mut out = String::new();
    let k = &q.split.kernel;
    let _ = writeln!(
        out,
        "== Logical plan (DataFusion, optimized) ==\n{}\n",
        q.planned.plan.display_indent()
    );
    if let Some(p) = &k.pair {
        let _ = writeln!(
            out,
            "== Kernel: pairing start program on {} ==",
            shown(&p.start.event)
        );
        if let Some(line) = q.code.programs.first().and_then(attach_scope) {
            let _ = writeln!(out, "{line}");
        }
        if p.start_filters.is_empty() {
            let _ = writeln!(out, "filters: none (every event)");
        }
        for (f, text) in &p.start_filters {
            let _ = writeln!(out, "filter (cost class {}): {text}", f.cost_class());
        }
        // Strings with the bytes they take (a `_str` helper's buffer plus the truncation byte).
        let stored: Vec<String> = p
            .stored
            .iter()
            .map(|(_, n)| n.clone())
            .chain(
                p.stored_strs
                    .iter()
                    .map(|(s, n)| format!("{n}: {} B", s.record_bytes())),
            )
            .collect();
        let start_map = q.code.maps.get(crate::codegen::MAP_PAIR);
        if start_map.is_some_and(|m| m.kind == crate::contract::MapKind::TaskStorage) {
            let _ = writeln!(
                out,
                "start map: task-local storage of the thread [{}] (BPF_MAP_TYPE_TASK_STORAGE), value [valid, {}] ({} B): one slot per thread, created at its first start, freed with the thread; never full",
                p.key_text.join(", "),
                stored.join(", "),
                p.task_value_size()
            );
            let _ = writeln!(out, "pairing: an end pairs with the latest unmatched start of its thread and clears it; counted, never rows: starts overwritten by a newer start, ends without a start, starts whose slot could not be allocated, starts left at stop (a per-CPU count of valid slots: user space cannot list task storage)");
        } else {
            let _ = writeln!(
                out,
                "start map: hash keyed by [{}] ({} B), value [{}] ({} B), {} entries",
                p.key_text.join(", "),
                p.key_size(),
                stored.join(", "),
                p.value_size(),
                start_map.map_or(0, |m| m.max_entries)
            );
            if p.keyed_by_thread_only() {
                let _ = writeln!(out, "  (task-local storage would hold it, but this kernel lacks BPF_MAP_TYPE_TASK_STORAGE or kernel BTF: the hash is the fallback)");
            }
            if p.outer {
                let _ = writeln!(out, "pairing (LEFT JOIN): an end pairs with the latest unmatched start of its key and deletes it; every start is a row: an unmatched one (end columns NULL) is written by the start program when a newer start of its key replaces it, and by user space for the starts left in this hash at stop (task storage cannot be listed); counted, never rows: ends without a start, starts the full map refused");
            } else {
                let _ = writeln!(out, "pairing: an end pairs with the latest unmatched start of its key and deletes it; counted, never rows: starts overwritten by a newer start, ends without a start, starts the full map refused, starts left at stop");
            }
        }
        if p.by_thread {
            let _ = writeln!(
                out,
                "key is the thread: pid/tid filters run first in both programs"
            );
        }
        for (f, text) in &p.end_pre {
            let _ = writeln!(
                out,
                "end program, before the lookup (cost class {}): {text}",
                f.cost_class()
            );
        }
    }
    let _ = writeln!(
        out,
        "== Kernel: BPF program on {} ==",
        shown(&k.event.event)
    );
    if let Some(line) = attach_scope(q.code.main()) {
        let _ = writeln!(out, "{line}");
    }
    if let Some(w) = &k.window {
        let _ = writeln!(out, "window: {w:?}");
        if let Some(scheme) = pane_scheme(q) {
            let _ = writeln!(out, "{scheme}");
        }
    }
    if k.filters.is_empty() {
        let _ = writeln!(out, "filters: none (every event)");
    }
    for (p, text) in &k.filters {
        let _ = writeln!(out, "filter (cost class {}): {text}", p.cost_class());
    }
    for b in &k.branches {
        let into = match &b.output {
            KernelOutput::Groups(_) => "the same group table",
            KernelOutput::Stream { .. } => "the same stream",
        };
        let _ = writeln!(
            out,
            "== Kernel: BPF program on {} (also writes {into}, under the same windows) ==",
            shown(&b.event.event),
        );
        if b.filters.is_empty() {
            let _ = writeln!(out, "filters: none (every event)");
        }
        for (p, text) in &b.filters {
            let _ = writeln!(out, "filter (cost class {}): {text}", p.cost_class());
        }
    }
    match &k.output {
        KernelOutput::Stream { columns, latest } => {
            let names: Vec<&str> = columns.iter().map(|c| c.0.as_str()).collect();
            match latest {
                Some(keys) => {
                    let keys: Vec<&str> = keys.iter().map(|k| k.text.as_str()).collect();
                    let _ = writeln!(
                        out,
                        "output: the latest record per window and key ({}) with [{}], overwritten per event in a per-CPU hash (DISTINCT ON: one map lookup per event)",
                        keys.join(", "),
                        names.join(", ")
                    );
                }
                None => {
                    let _ = writeln!(
                        out,
                        "output: one ring-buffer record per event with [{}]",
                        names.join(", ")
                    );
                }
            }
        }
        KernelOutput::Groups(g) => {
            let keys: Vec<String> = g
                .keys
                .iter()
                .map(|k| {
                    if k.per_cpu {
                        format!("{} (per-CPU map slot)", k.text)
                    } else {
                        k.text.clone()
                    }
                })
                .collect();
            let _ = writeln!(
                out,
                "output: per-CPU group table keyed by [{}]",
                keys.join(", ")
            );
            if let Some(m) = q
                .code
                .maps
                .get(crate::contract::MAP_OUT)
                .filter(|m| m.kind == crate::contract::MapKind::PercpuHashPrealloc)
            {
                let _ = writeln!(
                    out,
                    "  {} bytes per group per CPU: table preallocated with {} entries ({} MiB per CPU; larger values cannot be allocated by the probe)",
                    m.value_size,
                    m.max_entries,
                    (m.value_size as u64 * m.max_entries as u64) >> 20
                );
            }
            for (i, s) in g.slots.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "  slot {i} at byte {} ({} bytes): {}",
                    g.slot_offset(i),
                    s.state.bytes(),
                    s.state.synopsis().describe()
                );
            }
            for (f, _, text) in &g.aggs {
                let _ = writeln!(out, "  {text}: {}", f.describe());
            }
            if let crate::contract::OutputLayout::Groups {
                distinct_set: Some(i),
                ..
            } = &q.code.layout
            {
                let m = &q.code.maps[*i];
                let _ = writeln!(
                    out,
                    "  distinct set {}: +1 map insert per event; {} B key (window, group, value) per distinct value per group (+ the kernel's element header); holds {} values (two windows while draining; --max-distinct per window); full = counted drop",
                    m.name, m.key_size, m.max_entries
                );
            }
        }
    }
    out.push_str(&choices(q));
    let _ = writeln!(out, "\n== User space (DataFusion, per window) ==");
    if q.split.user_ops.is_empty() {
        let _ = writeln!(out, "projection of the kernel's rows only");
    }
    for op in &q.split.user_ops {
        let _ = writeln!(out, "{op}");
    }
    let _ = writeln!(out, "{}", q.split.remainder.display_indent());
    let c = &q.code;
    for (i, p) in c.programs.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let _ = writeln!(
            out,
            "== BPF: program {} ({} instructions, {} stack bytes) ==",
            p.name,
            p.program.insns.len(),
            p.stack_bytes
        );
        if c.programs.len() > 1 {
            let _ = writeln!(out, "attached to {}", shown(&p.event));
        }
        if p.sleepable {
            let _ = writeln!(
                out,
                "sleepable: faults the user strings it reads in first, then runs in an RCU read-side section"
            );
        }
        if i == 0 {
            for m in &c.maps {
                let _ = writeln!(
                    out,
                    "map {}: {:?} key {} B, value {} B, {} entries",
                    m.name, m.kind, m.key_size, m.value_size, m.max_entries
                );
            }
        }
        out.push_str(&p.program.listing());
    }
    out
}

/// How a hopping window is built from panes (`None` unless step < size):
/// the kernel's flip period, what user space keeps per pane and its bound.
fn pane_scheme(q: &CompiledQuery) -> Option<String> {
    let Some(w @ WindowSpec::Time { size_ns, step_ns }) = q.split.kernel.window else {
        return None;
    };
    let panes = w.panes();
    if panes < 2 {
        return None;
    }
    let ms = |ns: u64| ns as f64 / 1e6;
    let kept = match &q.split.kernel.output {
        KernelOutput::Groups(g) => {
            let entries = q.code.maps.get(crate::contract::MAP_OUT).map_or(0, |m| m.max_entries as u64);
            let bytes = g.value_size() as u64;
            let key = match &q.code.layout {
                crate::contract::OutputLayout::Groups { key_size, .. } => *key_size as u64,
                crate::contract::OutputLayout::Stream { .. } => 0,
            };
            format!(
                "  user space keeps the last {panes} panes: per group, its key and its value merged over CPUs ({key} + {bytes} bytes; at most {entries} groups per pane, {} KiB in all)\n  every step: the {panes} panes' values merged per group with each aggregate's merge, then evaluated",
                (bytes + key) * entries * panes / 1024
            )
        }
        KernelOutput::Stream { .. } => format!("  user space keeps the last {panes} panes' rows\n  every step: the user-space plan runs over the rows of the {panes} panes"),
    };
    Some(format!(
        "panes: a {} ms window every {} ms = {panes} panes of one step; the kernel flips its generation every pane; every event is in exactly {panes} windows\n{kept}\n  the first {} windows after the start are partial (batch metadata ebql.window_panes = k/{panes})",
        ms(size_ns),
        ms(step_ns),
        panes - 1
    ))
}

/// `ebql explain`'s "Cost" section: the predicted cost of the generated
/// programs ([`crate::cost::predict`]), where it goes, the rates it assumed,
/// the cost put on untraced work, and the alternatives the planner weighed
/// (each with its own prediction; empty when it weighed none).
pub fn cost_section(
    model: &crate::cost::CostModel,
    p: &crate::cost::Prediction,
    rates: &crate::cost::Rates,
    alternatives: &[crate::cost::Alternative],
) -> String {
    let mut out = String::new();
    let ns = |v: Option<f64>| v.map_or("unknown".to_string(), |v| format!("{v:.0} ns"));
    let _ = writeln!(out, "== Cost (predicted; model: {}) ==", model.source);
    for (i, prog) in p.programs.iter().enumerate() {
        let how = if model.is_measured(&format!("hook:{:?}", prog.hook)) {
            "measured here"
        } else {
            "default"
        };
        let _ = writeln!(
            out,
            "program {} on {} ({}): hook entry {} per event at the hook ({how})",
            prog.name,
            prog.event,
            prog.hook.label(),
            ns(prog.hook_ns)
        );
        if prog.filtered {
            let _ = writeln!(
                out,
                "  event its filters reject: {:.0} ns in the program",
                prog.unmatched_ns
            );
            for item in &prog.unmatched_breakdown {
                let _ = writeln!(out, "    {:>7.1} ns  {}", item.ns, item.what);
            }
        }
        let _ = writeln!(
            out,
            "  {}: {:.0} ns in the program",
            if prog.filtered {
                "event that passes the filters"
            } else {
                "every event (no filter)"
            },
            prog.matched_ns
        );
        for item in &prog.matched_breakdown {
            let _ = writeln!(out, "    {:>7.1} ns  {}", item.ns, item.what);
        }
        if let Some(r) = rates.events_per_s.get(i).copied().flatten() {
            let share = rates
                .matched_fraction
                .get(i)
                .copied()
                .flatten()
                .map(|f| format!(", {:.1}% pass the filters", 100.0 * f))
                .unwrap_or_default();
            let _ = writeln!(out, "  rate: {} events/s at the hook{share}", per_s(r));
        }
    }
    let pair = if p.programs.len() > 1 {
        " (start + end)"
    } else {
        ""
    };
    let _ = writeln!(
        out,
        "per matched event{pair}: {} added; per event the query does not select: {}",
        ns(p.ns_per_matched_event),
        ns(p.ns_per_unmatched_event)
    );
    let assumed = match (
        rates.matched_fraction.last().copied().flatten(),
        rates.source.is_empty(),
    ) {
        (Some(_), _) => "",
        (None, true) => " (every event counted as matched: rates not sampled)",
        (None, false) => " (every event counted as matched: no event seen while sampling)",
    };
    let _ = writeln!(
        out,
        "mean per event at the hook: {}{assumed}",
        ns(p.ns_per_event_at_hook)
    );
    let _ = writeln!(
        out,
        "bpf_stats would report ≈ {:.0} ns per run (program {:.0} ns + bpf_stats' own {:.0} ns)",
        p.bpf_stats_ns_per_run,
        p.bpf_stats_ns_per_run - model.stats_overhead_ns,
        model.stats_overhead_ns
    );
    if !rates.source.is_empty() {
        let sys = rates
            .syscalls_per_s
            .map(|s| format!("; {} system calls/s on the machine", per_s(s)))
            .unwrap_or_default();
        let _ = writeln!(out, "rates: {}{sys}", rates.source);
    }
    match p.ns_on_untraced_work_per_s {
        Some(v) => {
            let _ = writeln!(out, "cost on untraced work: {:.2} ms of CPU per second (events the query does not select{})", v / 1e6, if p.programs.iter().any(|x| x.syscall_tracepoint) { format!(", and every other system call × {:.0} ns: the syscall slow path", model.untraced_syscall_ns) } else { String::new() });
        }
        None => {
            let _ = writeln!(out, "cost on untraced work: {} per event not selected (rates not sampled: `ebql explain --rates`)", ns(p.ns_per_unmatched_event));
        }
    }
    if let Some(k) = p.kernel_cpu_per_s {
        let _ = writeln!(
            out,
            "kernel CPU of the probes: {:.2} ms per second",
            k / 1e6
        );
    }
    match p.user_cpu_per_s {
        Some(u) => {
            let _ = writeln!(
                out,
                "user space (ebql): {:.2} ms of CPU per second, + {:.1} ms per query",
                u / 1e6,
                p.user_fixed_ns / 1e6
            );
        }
        None => {
            let _ = writeln!(out, "user space (ebql): rate unknown");
        }
    }
    for item in &p.user_breakdown {
        let _ = writeln!(out, "    {:>9.0} ns/s  {}", item.ns, item.what);
    }
    if !alternatives.is_empty() {
        let _ = writeln!(out, "alternatives considered:");
        for a in alternatives {
            let untraced = a
                .prediction
                .ns_on_untraced_work_per_s
                .map(|v| format!(", {:.2} ms/s on untraced work", v / 1e6))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "  {} {}: {} per matched event, {} per event not selected{untraced}{}",
                if a.chosen { "*" } else { "-" },
                a.what,
                ns(a.prediction.ns_per_matched_event),
                ns(a.prediction.ns_per_unmatched_event),
                a.why
                    .as_ref()
                    .map(|w| format!(" ({w})"))
                    .unwrap_or_default()
            );
        }
    }
    out
}

/// A rate for people: `1.23 M`, `45.6 k`, `789`.
fn per_s(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2} M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1} k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// `== Planning choices ==`: the hook of the query's syscall tracepoints,
/// the group table's kind, where the aggregate runs and the filter order, each with what it costs,
/// why it was chosen and the alternative (empty when nothing was chosen).
fn choices(q: &CompiledQuery) -> String {
    let mut out = String::new();
    let k = &q.split.kernel;
    if let Some(h) = &q.physical.hook {
        let d = &h.decision;
        let (chosen, other) = d.costs();
        let per_sec = |c: crate::choose::HookCost| {
            c.per_sec_ns
                .map(|ns| {
                    if ns >= 1e6 {
                        format!("{:.1} ms", ns / 1e6)
                    } else {
                        format!("{:.1} µs", ns / 1e3)
                    }
                })
                .map(|t| format!(", {t} of CPU per second at the sampled rates"))
                .unwrap_or_default()
        };
        let _ = writeln!(out, "hook: {} ({})", d.chosen.name(), d.why);
        for e in &h.events {
            let nr = e.nr.map_or("no syscall number known".to_string(), |n| {
                format!("__NR {n}")
            });
            match (&e.raw, &e.note) {
                (Some(r), _) => {
                    let _ = writeln!(out, "  {} ({nr}) on {}: the program first tests id = {} and not a 32-bit call, then the query", shown(&e.event), shown(&r.program_event), r.nr);
                }
                (None, Some(why)) => {
                    let _ = writeln!(
                        out,
                        "  {} ({nr}) stays on its tracefs tracepoint: {why}",
                        shown(&e.event)
                    );
                }
                (None, None) => {
                    let _ = writeln!(
                        out,
                        "  {} ({nr}) on its tracefs tracepoint",
                        shown(&e.event)
                    );
                }
            }
        }
        let _ = writeln!(out, "  predicted: +{:.0} ns per traced call, +{:.0} ns per other system call of the machine{}", chosen.traced_ns, chosen.untraced_ns, per_sec(chosen));
        let alt = match d.chosen {
            crate::choose::Hook::Raw => "tracefs",
            crate::choose::Hook::Tracefs => "raw",
        };
        let _ = writeln!(
            out,
            "  alternative: {alt}: +{:.0} ns per traced call, +{:.0} ns per other system call{}",
            other.traced_ns,
            other.untraced_ns,
            per_sec(other)
        );
    }
    if let (Some(gm), KernelOutput::Groups(spec)) = (&q.code.group_map, &k.output) {
        match gm {
            crate::groupmap::GroupMap::Array(ix) => {
                let dims: Vec<String> = ix
                    .dims
                    .iter()
                    .map(|d| {
                        format!(
                            "{} in {}..={} ({}{})",
                            spec.keys[d.key].text,
                            d.lo,
                            d.lo + i64::from(d.count) - 1,
                            if d.partial { "dense range: " } else { "" },
                            d.why
                        )
                    })
                    .collect();
                let windows = if ix.windows == 2 {
                    " × 2 windows (generation parity)"
                } else {
                    ""
                };
                let slots = match ix.slots {
                    1 => "1 slot".to_string(),
                    n => format!("{n} slots"),
                };
                let index = if dims.is_empty() {
                    "its only group (no key but the per-CPU value)".to_string()
                } else {
                    format!("indexed by {}", dims.join(", "))
                };
                let _ = writeln!(out, "group table: per-CPU array of {slots}{windows}, {index}: one array lookup per event, no insert");
                if ix.overflow() {
                    let _ = writeln!(out, "  keys outside the dense range: a per-CPU overflow hash (a hashed lookup, an insert per new group)");
                }
                let _ = writeln!(out, "  alternative: per-CPU hash (a hashed lookup per event, an insert per new group)");
            }
            crate::groupmap::GroupMap::Hash { why } => {
                let _ = writeln!(out, "group table: per-CPU hash ({why})");
            }
        }
    }
    match (&q.physical.placement, &k.output) {
        (Some(d), _) => {
            let _ = writeln!(out, "aggregate: {} ({})", d.chosen.name(), d.why);
            for a in d.alternatives() {
                let mark = if a.chosen { "chosen" } else { "alternative" };
                let _ = writeln!(out, "  {mark}: {}: {}", a.what, a.why.unwrap_or_default());
            }
        }
        (None, KernelOutput::Groups(_)) => {
            let why = match q.planned.aggregate {
                crate::choose::AggregateChoice::Kernel => "asked for (--aggregate kernel)",
                _ => "not weighed without sampled rates: `ebql explain --rates` weighs it against user space",
            };
            let _ = writeln!(out, "aggregate: kernel ({why})");
        }
        (None, KernelOutput::Stream { .. })
            if q.planned.aggregate == crate::choose::AggregateChoice::User
                && q.split
                    .user_ops
                    .iter()
                    .any(|o| o.starts_with("Aggregate in user space: placed there")) =>
        {
            let _ = writeln!(out, "aggregate: user space (asked for (--aggregate user))");
        }
        _ => {}
    }
    let lists = [("", &k.filters)]
        .into_iter()
        .chain(k.pair.iter().flat_map(|p| {
            [
                ("start program: ", &p.start_filters),
                ("end program, before the lookup: ", &p.end_pre),
            ]
        }));
    for (which, filters) in lists.filter(|(_, f)| f.len() > 1) {
        let _ = writeln!(out, "{which}filter order: pid/tid tests first, then by cost class and estimated selectivity");
        for (i, (p, text)) in filters.iter().enumerate() {
            let e = crate::choose::estimate(p);
            let _ = writeln!(
                out,
                "  {}. {text}: class {}, selectivity ~{:.2}",
                i + 1,
                e.class,
                e.selectivity
            );
        }
    }
    sharing(q, &mut out);
    if out.is_empty() {
        return out;
    }
    format!("== Planning choices ==\n{out}")
}

/// Whether each program can join its hook's shared chain in `ebql serve`
/// ([`ebql_catalog::EventKind::shares_hook`]).
fn sharing(q: &CompiledQuery, out: &mut String) {
    for p in &q.code.programs {
        let how = if p.event.kind.shares_hook() && !p.sleepable {
            "in `ebql serve`, joins its hook's chain with the other queries on it (one program per hook, helper results read once per event)"
        } else {
            "attaches alone, also in `ebql serve` (its kind cannot share a hook)"
        };
        let scoped = match p.pid {
            Some(pid) if p.event.kind.shares_hook() && !p.sleepable => {
                format!("; pid {pid} tested once for all the chain's queries of that process")
            }
            _ => String::new(),
        };
        let _ = writeln!(out, "sharing: {} {how}{scoped}", shown(&p.event));
    }
    let kernel = &q.split.kernel;
    let groups = matches!(kernel.output, crate::split::KernelOutput::Groups(_));
    let time = matches!(kernel.window, Some(crate::prepass::WindowSpec::Time { .. }));
    if groups && time && q.wire.is_none() {
        let _ = writeln!(
            out,
            "sharing: in `ebql serve`, queries whose kernel part is this one (event, filter, keys, aggregates, window) read one group table"
        );
    }
}
