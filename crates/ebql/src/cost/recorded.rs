//! Rates recorded by earlier runs of a query, so that a run starts at once
//! on the plan its rates pick instead of sampling first (the first event
//! is never delayed by sampling).
//!
//! A run that samples in the background ([`ExecutorOptions::record_rates`])
//! counts its hooks for a moment after it attached (its own matched events
//! give the share its filters pass), and at its end adds the groups per
//! window it saw; the next run of the same query text on this kernel
//! plans with them while they are fresher than [`MAX_AGE`]. One JSON file
//! per query text under `$XDG_CACHE_HOME/ebql/rates/` (`~/.cache` when
//! unset), named by a hash of the text and the kernel release.
//!
//! [`ExecutorOptions::record_rates`]: crate::ExecutorOptions::record_rates

use ebql_compiler::choose::SyscallRates;
use ebql_compiler::cost::Rates;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Recorded rates older than this are not used (a machine's load changes).
pub const MAX_AGE: Duration = Duration::from_secs(3600);

/// Version of the file layout; other versions are ignored.
const VERSION: u32 = 1;

/// One query's recorded rates, as stored.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Recorded {
    /// [`VERSION`] of the layout.
    pub version: u32,
    /// The query text the rates belong to (a hash collision is checked against it).
    pub sql: String,
    /// When they were recorded, seconds since the Unix epoch.
    pub unix_s: u64,
    /// The query's rates (`groups_per_window` once its run ended).
    pub rates: Rates,
    /// The hook rule's rates, when the query traces a system call.
    pub syscalls: Option<SyscallRates>,
}

/// Where `sql`'s rates are recorded on this kernel.
pub fn path(sql: &str) -> PathBuf {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    sql.hash(&mut h);
    super::cache_dir().join("rates").join(format!(
        "{}-{:016x}.json",
        super::kernel_release(),
        h.finish()
    ))
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `sql`'s recorded rates if fresher than `max_age`, with their source
/// saying so (for `explain`).
pub fn load(sql: &str, max_age: Duration) -> Option<Recorded> {
    let text = std::fs::read_to_string(path(sql)).ok()?;
    let mut r: Recorded = serde_json::from_str(&text).ok()?;
    let age = now_s().saturating_sub(r.unix_s);
    if r.version != VERSION || r.sql != sql || age > max_age.as_secs() {
        return None;
    }
    r.rates.source = format!(
        "recorded by a run of this query {age} s ago: {}",
        r.rates.source
    );
    Some(r)
}

/// Records `rates` (and the hook rule's `syscalls`) for `sql`, now.
///
/// Errors: creating the directory or writing the file.
pub fn save(sql: &str, rates: Rates, syscalls: Option<SyscallRates>) -> std::io::Result<()> {
    let path = path(sql);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let r = Recorded {
        version: VERSION,
        sql: sql.to_string(),
        unix_s: now_s(),
        rates,
        syscalls,
    };
    let text = serde_json::to_string_pretty(&r).map_err(std::io::Error::other)?;
    // Written whole then renamed: a concurrent reader sees the old or the new file.
    let tmp = path.with_extension(format!("{}.tmp", std::process::id()));
    std::fs::write(&tmp, text + "\n")?;
    std::fs::rename(tmp, path)
}
