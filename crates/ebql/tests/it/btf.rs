//! tp_btf and raw tracepoints on real events: a workload thread of ours
//! sleeps a known number of times; the same question is asked of the
//! tracefs tracepoint, the BTF tracepoint (direct loads through struct
//! pointers) and the raw tracepoint (probe reads), all attached at once,
//! and their answers must be identical. The workload is blocked reading its
//! commands both when the probes attach and when they detach, so every
//! switch into it is followed by exactly one switch out of it.

use crate::common::{kernel_lock, require_root, run_once, strings, u64s, Workload};
use ebql::arrow::record_batch::RecordBatch;

/// Runs every query at once around `work`; one result batch per query.
fn run_together(sqls: &[String], work: impl FnOnce()) -> Vec<RecordBatch> {
    let mut ex = ebql::Executor::new();
    let mut running: Vec<_> = sqls
        .iter()
        .map(|s| ex.execute(s).unwrap_or_else(|e| panic!("{}", e.render())))
        .collect();
    let rxs: Vec<_> = running
        .iter_mut()
        .map(|q| q.take_receiver().unwrap())
        .collect();
    work();
    // Let the workload block on its next command before detaching.
    std::thread::sleep(std::time::Duration::from_millis(100));
    for q in running {
        q.stop().unwrap_or_else(|e| panic!("{}", e.render()));
    }
    rxs.iter()
        .map(|rx| {
            let batches: Vec<RecordBatch> = rx.try_iter().collect();
            let schema = batches
                .first()
                .map(|b| b.schema())
                .expect("a result at stop");
            ebql::arrow::compute::concat_batches(&schema, &batches).unwrap()
        })
        .collect()
}

#[test]
fn sched_switch_struct_fields_agree_with_tracefs() {
    require_root();
    let _g = kernel_lock();
    let mut w = Workload::start();
    let pid = w.pid;
    let out = |ev: &str, prev_pid: &str| {
        format!("SELECT COUNT(*) AS n FROM {ev} WHERE {prev_pid} = {pid}")
    };
    let sqls = vec![
        out("tracepoint:sched:sched_switch", "prev_pid"),
        out("tracepoint:sched:sched_switch", "next_pid"),
        out("tp_btf:sched:sched_switch", "prev.pid"),
        out("tp_btf:sched:sched_switch", "next.pid"),
        out("raw_tp:sched:sched_switch", "prev.pid"),
        out("raw_tp:sched:sched_switch", "next.pid"),
        // Strings and nested values through the struct pointers, grouped in the kernel.
        format!("SELECT prev.comm AS c, prev.tgid AS tgid, COUNT(*) AS n FROM tp_btf:sched:sched_switch WHERE prev.pid = {pid} AND prev.comm = 'ebql' GROUP BY prev.comm, prev.tgid"),
        format!("SELECT next.comm AS c, next.real_parent.tgid AS parent, COUNT(*) AS n FROM raw_tp:sched:sched_switch WHERE next.pid = {pid} GROUP BY next.comm, next.real_parent.tgid"),
    ];
    let sleeps = 20;
    let r = run_together(&sqls, || w.nanosleep(1_000_000, sleeps));
    let n: Vec<u64> = r.iter().map(|b| u64s(b, "n").iter().sum()).collect();
    assert!(
        n[0] >= sleeps,
        "each of the {sleeps} sleeps switches the workload out: {n:?}"
    );
    // Outs (even queries) and ins (odd) each agree across sources. Out and
    // in differ by at most the one switch that straddles the attach or the
    // detach (the workload blocked reading its next command).
    let (outs, ins): (Vec<u64>, Vec<u64>) = (
        n.iter().step_by(2).copied().collect(),
        n.iter().skip(1).step_by(2).copied().collect(),
    );
    assert!(
        outs.iter().all(|&x| x == outs[0]) && ins.iter().all(|&x| x == ins[0]),
        "every source sees the same switches: {n:?}"
    );
    assert!(
        outs[0].abs_diff(ins[0]) <= 1,
        "out = in, but for a straddling switch: {n:?}"
    );
    assert_eq!(
        (strings(&r[6], "c"), u64s(&r[6], "tgid")),
        (vec!["ebql".to_string()], vec![pid as u64])
    );
    assert_eq!(
        (strings(&r[7], "c"), u64s(&r[7], "parent")),
        (vec!["ebql".to_string()], vec![std::process::id() as u64])
    );
}

#[test]
fn unknown_struct_field_is_a_positioned_query_error() {
    let mut ex = ebql::Executor::new();
    let Err(e) = ex.compile("SELECT prev.pidd FROM tp_btf:sched:sched_switch") else {
        panic!("compiled")
    };
    let e = e.render();
    assert!(
        e.contains("has no field `prev.pidd`") && e.contains("did you mean `prev.pid`?"),
        "{e}"
    );
}

/// `comm` comparisons in a BTF-typed program read `current->comm` with
/// direct loads (no `bpf_get_current_comm`); a `comm` key still comes from
/// the helper, which pads it. Every form of the comparison agrees with the
/// tracefs tracepoint, which calls the helper: equal, unequal, a prefix, a
/// name that is a prefix of the workload's, and a key beside the filter.
#[test]
fn comm_compared_by_direct_loads_agrees_with_the_helper() {
    require_root();
    let _g = kernel_lock();
    let mut w = Workload::start();
    let pid = w.pid;
    let tests = [
        "comm = 'ebql'",
        "comm <> 'ebql'",
        "comm LIKE 'eb%'",
        "comm = 'ebq'",
        "NOT (comm IN ('ebq', 'x'))",
    ];
    let mut sqls = Vec::new();
    for (ev, prev_pid) in [
        ("tracepoint:sched:sched_switch", "prev_pid"),
        ("tp_btf:sched:sched_switch", "prev.pid"),
    ] {
        sqls.push(format!(
            "SELECT COUNT(*) AS n FROM {ev} WHERE {prev_pid} = {pid}"
        ));
        for t in tests {
            sqls.push(format!(
                "SELECT COUNT(*) AS n FROM {ev} WHERE {prev_pid} = {pid} AND {t}"
            ));
        }
    }
    let keyed = format!(
        "SELECT comm AS c, COUNT(*) AS n FROM tp_btf:sched:sched_switch \
         WHERE prev.pid = {pid} AND comm LIKE 'eb%' GROUP BY comm"
    );
    sqls.push(keyed.clone());

    let code = |sql: &str| {
        let q = ebql::Executor::new()
            .compile_for_explain(sql)
            .unwrap_or_else(|e| panic!("{}", e.render()));
        q.code.main().program.listing()
    };
    let direct = code(&sqls[7]);
    assert!(direct.contains("call bpf_get_current_task_btf"), "{direct}");
    assert!(!direct.contains("call bpf_get_current_comm"), "{direct}");
    let both = code(&keyed);
    assert!(
        both.contains("call bpf_get_current_comm"),
        "the key: {both}"
    );

    let sleeps = 20;
    let r = run_together(&sqls, || w.nanosleep(1_000_000, sleeps));
    let n: Vec<u64> = r.iter().map(|b| u64s(b, "n").iter().sum()).collect();
    let all = n[0];
    assert!(all >= sleeps, "{n:?}");
    let expected = [all, all, 0, all, 0, all];
    assert_eq!(&n[..6], &expected, "tracefs, the helper: {n:?}");
    assert_eq!(&n[6..12], &expected, "tp_btf, direct loads: {n:?}");
    assert_eq!(
        (strings(&r[12], "c"), n[12]),
        (vec!["ebql".to_string()], all)
    );
}

/// The wire capture's program on the server's writes keeps a response's
/// first `RESPONSE_HEAD_BYTES` (512) and, of a longer one, its last
/// `CAPTURE_TAIL_BYTES` (256), which finish a result whose rows were not
/// captured. Its text, scoped to this thread instead of the servers'
/// `comm`, over `send()`s of 400, 1,000 and 5,000 bytes on a socket pair.
#[test]
fn the_capture_keeps_a_writes_head_and_tail() {
    use ebql_compiler::wire::{capture_sql_on, find, CaptureHook, PeerColumns, SOCKET_EVENTS};
    use std::io::Read;
    use std::os::fd::AsRawFd;
    let _k = kernel_lock();
    require_root();
    let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
    let tid = unsafe { libc::gettid() };
    let rel = find("postgres", "statements").unwrap();
    let capture = capture_sql_on(
        rel,
        None,
        CaptureHook::Sockets,
        PeerColumns::Skipped,
        SOCKET_EVENTS[1],
    );
    let sql = capture.replace("comm IN ('postgres')", &format!("tid = {tid}"));
    assert_ne!(
        sql, capture,
        "the capture keeps the servers by comm: {capture}"
    );
    let message = |n: usize| (0..n).map(|i| (i % 251) as u8).collect::<Vec<u8>>();
    let sizes = [400, 1000, 5000];
    let r = run_once(&sql, || {
        for n in sizes {
            let m = message(n);
            // SAFETY: m outlives the call; send() is the sendto system call.
            let sent = unsafe { libc::send(a.as_raw_fd(), m.as_ptr().cast(), n, 0) };
            assert_eq!(sent, n as isize);
            let mut got = vec![0u8; n];
            b.read_exact(&mut got).unwrap();
        }
    });
    assert_eq!(u64s(&r, "ret"), [400, 1000, 5000]);
    let binary = |name: &str| -> Vec<Vec<u8>> {
        let a = r.column_by_name(name).unwrap();
        let a = a
            .as_any()
            .downcast_ref::<ebql::arrow::array::BinaryArray>()
            .expect("bytes() is Binary");
        a.iter().map(|d| d.expect("read").to_vec()).collect()
    };
    let heads: Vec<Vec<u8>> = sizes
        .iter()
        .map(|&n| message(n)[..n.min(512)].to_vec())
        .collect();
    assert_eq!(binary("data"), heads);
    let tails: Vec<Vec<u8>> = sizes
        .iter()
        .map(|&n| {
            if n > 512 {
                message(n)[n - 256..].to_vec()
            } else {
                Vec::new()
            }
        })
        .collect();
    assert_eq!(binary("tail"), tails);
}

/// `uregs()` under a socket tracepoint: the system call that moved the
/// bytes, with its descriptor, buffer and size arguments, for each of a
/// thread's known reads of a socket pair: four `recv`s (`recvfrom`, 45)
/// of 1 to 4 bytes, then a `read` (0) of 5.
#[test]
fn uregs_are_the_system_call_under_a_socket_tracepoint() {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    let _k = kernel_lock();
    require_root();
    let (mut a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    let tid = unsafe { libc::gettid() };
    let sql = format!(
        "SELECT uregs('orig_ax') AS call, uregs('di') AS fd, uregs('dx') AS size, ret, \
         bytes(uregs('si'), ret, 16) AS data FROM tp_btf:sock:sock_recv_length WHERE tid = {tid}"
    );
    // Five register reads, one pair of helper calls at the program's start.
    let code = ebql::Executor::new()
        .compile_for_explain(&sql)
        .unwrap_or_else(|e| panic!("{}", e.render()))
        .code
        .main()
        .program
        .listing();
    assert_eq!(code.matches("call bpf_task_pt_regs").count(), 1, "{code}");
    let mut buf = [0u8; 64];
    let r = run_once(&sql, || {
        for n in 1..=4usize {
            a.write_all(&b"abcd"[..n]).unwrap();
            // SAFETY: buf outlives the call and holds 64 bytes.
            let got = unsafe { libc::recv(b.as_raw_fd(), buf.as_mut_ptr().cast(), 64, 0) };
            assert_eq!(got, n as isize);
        }
        a.write_all(b"efghi").unwrap();
        // SAFETY: as above (std's own read of a socket is a recv).
        let got = unsafe { libc::read(b.as_raw_fd(), buf.as_mut_ptr().cast(), 64) };
        assert_eq!(got, 5);
    });
    let fd = b.as_raw_fd() as u64;
    assert_eq!(u64s(&r, "call"), [45, 45, 45, 45, 0]);
    assert_eq!(u64s(&r, "fd"), [fd; 5]);
    assert_eq!(u64s(&r, "size"), [64; 5]);
    assert_eq!(u64s(&r, "ret"), [1, 2, 3, 4, 5]);
    let data = r
        .column_by_name("data")
        .unwrap()
        .as_any()
        .downcast_ref::<ebql::arrow::array::BinaryArray>()
        .expect("bytes() is Binary");
    let data: Vec<&[u8]> = data.iter().map(|d| d.expect("read")).collect();
    assert_eq!(data, [&b"a"[..], b"ab", b"abc", b"abcd", b"efghi"]);
    // A name struct pt_regs lacks is an error at the call, listing those it has.
    let e = ebql::Executor::new()
        .compile("SELECT uregs('rsi') AS buf FROM tp_btf:sock:sock_recv_length")
        .err()
        .expect("no register rsi")
        .render();
    assert!(
        e.contains("query:1:8-12") && e.contains("has no register `rsi`") && e.contains("orig_ax"),
        "{e}"
    );
}
