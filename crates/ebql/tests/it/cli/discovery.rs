//! `ebql events` (issue 20, item 5): tracepoints by name alone, every
//! kind's form, kinds this kernel lacks said so, nothing matched an error.

use std::process::Command;

fn events(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ebql"))
        .arg("events")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn a_bare_name_glob_finds_tracepoints_and_no_match_is_an_error() {
    let (code, out, err) = events(&["sys_enter_open*"]);
    assert_eq!(code, Some(0), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines.contains(&"tracepoint/syscalls/sys_enter_openat"),
        "{out}"
    );
    assert!(lines.iter().all(|l| l.contains("/sys_enter_open")), "{out}");
    let (code, out, err) = events(&["no_such_event_*"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        out.is_empty() && err.contains("no event matches 'no_such_event_*'"),
        "{err}"
    );
}

#[test]
fn the_listing_shows_every_kinds_form_and_what_this_kernel_lacks() {
    use ebql_catalog::EventKind;
    let (code, out, err) = events(&[]);
    assert_eq!(code, Some(0), "{err}");
    for form in [
        "profile:hz:<N>",
        "tc:<interface>:ingress|egress",
        "usdt:<binary>:<provider>:<probe>",
    ] {
        assert!(
            out.contains(form),
            "{form} in\n{}",
            &out[out.len().saturating_sub(2000)..]
        );
    }
    let kprobe = out
        .lines()
        .find(|l| l.starts_with("kprobe:<function>"))
        .unwrap();
    let missing = ebql_runtime::features::missing(EventKind::Kprobe);
    assert_eq!(
        kprobe.contains("[not on this kernel:"),
        missing.is_some(),
        "{kprobe}"
    );
    // A kind this kernel lacks is said so, not listed as if usable.
    let (code, out, err) = events(&["kprobe:*"]);
    match missing {
        Some((_, why)) => {
            assert_eq!(code, Some(1), "{err}");
            assert!(out.is_empty() && err.contains(&why), "{err}");
        }
        None => assert_eq!(code, Some(0), "{err}"),
    }
}

#[test]
fn a_pointer_compared_with_text_suggests_str() {
    for cond in [
        "filename = '/etc/passwd'",
        "o.filename LIKE '/etc/%'",
        "filename IN ('/a', '/b')",
    ] {
        let sql =
            format!("SELECT COUNT(*) FROM tracepoint:syscalls:sys_enter_openat AS o WHERE {cond}");
        let out = Command::new(env!("CARGO_BIN_EXE_ebql"))
            .args(["explain", &sql])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains("`filename` is a pointer")
                && err.contains("write str(filename) instead of filename"),
            "{cond}: {err}"
        );
    }
}
