//! Compiles queries against the live tracefs catalog (no BPF loaded: the compiler is pure).

use ebql_compiler::{compile_query, explain::explain, CodegenOptions, CompileError};

fn compile(q: &str) -> Result<ebql_compiler::CompiledQuery, CompileError> {
    let catalog = ebql_catalog::Catalog::open().expect("tracefs (run as root)");
    compile_query(q, &catalog, &CodegenOptions::default())
}

#[test]
fn figure_12_explains() {
    let q = "SELECT fd, cpu, COUNT(*), MAX(count), AVG(count)
                FROM tracepoint/syscalls/sys_enter_pread64
                GROUP BY fd, cpu WHERE pid == 1041370 WINDOW(time, 1000, 1000);";
    let c = compile(q).unwrap();
    let text = explain(&c);
    println!("{text}");
    assert!(text.contains("per-CPU group table keyed by"));
}
