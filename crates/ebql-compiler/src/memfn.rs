//! `u64_at(p)`, `u32_at(p)`, … `i8_at(p)`: the integer stored at address `p`,
//! read by the probe at the event, as DataFusion scalar functions so the
//! planner types them (the type the name says).
//!
//! They follow pointers the event's arguments hold into structures the
//! binary does not describe (a stripped binary has no debug information):
//! `u64_at(arg0 + 56)` is the field at byte 56 of the structure `arg0`
//! points to. The memory is the traced process's for uprobes, USDT probes
//! and system-call tracepoints, the kernel's for other events (the rule of
//! `str()`, [`ebql_catalog::EventName::pointers_are_user`]); it is read with
//! `bpf_probe_read_user` / `bpf_probe_read_kernel`. An address the probe
//! cannot read (NULL, unmapped, a user page not resident) gives 0. Like
//! `str()`, they have no user-space evaluation: the split compiles each call
//! into the probe ([`crate::kexpr::KExpr::Load`]); on a pairing's start
//! event, the start program reads it and stores the value.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::{exec_err, Result};
use datafusion::execution::context::SessionContext;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// The functions and the type each reads.
pub const LOAD_FUNCTIONS: [(&str, DataType); 8] = [
    ("u8_at", DataType::UInt8),
    ("u16_at", DataType::UInt16),
    ("u32_at", DataType::UInt32),
    ("u64_at", DataType::UInt64),
    ("i8_at", DataType::Int8),
    ("i16_at", DataType::Int16),
    ("i32_at", DataType::Int32),
    ("i64_at", DataType::Int64),
];

/// The type `name` reads, if it is one of [`LOAD_FUNCTIONS`].
pub fn load_type(name: &str) -> Option<DataType> {
    LOAD_FUNCTIONS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| t.clone())
}

/// One of [`LOAD_FUNCTIONS`].
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct LoadFn {
    name: &'static str,
    ty: DataType,
    signature: Signature,
}

impl ScalarUDFImpl for LoadFn {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(self.ty.clone())
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        exec_err!("{}() reads memory at the moment of the event, so it runs only in the probe; its address must be computed from the event's columns in the kernel", self.name)
    }
}

/// Registers the [`LOAD_FUNCTIONS`] in `ctx`.
pub fn register(ctx: &SessionContext) {
    for (name, ty) in LOAD_FUNCTIONS {
        // Stable: memory changes between events, so a constant address must not be
        // folded at planning (as Immutable would); not volatile, which DataFusion
        // would not push into a scan.
        ctx.register_udf(ScalarUDF::from(LoadFn {
            name,
            ty,
            signature: Signature::any(1, Volatility::Stable),
        }));
    }
}
