//! The cost model on the real kernel: `ebql check --cost` measures what it
//! says (the workload's calls, every one), `ebql calibrate` measures and
//! caches the model, rates are sampled from real events, and `explain`
//! shows the prediction. No timing assertions: only that the measured side
//! is real and consistent.


use crate::common::*;
use std::process::{Child, Command, Stdio};

const EBQL: &str = env!("CARGO_BIN_EXE_ebql");
const EV: &str = "tracepoint/syscalls/sys_enter_pread64";

/// The `ebql: cost {…}` line of `check --cost`'s stderr.
fn cost_json(stderr: &str) -> serde_json::Value {
    let line = stderr
        .lines()
        .find_map(|l| l.strip_prefix("ebql: cost "))
        .unwrap_or_else(|| panic!("no cost line in:\n{stderr}"));
    serde_json::from_str(line).unwrap()
}

/// A calibration file of this test only (never the user's cache).
fn scratch_cost_file(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("ebql-cost-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn check_cost_counts_every_call_of_the_workload_and_compares_with_the_model() {
    let _k = kernel_lock();
    require_root();
    let sql = format!("SELECT fd, COUNT(*), MAX(count) FROM {EV} WHERE pid = $pid GROUP BY fd WINDOW(time, 500, 500)");
    let out = Command::new(EBQL)
        .args(["check", "--cost", "--duration", "1", &sql])
        .env("EBQL_COST_FILE", scratch_cost_file("none.json"))
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("bpf_stats on for this measurement only"),
        "{stderr}"
    );
    let j = cost_json(&stderr);
    let calls = j["workload_calls"]
        .as_u64()
        .expect("the workload reported its calls");
    assert!(calls > 0, "{j}");
    // Every call of the workload was an event the query matched, and nothing else was.
    assert_eq!(j["events_matched"].as_u64(), Some(calls), "{j}");
    let prog = &j["programs"][0];
    assert!(
        prog["runs"].as_u64().unwrap() >= calls,
        "the probe ran at least once per call: {j}"
    );
    assert!(
        prog["measured_ns_per_run"].as_f64().unwrap() > 0.0,
        "bpf_stats measured run time: {j}"
    );
    assert!(prog["predicted_ns_per_run"].as_f64().unwrap() > 0.0, "{j}");
    let error = j["error"].as_f64().expect("an error is reported");
    assert!(
        stdout.contains(&format!("predicted run time off by {:+.1}%", 100.0 * error)),
        "{stdout}"
    );
    assert!(
        stdout.contains("built-in defaults"),
        "no calibration file: the defaults are named:\n{stdout}"
    );

    // A limit no prediction meets: exit 1, and it says why.
    let strict = Command::new(EBQL)
        .args([
            "check",
            "--cost",
            "--duration",
            "0.5",
            "--max-error",
            "0",
            &sql,
        ])
        .env("EBQL_COST_FILE", scratch_cost_file("none.json"))
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&strict.stdout);
    assert_eq!(strict.status.code(), Some(1), "{s}");
    assert!(s.contains("FAIL: predicted run time off by"), "{s}");

    // The planning flags choose the plan measured: the fd key's array costs less than the hash.
    let predicted = |group_map: &str| {
        let out = Command::new(EBQL)
            .args([
                "check",
                "--cost",
                "--duration",
                "0.5",
                "--hook",
                "tracefs",
                "--group-map",
                group_map,
                &sql,
            ])
            .env("EBQL_COST_FILE", scratch_cost_file("none.json"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        cost_json(&stderr)["programs"][0]["predicted_ns_per_run"]
            .as_f64()
            .unwrap()
    };
    let (array, hash) = (predicted("array"), predicted("hash"));
    assert!(array < hash, "array {array} ns, hash {hash} ns per run");
}

#[test]
fn calibrate_measures_this_machine_and_caches_the_model() {
    let _k = kernel_lock();
    require_root();
    let file = scratch_cost_file("calibration.json");
    let _ = std::fs::remove_file(&file);
    let out = Command::new(EBQL)
        .args(["calibrate", "--rounds", "1"])
        .env("EBQL_COST_FILE", &file)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("bpf_stats on for this phase only"),
        "{stderr}"
    );
    let f: ebql::cost::CalibrationFile =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(f.format, ebql::cost::FORMAT);
    assert_eq!(f.kernel, ebql::cost::kernel_release());
    // Hook types this kernel lacks are reported absent, the others measured.
    for hook in ebql_compiler::cost::Hook::ALL {
        let missing = ebql_runtime::features::missing(hook.kind()).is_some();
        assert_eq!(f.model.hooks_absent.contains(&hook), missing, "{hook:?}");
        if missing {
            assert_eq!(f.model.hook_ns(hook), None);
        }
    }
    for key in [
        "hook:TracefsTracepoint",
        "hook:TpBtf",
        "insn_ns",
        "stats_overhead_ns",
        "helper:bpf_ktime_get_ns",
        "map:PercpuHash:Lookup",
        "ringbuf_record",
        "user_row_ns",
    ] {
        assert!(
            f.model.is_measured(key),
            "{key} not measured: {:?}",
            f.model.measured
        );
    }
    // Every operation program ran on every call of the calibration loop (and
    // on other processes' calls too): runs ≥ the loop's calls, in each round,
    // but for the batch in flight when the round began (the loop adds its
    // calls to the count 64 at a time, so up to 63 of them ran before the
    // programs' run counts were read at the start).
    let ours = &f.raw["ops:our_calls"];
    assert!(ours[0] > 0.0);
    let runs: Vec<(&String, &Vec<f64>)> = f
        .raw
        .iter()
        .filter(|(k, _)| k.starts_with("op:") && k.ends_with(":runs"))
        .collect();
    assert!(runs.len() > 20, "{:?}", f.raw.keys());
    for (k, v) in runs {
        assert!(
            v[0] + 63.0 >= ours[0],
            "{k}: {} runs for {} calls",
            v[0],
            ours[0]
        );
    }
    // --show reads it back.
    let show = Command::new(EBQL)
        .args(["calibrate", "--show"])
        .env("EBQL_COST_FILE", &file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&show.stdout);
    assert!(
        text.contains(&format!("file: {}", file.display()))
            && text.contains("measured")
            && text.contains("absent on this kernel") == !f.model.hooks_absent.is_empty(),
        "{text}"
    );
    // explain uses it.
    let ex = Command::new(EBQL)
        .args([
            "explain",
            &format!("SELECT COUNT(*) FROM {EV} WHERE pid = 1"),
        ])
        .env("EBQL_COST_FILE", &file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&ex.stdout);
    assert!(
        text.contains(&format!("model: {}", f.model.source)) && text.contains("(measured here)"),
        "{text}"
    );
}

/// A process that never calls pread64.
fn sleeper() -> Child {
    Command::new("sleep").arg("30").spawn().unwrap()
}

#[test]
fn rates_are_sampled_from_the_events_and_the_query_itself() {
    let _k = kernel_lock();
    require_root();
    let mut load = Command::new(EBQL)
        .args([
            "workload",
            "pread-loop",
            "--threads",
            "1",
            "--seconds",
            "20",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = {
        use std::io::BufRead;
        let mut line = String::new();
        std::io::BufReader::new(load.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        line.trim()
            .strip_prefix("ready ")
            .unwrap()
            .parse::<u32>()
            .unwrap()
    };
    let mut idle = sleeper();
    let opts = ebql::ExecutorOptions::default();
    let mut ex = ebql::Executor::new();
    let sample = |ex: &mut ebql::Executor, who: u32| {
        let sql = format!("SELECT COUNT(*) FROM {EV} WHERE pid = {who}");
        let q = ex.compile(&sql).unwrap();
        ebql::cost::rates::sample(&sql, &q, &opts, std::time::Duration::from_millis(150)).unwrap()
    };
    let none = sample(&mut ex, idle.id());
    let busy = sample(&mut ex, pid);
    let _ = (load.kill(), load.wait(), idle.kill(), idle.wait());
    // The workload's calls were seen at the hook; the idle process matched none of them.
    assert!(none.events_per_s[0].unwrap() > 0.0, "{none:?}");
    assert_eq!(none.matched_fraction[0], Some(0.0), "{none:?}");
    assert!(busy.matched_fraction[0].unwrap() > 0.0, "{busy:?}");
    // A syscall tracepoint: the machine's syscall rate is sampled too (our workload alone makes some).
    assert!(
        none.syscalls_per_s.unwrap() >= none.events_per_s[0].unwrap() * 0.5,
        "{none:?}"
    );
    assert_eq!(none.cpus, ebql_runtime::num_possible_cpus().unwrap());
}

#[test]
fn explain_predicts_the_cost_of_the_generated_program() {
    // Pure: compiles only (the built-in model: no calibration file).
    let sql = format!("SELECT fd, cpu, COUNT(*), MAX(count), AVG(count) FROM {EV} GROUP BY fd, cpu WHERE pid == 42 WINDOW(time, 1000, 1000)");
    let out = Command::new(EBQL)
        .args(["explain", &sql])
        .env("EBQL_COST_FILE", scratch_cost_file("none.json"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let cost = &text[text
        .find("== Cost (predicted; model: built-in defaults")
        .unwrap_or_else(|| panic!("{text}"))..];
    for line in [
        "hook entry",
        "event its filters reject",
        "bpf_get_current_pid_tgid",
        "event that passes the filters",
        "bpf_map_lookup_elem on per-CPU array",
        "per matched event",
        "cost on untraced work",
    ] {
        assert!(cost.contains(line), "{line} missing in:\n{cost}");
    }
}
