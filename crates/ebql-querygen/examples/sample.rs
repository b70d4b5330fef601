//! Prints generated cases: `cargo run -p ebql-querygen --example sample -- [SEED] [N]`.
fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let mut s = ebql_querygen::Sampler::new(
        args.first().copied().unwrap_or(1),
        ebql_querygen::QueryConfig::default(),
    );
    for _ in 0..args.get(1).copied().unwrap_or(10) {
        println!("{}\n", s.next_case());
    }
}
