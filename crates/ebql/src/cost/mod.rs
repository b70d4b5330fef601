//! The cost model on this machine: calibration (`ebql calibrate`), its cache,
//! event rates, and the check of predictions against measurements
//! (`ebql check --cost`). The model and the prediction themselves are pure
//! and live in [`ebql_compiler::cost`].
//!
//! * [`calibrate`]: measures per-operation costs with our own programs on
//!   our own workload (≈ 15 s) and returns a [`CalibrationFile`];
//! * [`save`] / [`load`]: the cache, one JSON file per kernel release and
//!   machine ([`cache_path`]); without one, [`load`] gives
//!   [`CostModel::built_in`];
//! * [`rates`]: a short sampling of a query's events (counted at the hook
//!   by a program of ours; matched ones by the query itself);
//! * [`recorded`]: rates recorded by earlier runs of a query, so that a
//!   run need not sample before it attaches;
//! * [`measure`]: runs a query briefly with bpf_stats on and compares its
//!   measured cost with the prediction.

pub mod calibrate;
pub mod measure;
mod probes;
pub mod rates;
pub mod recorded;
mod spin;

use ebql_compiler::cost::{CostModel, Hook};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::PathBuf;

pub use calibrate::{calibrate, CalibrateOptions};

/// Version of the cache file layout; other versions are ignored (recalibrate).
pub const FORMAT: u32 = 1;

/// Environment variable naming the calibration file to use instead of [`cache_path`]'s default.
pub const COST_FILE_ENV: &str = "EBQL_COST_FILE";

/// A calibration as cached on disk.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CalibrationFile {
    /// [`FORMAT`].
    pub format: u32,
    /// When it was measured (UTC).
    pub date: String,
    /// `uname -r` of the kernel it was measured on.
    pub kernel: String,
    /// The machine's host name.
    pub machine: String,
    /// How long the calibration took, s.
    pub seconds: f64,
    /// Rounds per phase (medians over them).
    pub rounds: usize,
    /// The model (measured numbers, defaults for the rest).
    pub model: CostModel,
    /// The raw measurements per round, by name (ns per call, ns per run, runs, …).
    pub raw: BTreeMap<String, Vec<f64>>,
    /// What went wrong or may distort the numbers.
    pub notes: Vec<String>,
}

/// `uname -r`.
pub fn kernel_release() -> String {
    // SAFETY: zeroed utsname filled by the kernel.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    if unsafe { libc::uname(&mut u) } != 0 {
        return "unknown".into();
    }
    // SAFETY: uname NUL-terminates its fields.
    unsafe { std::ffi::CStr::from_ptr(u.release.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// The host name.
pub fn machine_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// What identifies this machine in the cache file name: `/etc/machine-id`, else the host name.
fn machine_id() -> String {
    std::fs::read_to_string("/etc/machine-id")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(machine_name)
}

/// Where this machine's calibration is cached: `$EBQL_COST_FILE`, else
/// `$XDG_CACHE_HOME/ebql/cost/<uname -r>-<machine-id>.json` (`~/.cache` when unset).
pub fn cache_path() -> PathBuf {
    if let Some(f) = std::env::var_os(COST_FILE_ENV).filter(|f| !f.is_empty()) {
        return PathBuf::from(f);
    }
    cache_dir()
        .join("cost")
        .join(format!("{}-{}.json", kernel_release(), machine_id()))
}

/// eBQL's cache directory: `$XDG_CACHE_HOME/ebql` (`~/.cache/ebql` when
/// unset, `/tmp/ebql` without a home).
pub fn cache_dir() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/tmp"))
        .join("ebql")
}

/// Writes `f` to [`cache_path`] (directories created); returns the path.
pub fn save(f: &CalibrationFile) -> std::io::Result<PathBuf> {
    let path = cache_path();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let text = serde_json::to_string_pretty(f).map_err(std::io::Error::other)?;
    std::fs::write(&path, text + "\n")?;
    Ok(path)
}

/// The model the planner uses: this machine's calibration when cached.
#[derive(Clone, Debug)]
pub struct LoadedModel {
    /// The model.
    pub model: CostModel,
    /// The calibration it came from, if any.
    pub file: Option<CalibrationFile>,
    /// Why a cache file present at [`cache_path`] was not used (unreadable, another format).
    pub ignored: Option<String>,
}

/// Loads this machine's calibration ([`cache_path`]), else the built-in defaults.
pub fn load() -> LoadedModel {
    let path = cache_path();
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(_) => {
            return LoadedModel {
                model: CostModel::built_in(),
                file: None,
                ignored: None,
            }
        }
    };
    match serde_json::from_str::<CalibrationFile>(&text) {
        Ok(f) if f.format == FORMAT => LoadedModel {
            model: f.model.clone(),
            file: Some(f),
            ignored: None,
        },
        Ok(f) => LoadedModel {
            model: CostModel::built_in(),
            file: None,
            ignored: Some(format!(
                "{}: format {} (this ebql reads {FORMAT}): run `ebql calibrate`",
                path.display(),
                f.format
            )),
        },
        Err(e) => LoadedModel {
            model: CostModel::built_in(),
            file: None,
            ignored: Some(format!("{}: {e}: run `ebql calibrate`", path.display())),
        },
    }
}

/// `ebql calibrate --show`: the model as a table, each number marked
/// measured or default, and the calibration's notes.
pub fn show(m: &LoadedModel) -> String {
    let model = &m.model;
    let mut out = String::new();
    let mark = |key: &str| {
        if model.is_measured(key) {
            "measured"
        } else {
            "default"
        }
    };
    let _ = writeln!(out, "cost model: {}", model.source);
    match &m.file {
        Some(f) => {
            let _ = writeln!(
                out,
                "file: {} ({} rounds, {:.1} s)",
                cache_path().display(),
                f.rounds,
                f.seconds
            );
        }
        None => {
            let _ = writeln!(
                out,
                "file: none at {} (run `ebql calibrate`)",
                cache_path().display()
            );
        }
    }
    if let Some(why) = &m.ignored {
        let _ = writeln!(out, "ignored: {why}");
    }
    let _ = writeln!(
        out,
        "\nhook entry (added ns per event, empty program, bpf_stats off):"
    );
    for hook in Hook::ALL {
        let v = if model.hooks_absent.contains(&hook) {
            "absent on this kernel".to_string()
        } else {
            match model.hook_ns(hook) {
                Some(ns) => format!("{ns:>9.1}  {}", mark(&format!("hook:{hook:?}"))),
                None => "unknown (not measurable here)".into(),
            }
        };
        let _ = writeln!(out, "  {:<22} {v}", hook.label());
    }
    let row = |out: &mut String, what: &str, ns: f64, key: &str| {
        let _ = writeln!(out, "  {what:<44} {ns:>9.2}  {}", mark(key));
    };
    let _ = writeln!(out, "\nper event (ns):");
    row(
        &mut out,
        "other syscall while a syscall tracepoint is on",
        model.untraced_syscall_ns,
        "untraced_syscall_ns",
    );
    row(
        &mut out,
        "bpf_stats' own overhead per run",
        model.stats_overhead_ns,
        "stats_overhead_ns",
    );
    row(&mut out, "BPF instruction (JIT)", model.insn_ns, "insn_ns");
    for (name, ns) in &model.helper_ns {
        row(&mut out, name, *ns, &format!("helper:{name}"));
    }
    row(
        &mut out,
        "any other helper",
        model.other_helper_ns,
        "other_helper_ns",
    );
    for c in &model.map_ops {
        row(
            &mut out,
            &format!("{:?} on {}", c.op, c.map.label()).to_lowercase(),
            c.ns,
            &format!("map:{:?}:{:?}", c.map, c.op),
        );
    }
    let lin = |out: &mut String, what: &str, l: &ebql_compiler::cost::Linear, key: &str| {
        let _ = writeln!(
            out,
            "  {what:<44} {:>9.2} + {:.3}/B  {}",
            l.base_ns,
            l.per_byte_ns,
            mark(key)
        );
    };
    lin(
        &mut out,
        "string read (bpf_probe_read_*_str)",
        &model.str_read,
        "str_read",
    );
    lin(
        &mut out,
        "bpf_probe_read_{user,kernel}",
        &model.probe_read,
        "probe_read",
    );
    lin(
        &mut out,
        "ring-buffer record (reserve + submit)",
        &model.ringbuf_record,
        "ringbuf_record",
    );
    row(
        &mut out,
        "bpf_get_stackid, user stack",
        model.stackid_user_ns,
        "stackid_user_ns",
    );
    row(
        &mut out,
        "bpf_get_stackid, kernel stack",
        model.stackid_kernel_ns,
        "stackid_kernel_ns",
    );
    let _ = writeln!(out, "\nuser space (ebql's CPU, ns):");
    row(
        &mut out,
        "per query (attach to stop, fixed)",
        model.user_query_ns,
        "user_query_ns",
    );
    row(
        &mut out,
        "per second of polling",
        model.user_idle_ns_per_s,
        "user_idle_ns_per_s",
    );
    row(
        &mut out,
        "per streamed row (read, decode, remainder)",
        model.user_row_ns,
        "user_row_ns",
    );
    row(
        &mut out,
        "per window of a group table",
        model.user_window_ns,
        "user_window_ns",
    );
    row(
        &mut out,
        "per group per CPU merged",
        model.user_merge_ns,
        "user_merge_ns",
    );
    if let Some(f) = &m.file {
        if let Some(p) = f.raw.get("pid_test_ns") {
            let predicted = model.helper_by_name("bpf_get_current_pid_tgid") + 2.0 * model.insn_ns;
            let _ = writeln!(
                out,
                "\ncheck: pid test measured {:.1} ns, model {predicted:.1} ns",
                p[0]
            );
        }
        for n in &f.notes {
            let _ = writeln!(out, "note: {n}");
        }
    }
    out
}
