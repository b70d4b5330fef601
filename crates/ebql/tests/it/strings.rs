//! Strings read by the probe (`__data_loc` fields, `str()` of pointers) and
//! the framework study's programs (paper 001: files opened per pid,
//! read/write events, processes spawned, page-cache additions), on real
//! events of a workload process of ours whose system calls are known
//! exactly. Every query filters on the workload's pid (or on a path unique
//! to this test run).


use crate::common::*;
use ebql::Executor;
use std::collections::BTreeMap;

const OPENAT: &str = "tracepoint:syscalls:sys_enter_openat";

/// Whether `sql` runs its aggregate in the kernel.
fn aggregated_in_kernel(sql: &str) -> bool {
    let c = Executor::new()
        .compile(sql)
        .unwrap_or_else(|e| panic!("{}", e.render()));
    matches!(
        c.split.kernel.output,
        ebql_compiler::split::KernelOutput::Groups(_)
    )
}

/// (string, count) rows of a two-column result, as a map.
fn counts(b: &ebql::arrow::record_batch::RecordBatch, key: &str, n: &str) -> BTreeMap<String, u64> {
    strings(b, key).into_iter().zip(u64s(b, n)).collect()
}

/// A path no other process opens: it names this test process.
fn own_path(tag: &str) -> String {
    format!("/nonexistent-ebql-{}/{tag}", std::process::id())
}

#[test]
fn files_opened_per_pid_with_their_names() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let pid = w.pid;
    let (long_a, long_b, short) = (
        own_path("a-rather-long-file-name-one"),
        own_path("another-long-name-two-xyz"),
        own_path("s"),
    );
    let work = |w: &mut Workload| {
        // Short names after longer ones on the same stack slots: stale bytes after the NUL would split the short name's group.
        for (p, n) in [
            (long_a.as_str(), 2),
            (&short, 1),
            (&long_b, 1),
            (&short, 2),
            ("/etc/hostname", 3),
        ] {
            assert_eq!(w.cmd(&format!("openat {p} {n}")), format!("ok {n}"));
        }
    };
    let want: BTreeMap<String, u64> = [
        (long_a.clone(), 2),
        (long_b.clone(), 1),
        (short.clone(), 3),
        ("/etc/hostname".to_string(), 3),
    ]
    .into_iter()
    .collect();

    // In the kernel: a 64-byte key, zeroed before each read.
    let sql = format!("SELECT pid, str(filename, 64) AS file, COUNT(*) AS n FROM {OPENAT} WHERE pid = {pid} GROUP BY pid, str(filename, 64)");
    assert!(
        aggregated_in_kernel(&sql),
        "a 64-byte string key is grouped in the kernel"
    );
    let r = run_once(&sql, || work(&mut w));
    assert_eq!(counts(&r, "file", "n"), want);
    assert!(u64s(&r, "pid").iter().all(|&p| p == pid as u64));

    // The default 256-byte buffer with pid is too large a key: streamed, grouped in user space, same answer.
    let sql = format!("SELECT pid, str(filename) AS file, COUNT(*) AS n FROM {OPENAT} WHERE pid = {pid} GROUP BY pid, str(filename)");
    assert!(!aggregated_in_kernel(&sql));
    let r = run_once(&sql, || work(&mut w));
    assert_eq!(counts(&r, "file", "n"), want);
}

#[test]
fn string_filters_run_in_the_kernel() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let pid = w.pid;
    let (a, b) = (own_path("alpha"), own_path("alphabet"));
    let work = |w: &mut Workload| {
        assert_eq!(w.cmd(&format!("openat {a} 2")), "ok 2");
        assert_eq!(w.cmd(&format!("openat {b} 5")), "ok 5");
        assert_eq!(w.cmd("openat /etc/hostname 1"), "ok 1");
    };
    let prefix = own_path("alpha");
    for (cond, n) in [
        (format!("str(filename) = '{a}'"), 2u64),
        (format!("str(filename) <> '{a}'"), 6),
        (format!("str(filename) LIKE '{prefix}%'"), 7),
        (format!("starts_with(str(filename), '{prefix}b')"), 5),
        (format!("str(filename) NOT LIKE '{prefix}%'"), 1),
        // A 10-byte buffer keeps 9 bytes: `/etc/host` equals the cut name.
        ("str(filename, 10) = '/etc/host'".to_string(), 1),
        ("str(filename, 10) = '/etc/hostname'".to_string(), 0),
    ] {
        let sql = format!("SELECT COUNT(*) AS n FROM {OPENAT} WHERE pid = {pid} AND {cond}");
        let c = Executor::new()
            .compile(&sql)
            .unwrap_or_else(|e| panic!("{}", e.render()));
        assert_eq!(
            c.split.kernel.filters.len(),
            2,
            "{cond}: pushed into the kernel"
        );
        let r = run_once(&sql, || work(&mut w));
        assert_eq!(u64s(&r, "n"), vec![n], "{cond}");
    }
}

#[test]
fn strings_are_streamed_and_cut_to_their_buffer() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let pid = w.pid;
    let sql = format!("SELECT tid, str(filename) AS file, str(filename, 8) AS cut, comm FROM {OPENAT} WHERE pid = {pid}");
    let r = run_once(&sql, || assert_eq!(w.cmd("openat /etc/hostname 3"), "ok 3"));
    assert_eq!(strings(&r, "file"), vec!["/etc/hostname"; 3]);
    assert_eq!(strings(&r, "cut"), vec!["/etc/ho"; 3]);
    assert_eq!(strings(&r, "comm"), vec!["ebql"; 3]);
    assert_eq!(u64s(&r, "tid"), vec![pid as u64; 3]);
}

/// Long strings (the probe reads user memory up to 16 KiB): the default
/// buffer keeps 2,047 bytes, `str(p, 8192)` a 4,000-byte path whole, and
/// `truncated()` says exactly which were cut (a string of exactly n - 1
/// bytes is whole). The paths are made of 100-byte components under a
/// directory that does not exist (ENOENT, not ENAMETOOLONG).
#[test]
fn long_strings_and_their_truncation_flag() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let pid = w.pid;
    let path = |len: usize| {
        let mut p = own_path("");
        while p.len() < len {
            p.push(if p.len() % 100 == 0 { '/' } else { 'x' });
        }
        p
    };
    let (exact, long) = (path(2047), path(4000));
    let sql = format!(
        "SELECT str(filename) AS d, truncated(str(filename)) AS d_cut, str(filename, 8192) AS big, truncated(str(filename, 8192)) AS big_cut FROM {OPENAT} WHERE pid = {pid}"
    );
    let r = run_once(&sql, || {
        for p in [&exact, &long] {
            assert_eq!(w.cmd(&format!("openat {p} 1")), "ok 1");
        }
    });
    let flags = |name: &str| {
        r.column_by_name(name)
            .unwrap()
            .as_any()
            .downcast_ref::<ebql::arrow::array::BooleanArray>()
            .unwrap()
            .iter()
            .map(Option::unwrap)
            .collect::<Vec<bool>>()
    };
    assert_eq!(
        strings(&r, "d"),
        vec![exact.clone(), long[..2047].to_string()]
    );
    assert_eq!(flags("d_cut"), vec![false, true]);
    assert_eq!(strings(&r, "big"), vec![exact.clone(), long.clone()]);
    assert_eq!(flags("big_cut"), vec![false, false]);
}

#[test]
fn read_and_write_events_with_pid_tid_comm() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let pid = w.pid;
    assert_eq!(w.cmd("comm rwtest"), "ok comm");
    // The script reads its commands and writes its answers with larger counts: count = 1 are the workload's own calls.
    for event in ["sys_enter_read", "sys_enter_write"] {
        let sql = format!("SELECT pid, tid, comm, count FROM tracepoint:syscalls:{event} WHERE pid = {pid} AND count = 1");
        let r = run_once(&sql, || assert_eq!(w.cmd("readwrite 4"), "ok 4"));
        assert_eq!(r.num_rows(), 4, "{event}");
        assert_eq!(
            (u64s(&r, "pid"), u64s(&r, "tid")),
            (vec![pid as u64; 4], vec![pid as u64; 4])
        );
        assert_eq!(strings(&r, "comm"), vec!["rwtest"; 4]);
    }
}

#[test]
fn processes_spawned_by_a_pid() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let pid = w.pid;
    assert_eq!(w.cmd("comm spawner"), "ok comm");
    // A path of our own for the children's program, so exec events are ours alone.
    let dir = std::env::temp_dir().join(format!("ebql-strings-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prog = dir.join("true");
    let _ = std::fs::remove_file(&prog);
    std::os::unix::fs::symlink("/bin/true", &prog).unwrap();
    let prog = prog.to_str().unwrap().to_string();

    let spawn = |w: &mut Workload| -> Vec<u64> {
        let a = w.cmd(&format!("spawn {prog} 3"));
        a.strip_prefix("ok spawn ")
            .unwrap_or_else(|| panic!("{a}"))
            .split(' ')
            .map(|p| p.parse().unwrap())
            .collect()
    };
    let mut children: Vec<u64> = Vec::new();
    let sql = format!(
        "SELECT parent_pid, child_pid, parent_comm, child_comm FROM tracepoint:sched:sched_process_fork WHERE parent_pid = {pid} AND child_comm = 'spawner'"
    );
    let r = run_once(&sql, || children = spawn(&mut w));
    assert_eq!(u64s(&r, "child_pid"), children);
    assert_eq!(u64s(&r, "parent_pid"), vec![pid as u64; 3]);
    assert_eq!(
        (strings(&r, "parent_comm"), strings(&r, "child_comm")),
        (
            vec!["spawner".to_string(); 3],
            vec!["spawner".to_string(); 3]
        )
    );

    // The exec of each child: its pid, its program as passed to execve (a __data_loc string), its new comm.
    let sql = format!("SELECT pid, old_pid, filename, comm FROM tracepoint:sched:sched_process_exec WHERE filename = '{prog}'");
    let r = run_once(&sql, || children = spawn(&mut w));
    assert_eq!(u64s(&r, "pid"), children);
    assert_eq!(u64s(&r, "old_pid"), children);
    assert_eq!(strings(&r, "filename"), vec![prog.clone(); 3]);
    assert_eq!(strings(&r, "comm"), vec!["true"; 3]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn page_cache_additions_per_pid() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let pid = w.pid;
    // Per file: the process may also fault its own program's evicted pages back in.
    let sql = format!(
        "SELECT i_ino, COUNT(*) AS adds, SUM(1 << \"order\") AS pages FROM tracepoint:filemap:mm_filemap_add_to_page_cache WHERE pid = {pid} GROUP BY i_ino"
    );
    assert!(aggregated_in_kernel(&sql));
    let mut inodes = Vec::new();
    let r = run_once(&sql, || {
        for n in [8, 3] {
            let answer = w.cmd(&format!("pagecache {n}"));
            let ino = answer
                .strip_prefix(&format!("ok pagecache {n} ino "))
                .unwrap_or_else(|| panic!("{answer}"));
            inodes.push(ino.parse::<u64>().unwrap());
        }
    });
    let per_file: std::collections::HashMap<u64, (u64, u64)> = u64s(&r, "i_ino")
        .into_iter()
        .zip(u64s(&r, "adds").into_iter().zip(u64s(&r, "pages")))
        .collect();
    // The first file is freed before the second is created, which may get the same inode number.
    if inodes[0] == inodes[1] {
        assert_eq!(per_file.get(&inodes[0]), Some(&(11, 11)), "{per_file:?}");
    } else {
        assert_eq!(
            (per_file.get(&inodes[0]), per_file.get(&inodes[1])),
            (Some(&(8, 8)), Some(&(3, 3))),
            "{per_file:?}"
        );
    }
}

#[test]
fn str_of_a_non_pointer_is_a_positioned_error() {
    let mut ex = Executor::new();
    let e = ex
        .compile(&format!("SELECT str(comm) FROM {OPENAT}"))
        .err()
        .expect("str(comm) is refused");
    let text = e.render();
    assert!(
        text.contains("str() cannot be read in the probe") && text.contains("already a string"),
        "{text}"
    );
    let e = ex
        .compile(&format!("SELECT str(filename, 20000) FROM {OPENAT}"))
        .err()
        .expect("n too large");
    assert!(e.render().contains("from 2 to 16384"), "{}", e.render());
    // Each string fits, but not three in one row (16-bit BPF offsets).
    let e = ex.compile(&format!("SELECT str(filename, 16384) AS a, ustr(filename, 16000) AS b, kstr(filename, 16000) AS c FROM {OPENAT}")).err().expect("row too large");
    assert!(
        e.render().contains("a streamed row would take"),
        "{}",
        e.render()
    );
}
