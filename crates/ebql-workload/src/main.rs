//! `ebql-workload`: workload process for eBQL kernel tests and benchmarks (see `cli`).

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    std::process::exit(ebql_workload::cli::cli_main(&args));
}
