//! `ebql explain`: the optimized logical plan, the kernel/user split and the
//! generated BPF, each instruction range annotated with the plan node it came from.

use crate::prepass::WindowSpec;
use crate::split::KernelOutput;
use crate::CompiledQuery;
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
    let _ = writeln!(out, "== Logical plan (DataFusion, optimized) ==\n{}\n", q.planned.plan.display_indent());
    if let Some(p) = &k.pair {
        let _ = writeln!(out, "== Kernel: pairing start program on {} ==", shown(&p.start.event));
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
        let stored: Vec<String> = p.stored.iter().map(|(_, n)| n.clone()).chain(p.stored_strs.iter().map(|(s, n)| format!("{n}: {} B", s.record_bytes()))).collect();
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
            let _ = writeln!(out, "key is the thread: pid/tid filters run first in both programs");
        }
        for (f, text) in &p.end_pre {
            let _ = writeln!(out, "end program, before the lookup (cost class {}): {text}", f.cost_class());
        }
    }
    let _ = writeln!(out, "== Kernel: BPF program on {} ==", shown(&k.event.event));
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
    match &k.output {
        KernelOutput::Stream { columns } => {
            let names: Vec<&str> = columns.iter().map(|c| c.0.as_str()).collect();
            let _ = writeln!(out, "output: one ring-buffer record per event with [{}]", names.join(", "));
        }
        KernelOutput::Groups(g) => {
            let keys: Vec<String> = g.keys.iter().map(|k| if k.per_cpu { format!("{} (per-CPU map slot)", k.text) } else { k.text.clone() }).collect();
            let _ = writeln!(out, "output: per-CPU group table keyed by [{}]", keys.join(", "));
            if let Some(m) = q.code.maps.get(crate::contract::MAP_OUT).filter(|m| m.kind == crate::contract::MapKind::PercpuHashPrealloc) {
                let _ = writeln!(
                    out,
                    "  {} bytes per group per CPU: table preallocated with {} entries ({} MiB per CPU; larger values cannot be allocated by the probe)",
                    m.value_size,
                    m.max_entries,
                    (m.value_size as u64 * m.max_entries as u64) >> 20
                );
            }
            for (i, s) in g.slots.iter().enumerate() {
                let _ = writeln!(out, "  slot {i} at byte {} ({} bytes): {}", g.slot_offset(i), s.state.bytes(), s.state.synopsis().describe());
            }
            for (f, _, text) in &g.aggs {
                let _ = writeln!(out, "  {text}: {}", f.describe());
            }
            if let crate::contract::OutputLayout::Groups { distinct_set: Some(i), .. } = &q.code.layout {
                let m = &q.code.maps[*i];
                let _ = writeln!(
                    out,
                    "  distinct set {}: +1 map insert per event; {} B key (window, group, value) per distinct value per group (+ the kernel's element header); holds {} values (two windows while draining; --max-distinct per window); full = counted drop",
                    m.name, m.key_size, m.max_entries
                );
            }
        }
    }
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
        let _ = writeln!(out, "== BPF: program {} ({} instructions, {} stack bytes) ==", p.name, p.program.insns.len(), p.stack_bytes);
        if c.programs.len() > 1 {
            let _ = writeln!(out, "attached to tracepoint/{}/{}", p.event.category, p.event.name);
        }
        if i == 0 {
            for m in &c.maps {
                let _ = writeln!(out, "map {}: {:?} key {} B, value {} B, {} entries", m.name, m.kind, m.key_size, m.value_size, m.max_entries);
            }
        }
        out.push_str(&p.program.listing());
    }
    out
}

/// How a hopping window is built from panes (`None` unless step < size):
/// the kernel's flip period, what user space keeps per pane and its bound.
fn pane_scheme(q: &CompiledQuery) -> Option<String> {
    let Some(w @ WindowSpec::Time { size_ns, step_ns }) = q.split.kernel.window else { return None };
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
