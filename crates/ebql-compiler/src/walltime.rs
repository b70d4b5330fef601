//! `walltime(t)`: a CLOCK_MONOTONIC instant in ns (the `time` column, or
//! any integer in its unit) as wall-clock time, Arrow
//! `Timestamp(Nanosecond, "UTC")` (ns since the Unix epoch), as a
//! DataFusion scalar function evaluated in user space (the kernel keeps
//! `time` as its u64: the split leaves every call to the remainder, like
//! any function the probe cannot run).
//!
//! The conversion adds the run's offset, CLOCK_REALTIME − CLOCK_MONOTONIC
//! in ns, read once when the query starts (the same offset the executor
//! gives the time-window bounds, so `walltime(time)` of an event lies
//! within its window's `window_start`/`window_end`, and `walltime(t2) −
//! walltime(t1)` is exactly `t2 − t1`). The compiler makes no system call:
//! the executor sets the offset in the session it runs the plan in
//! ([`set_wall_offset`], the config extension [`RunClock`]); a plan run
//! before that (no offset) fails with an execution error.

use std::any::Any;
use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, TimestampNanosecondArray};
use datafusion::arrow::datatypes::{DataType, Int64Type, TimeUnit, UInt64Type};
use datafusion::common::config::{ConfigEntry, ConfigExtension, ExtensionOptions};
use datafusion::common::{exec_err, plan_err, Result, ScalarValue};
use datafusion::execution::context::{SessionConfig, SessionContext};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// The function's name.
pub const WALLTIME_FUNCTION: &str = "walltime";

/// The time zone of its result (and of the time-window bounds).
pub const UTC: &str = "UTC";

/// eBQL's settings of one run, in the session's config under `ebql.`: set
/// by the executor when the query starts ([`set_wall_offset`]).
#[derive(Debug, Clone, Default)]
pub struct RunClock {
    /// `ebql.wall_offset_ns`: CLOCK_REALTIME − CLOCK_MONOTONIC in ns, read
    /// once when the query started; `None` before.
    pub wall_offset_ns: Option<i64>,
}

const OFFSET_KEY: &str = "wall_offset_ns";

impl ExtensionOptions for RunClock {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }

    fn cloned(&self) -> Box<dyn ExtensionOptions> {
        Box::new(self.clone())
    }

    fn set(&mut self, key: &str, value: &str) -> Result<()> {
        match key {
            OFFSET_KEY => match value.parse::<i64>() {
                Ok(v) => {
                    self.wall_offset_ns = Some(v);
                    Ok(())
                }
                Err(e) => plan_err!("ebql.{OFFSET_KEY} = {value}: {e}"),
            },
            _ => plan_err!("no setting ebql.{key}"),
        }
    }

    fn entries(&self) -> Vec<ConfigEntry> {
        vec![ConfigEntry {
            key: format!("{}.{OFFSET_KEY}", Self::PREFIX),
            value: self.wall_offset_ns.map(|v| v.to_string()),
            description: "CLOCK_REALTIME - CLOCK_MONOTONIC in ns, read once when the query started (walltime())",
        }]
    }
}

impl ConfigExtension for RunClock {
    const PREFIX: &'static str = "ebql";
}

/// `config` with an empty [`RunClock`] (the planner's session has one).
pub fn with_run_clock(config: SessionConfig) -> SessionConfig {
    config.with_option_extension(RunClock::default())
}

/// Sets the run's offset (CLOCK_REALTIME − CLOCK_MONOTONIC, ns) in the
/// session `ctx` runs plans in: every later evaluation of `walltime()` in
/// it adds exactly this.
pub fn set_wall_offset(ctx: &SessionContext, offset_ns: i64) {
    let state = ctx.state_ref();
    let mut state = state.write();
    let options = state.config_mut().options_mut();
    match options.extensions.get_mut::<RunClock>() {
        Some(clock) => clock.wall_offset_ns = Some(offset_ns),
        None => options.extensions.insert(RunClock {
            wall_offset_ns: Some(offset_ns),
        }),
    }
}

/// The `walltime(t)` function (see the module documentation).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct WallTime {
    signature: Signature,
}

impl Default for WallTime {
    fn default() -> Self {
        // Stable, not Immutable: its value depends on the run (its offset),
        // so a constant argument must not be folded while planning.
        WallTime {
            signature: Signature::uniform(
                1,
                vec![DataType::UInt64, DataType::Int64],
                Volatility::Stable,
            ),
        }
    }
}

/// `mono + offset` as ns since the Unix epoch, if it fits.
fn shift(mono: i128, offset: i64) -> Option<i64> {
    i64::try_from(mono + offset as i128).ok()
}

impl ScalarUDFImpl for WallTime {
    fn name(&self) -> &str {
        WALLTIME_FUNCTION
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Timestamp(TimeUnit::Nanosecond, Some(UTC.into())))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let Some(offset) = args
            .config_options
            .extensions
            .get::<RunClock>()
            .and_then(|c| c.wall_offset_ns)
        else {
            return exec_err!(
                "walltime() converts with the offset of a running query; this plan runs outside one"
            );
        };
        let [arg] = args.args.as_slice() else {
            return exec_err!("walltime() takes one argument");
        };
        let values = arg.to_array(args.number_rows)?;
        let too_far = |v: i128| {
            exec_err!("walltime({v}): {v} ns + the offset {offset} ns is past the year 2262")
        };
        let mut out: Vec<Option<i64>> = Vec::with_capacity(values.len());
        for i in 0..values.len() {
            if values.is_null(i) {
                out.push(None);
                continue;
            }
            let mono = match values.data_type() {
                DataType::UInt64 => values.as_primitive::<UInt64Type>().value(i) as i128,
                DataType::Int64 => values.as_primitive::<Int64Type>().value(i) as i128,
                t => return exec_err!("walltime() of {t}"),
            };
            match shift(mono, offset) {
                Some(ns) => out.push(Some(ns)),
                None => return too_far(mono),
            }
        }
        let array = TimestampNanosecondArray::from(out).with_timezone(UTC);
        Ok(match arg {
            ColumnarValue::Scalar(_) => {
                ColumnarValue::Scalar(ScalarValue::try_from_array(&array, 0)?)
            }
            ColumnarValue::Array(_) => ColumnarValue::Array(Arc::new(array)),
        })
    }
}

/// Registers `walltime` in `ctx`.
pub fn register(ctx: &SessionContext) {
    ctx.register_udf(ScalarUDF::from(WallTime::default()));
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, UInt64Array};
    use datafusion::arrow::record_batch::RecordBatch;

    fn run(ctx: &SessionContext, sql: &str) -> Result<Vec<RecordBatch>> {
        futures::executor::block_on(async { ctx.sql(sql).await?.collect().await })
    }

    /// Every value moves by exactly the session's offset, NULL stays NULL,
    /// and the type is ns in UTC; without an offset the plan fails.
    #[test]
    fn adds_exactly_the_runs_offset() {
        let ctx = crate::planner::session(true);
        let t = RecordBatch::try_from_iter([
            (
                "time",
                Arc::new(UInt64Array::from(vec![Some(5), None, Some(9)])) as _,
            ),
            ("s", Arc::new(Int64Array::from(vec![-1, 0, 1])) as _),
        ])
        .unwrap();
        ctx.register_batch("e", t).unwrap();
        let err = run(&ctx, "SELECT walltime(time) FROM e").unwrap_err();
        assert!(
            err.to_string().contains("offset of a running query"),
            "{err}"
        );
        let offset = 1_736_000_000_000_000_000i64;
        set_wall_offset(&ctx, offset);
        let got = run(
            &ctx,
            "SELECT walltime(time) AS w, walltime(s) AS v, walltime(7) AS c FROM e",
        )
        .unwrap();
        let b = &got[0];
        assert_eq!(
            b.schema().field(0).data_type(),
            &DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into()))
        );
        let w = b
            .column(0)
            .as_primitive::<datafusion::arrow::datatypes::TimestampNanosecondType>();
        assert_eq!(w.value(0), offset + 5);
        assert!(w.is_null(1));
        let v = b
            .column(1)
            .as_primitive::<datafusion::arrow::datatypes::TimestampNanosecondType>();
        assert_eq!(v.values().to_vec(), vec![offset - 1, offset, offset + 1]);
        let c = b
            .column(2)
            .as_primitive::<datafusion::arrow::datatypes::TimestampNanosecondType>();
        assert_eq!(c.value(2), offset + 7);
        // i64::MAX ns + the offset is past what an i64 of ns holds.
        let err = run(&ctx, "SELECT walltime(9223372036854775807) FROM e").unwrap_err();
        assert!(err.to_string().contains("past the year 2262"), "{err}");
    }
}
