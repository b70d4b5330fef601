//! `ebql calibrate`: the cost model measured on this machine and cached.

use super::common::io_err;
use ebql::Error;
use std::io::Write;

/// `ebql calibrate [--show]`.
pub(super) fn calibrate(show: bool, rounds: usize) -> Result<(), Error> {
    if !show {
        let opts = ebql::cost::CalibrateOptions {
            rounds: rounds.max(1),
            ..Default::default()
        };
        let f = ebql::cost::calibrate(opts, &mut |line| note!("ebql calibrate: {line}"))?;
        let path = ebql::cost::save(&f)
            .map_err(|e| io_err(format!("writing {}", ebql::cost::cache_path().display()), e))?;
        note!(
            "ebql calibrate: done in {:.1} s, saved to {}",
            f.seconds,
            path.display()
        );
    }
    print!("{}", ebql::cost::show(&ebql::cost::load()));
    Ok(())
}
