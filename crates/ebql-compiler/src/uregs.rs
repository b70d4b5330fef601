//! `uregs('name')`: a register of the current task's user-space state as
//! the kernel saved it on entry (`bpf_task_pt_regs`, Linux 5.15), as a
//! DataFusion scalar function so the planner types it (UInt64).
//!
//! Inside a system call these are its arguments (x86-64: `di`, `si`, `dx`,
//! `r10`, `r8`, `r9`) and its number (`orig_ax`), so an event deeper in
//! the kernel sees the call that led to it: `uregs('si')` at
//! `tp_btf:sock:sock_recv_length` is the buffer a `recvfrom` filled. The
//! names are `struct pt_regs`'s members in kernel BTF. Outside a system
//! call (an interrupt, a kernel thread) the registers are whatever the task
//! last saved. Addresses in them are user memory: `bytes()`, `str()` and
//! the `*_at()` loads read them with `bpf_probe_read_user`.
//!
//! The probe reads them with direct loads through BTF pointers, so only
//! BTF-typed events take them (tp_btf, fentry/fexit); like `str()` there
//! is no user-space evaluation ([`crate::kexpr`] compiles each call into
//! the probe as an [`ebql_catalog::Access::TaskRegs`] field).

use datafusion::arrow::datatypes::DataType;
use datafusion::common::{exec_err, Result};
use datafusion::execution::context::SessionContext;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// The function's name in SQL.
pub const FUNCTION: &str = "uregs";

/// `uregs(name)`: UInt64.
#[derive(Debug, PartialEq, Eq, Hash)]
struct UserRegs {
    signature: Signature,
}

impl ScalarUDFImpl for UserRegs {
    fn name(&self) -> &str {
        FUNCTION
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::UInt64)
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        exec_err!("uregs() reads the task's registers at the moment of the event, so it runs only in the probe")
    }
}

/// Registers `uregs` in `ctx`.
pub fn register(ctx: &SessionContext) {
    // Stable, not Immutable: a call with a constant argument must not be
    // folded at planning; not volatile, which DataFusion would not push into a scan.
    ctx.register_udf(ScalarUDF::from(UserRegs {
        signature: Signature::exact(vec![DataType::Utf8], Volatility::Stable),
    }));
}
