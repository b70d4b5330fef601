//! `str(ptr [, n])`, `ustr(…)`, `kstr(…)`: strings read by the probe from
//! memory, as DataFusion scalar functions so the planner types them (Utf8).
//!
//! They have no user-space implementation: the memory they read belongs to
//! the traced task or the kernel at the moment of the event. The split
//! ([`crate::split`]) turns every call into a column the kernel fills
//! ([`crate::kexpr::StrSrc`]); evaluating one in user space is an error.
//!
//! * `str(p)`: the NUL-terminated string at address `p`, user memory for
//!   system-call tracepoints, uprobes and USDT probes, kernel memory for other
//!   events ([`ebql_catalog::EventName::pointers_are_user`]); `ustr`/`kstr` choose
//!   explicitly. On a `__data_loc char[]` field, `str(field, n)` sets the
//!   size of its buffer.
//! * `n`: the buffer in bytes including the NUL, from 2 to
//!   [`STR_MAX_BYTES`](crate::kexpr::STR_MAX_BYTES), default
//!   [`STR_DEFAULT_BYTES`](crate::kexpr::STR_DEFAULT_BYTES) (2048): longer
//!   strings are cut to `n - 1` bytes.
//! * `len` (`str(p, n, len)`): the string at `p` is `len` bytes long and
//!   need not end in a NUL (a buffer and its length, like MariaDB's
//!   `dispatch_command(…, char *packet, unsigned packet_length, …)`): the
//!   probe reads at most `min(len, n - 1)` bytes, still stopping at a NUL.
//!   `len` is any integer the probe computes (an argument; a negative one
//!   reads nothing).
//! * `truncated(s)`: true exactly when the string `s` (a `str()` call or a
//!   `__data_loc` field) was longer than its buffer keeps, i.e. cut. The probe
//!   reads one byte more than `n` into the record
//!   ([`StrSrc::record_bytes`](crate::kexpr::StrSrc::record_bytes)) and user
//!   space tells the two cases apart from where the NUL is; the string itself
//!   is read once for both.
//! * A pointer the kernel cannot read (NULL, unmapped, or a user page that is
//!   not resident: probes cannot fault pages in) gives SQL NULL (not `''`),
//!   counted per window in `str_read_failed`
//!   ([`crate::contract::ctl::STR_READ_FAILED`]); the row is kept.

use crate::kexpr::{BYTES_FUNCTION, STR_FUNCTIONS, TRUNCATED_FUNCTION};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{exec_err, Result};
use datafusion::execution::context::SessionContext;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};

/// One of `str`, `ustr`, `kstr` (Utf8), `bytes` (Binary) or `truncated` (Boolean; see the module documentation).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct StrFn {
    name: &'static str,
    signature: Signature,
}

impl StrFn {
    /// The function called `name` (one of [`STR_FUNCTIONS`] or [`TRUNCATED_FUNCTION`]).
    pub fn new(name: &'static str) -> Self {
        // Immutable, not volatile: DataFusion pushes no volatile predicate into a scan.
        let signature = if name == TRUNCATED_FUNCTION {
            Signature::any(1, Volatility::Immutable)
        } else if name == BYTES_FUNCTION {
            Signature::one_of(
                vec![TypeSignature::Any(2), TypeSignature::Any(3)],
                Volatility::Immutable,
            )
        } else {
            Signature::one_of(
                vec![
                    TypeSignature::Any(1),
                    TypeSignature::Any(2),
                    TypeSignature::Any(3),
                ],
                Volatility::Immutable,
            )
        };
        StrFn { name, signature }
    }
}

impl ScalarUDFImpl for StrFn {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(if self.name == TRUNCATED_FUNCTION {
            DataType::Boolean
        } else if self.name == BYTES_FUNCTION {
            DataType::Binary
        } else {
            DataType::Utf8
        })
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        exec_err!(
            "{}() reads kernel or user memory at the moment of the event, so it runs only in the probe; \
             use it on a column of the traced event (e.g. str(filename)), not on a computed or constant value",
            self.name
        )
    }
}

/// Registers `str`, `ustr`, `kstr`, `bytes` and `truncated` in `ctx`.
pub fn register(ctx: &SessionContext) {
    for name in STR_FUNCTIONS
        .into_iter()
        .chain([BYTES_FUNCTION, TRUNCATED_FUNCTION])
    {
        ctx.register_udf(ScalarUDF::from(StrFn::new(name)));
    }
}
