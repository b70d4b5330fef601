//! Least privilege (issue 20, item 7): as user `nobody` with only
//! CAP_BPF and CAP_PERFMON (`setpriv`, ambient capabilities), the kinds
//! that need no tracefs run (BTF tracepoints, profile); a tracefs
//! tracepoint is refused naming the capability it lacks
//! (CAP_DAC_READ_SEARCH), and runs once it has it.

use crate::common::{kernel_lock, require_root};
use std::path::PathBuf;
use std::process::{Command, Output};

/// The ebql binary where `nobody` can reach it (the build directory is
/// under /root): a hard link in a fresh directory of /tmp, else a copy.
struct Reachable {
    dir: PathBuf,
    bin: PathBuf,
}

impl Reachable {
    fn new() -> Reachable {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("ebql-priv-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let bin = dir.join("ebql");
        let src = env!("CARGO_BIN_EXE_ebql");
        if std::fs::hard_link(src, &bin).is_err() {
            std::fs::copy(src, &bin).unwrap();
        }
        Reachable { dir, bin }
    }

    /// `ebql ARGS` as nobody with only `caps` (e.g. "+bpf,+perfmon").
    fn run(&self, caps: &str, args: &[&str]) -> Output {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(format!("--inh-caps={caps}"))
            .arg(format!("--ambient-caps={caps}"))
            .arg(&self.bin)
            .args(args)
            .current_dir(&self.dir)
            .output()
            .expect("setpriv (util-linux)")
    }
}

impl Drop for Reachable {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn bpf_and_perfmon_suffice_without_tracefs_and_tracefs_says_what_it_needs() {
    require_root();
    let _k = kernel_lock();
    let r = Reachable::new();
    let caps = "+bpf,+perfmon";
    // `ebql query -q -f json ARGS`, as nobody with `caps`.
    let json = |caps: &str, args: &[&str]| {
        let argv: Vec<&str> = ["query", "-q", "-f", "json"]
            .into_iter()
            .chain(args.iter().copied())
            .collect();
        r.run(caps, &argv)
    };
    // A BTF tracepoint, exact: the one exec of the command eBQL starts.
    let out = json(
        caps,
        &[
            "-c",
            "cat /etc/hostname",
            "SELECT COUNT(*) AS n FROM tp_btf:sched:sched_process_exec",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(r#"{"n":1}"#),
        "{err}"
    );
    // CPU sampling.
    let out = json(
        caps,
        &["-d", "500ms", "SELECT COUNT(*) AS n FROM profile:hz:99"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let row: serde_json::Value =
        serde_json::from_slice(out.stdout.trim_ascii()).unwrap_or_else(|e| panic!("{e}: {err}"));
    // 99 Hz on every CPU for 0.5 s: dozens of samples.
    assert!(row["n"].as_u64().unwrap() > 10, "{row}");
    // A tracefs tracepoint: refused, naming what is missing.
    let sql = "SELECT COUNT(*) AS n FROM tracepoint:syscalls:sys_enter_openat";
    let out = json(caps, &["-d", "300ms", sql]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("CAP_DAC_READ_SEARCH") && err.contains("tp_btf:"),
        "{err}"
    );
    let out = json("+bpf,+perfmon,+dac_read_search", &["-d", "300ms", sql]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
}
