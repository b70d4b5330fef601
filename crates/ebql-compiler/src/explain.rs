//! `ebql explain`: the optimized logical plan, the kernel/user split and the
//! generated BPF, each instruction range annotated with the plan node it came from.

use crate::split::KernelOutput;
use crate::CompiledQuery;
use std::fmt::Write;

/// Renders the explanation of a compiled query.
pub fn explain(q: &CompiledQuery) -> String {
    let mut out = String::new();
    let k = &q.split.kernel;
    let _ = writeln!(out, "== Logical plan (DataFusion, optimized) ==\n{}\n", q.planned.plan.display_indent());
    let _ = writeln!(out, "== Kernel: BPF program on tracepoint/{}/{} ==", k.event.event.category, k.event.event.name);
    if let Some(w) = &k.window {
        let _ = writeln!(out, "window: {w:?}");
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
    let _ = writeln!(out, "== BPF: program {} ({} instructions, {} stack bytes) ==", c.prog_name, c.program.insns.len(), c.stack_bytes);
    for m in &c.maps {
        let _ = writeln!(out, "map {}: {:?} key {} B, value {} B, {} entries", m.name, m.kind, m.key_size, m.value_size, m.max_entries);
    }
    out.push_str(&c.program.listing());
    out
}
