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
//!   events ([`crate::kexpr::pointers_are_user`]); `ustr`/`kstr` choose
//!   explicitly. On a `__data_loc char[]` field, `str(field, n)` sets the
//!   size of its buffer.
//! * `n`: the buffer in bytes including the NUL, from 2 to
//!   [`STR_MAX_BYTES`](crate::kexpr::STR_MAX_BYTES), default
//!   [`STR_DEFAULT_BYTES`](crate::kexpr::STR_DEFAULT_BYTES) (256): longer
//!   strings are cut to `n - 1` bytes, so a result of exactly `n - 1` bytes
//!   may have been truncated (`length(str(p, n)) = n - 1` detects it).
//! * `len` (`str(p, n, len)`): the string at `p` is `len` bytes long and
//!   need not end in a NUL (a buffer and its length, like MariaDB's
//!   `dispatch_command(…, char *packet, unsigned packet_length, …)`): the
//!   probe reads at most `min(len, n - 1)` bytes, still stopping at a NUL.
//!   `len` is any unsigned integer the probe computes (an argument); so
//!   `len > n - 1` says exactly whether the result was cut.
//! * A pointer the kernel cannot read (NULL, unmapped, or a user page that is
//!   not resident: probes cannot fault pages in) gives the empty string.

use crate::kexpr::STR_FUNCTIONS;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{exec_err, Result};
use datafusion::execution::context::SessionContext;
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature, Volatility};

/// One of `str`, `ustr`, `kstr` (see the module documentation).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct StrFn {
    name: &'static str,
    signature: Signature,
}

impl StrFn {
    /// The function called `name` (one of [`STR_FUNCTIONS`]).
    pub fn new(name: &'static str) -> Self {
        // Immutable, not volatile: DataFusion pushes no volatile predicate into a scan.
        StrFn { name, signature: Signature::one_of(vec![TypeSignature::Any(1), TypeSignature::Any(2), TypeSignature::Any(3)], Volatility::Immutable) }
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
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        exec_err!(
            "{}() reads kernel or user memory at the moment of the event, so it runs only in the probe; \
             use it on a column of the traced event (e.g. str(filename)), not on a computed or constant value",
            self.name
        )
    }
}

/// Registers `str`, `ustr` and `kstr` in `ctx`.
pub fn register(ctx: &SessionContext) {
    for name in STR_FUNCTIONS {
        ctx.register_udf(ScalarUDF::from(StrFn::new(name)));
    }
}
