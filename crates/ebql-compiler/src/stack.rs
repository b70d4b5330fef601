//! The compiler's own thread, with a stack deep enough for DataFusion's recursion.

use crate::error::CompileError;

/// Stack of the compiling thread. DataFusion's analyzer and optimizer recurse
/// once per expression level with large frames (a debug build overflows a
/// 2 MiB stack at ~100 chained operators); the pre-pass caps a query at
/// [`crate::prepass::MAX_OPERATORS`], which this stack holds with a wide margin.
/// Only the touched part of it is ever backed by memory.
const COMPILER_STACK_BYTES: usize = 256 << 20;

/// Runs `f` on a thread with [`COMPILER_STACK_BYTES`] of stack, so bad input
/// cannot overflow the caller's stack (a 2 MiB test thread, say). A panic in
/// `f` is propagated.
pub fn on_compiler_stack<T: Send>(f: impl FnOnce() -> T + Send) -> Result<T, CompileError> {
    std::thread::scope(|s| {
        let handle = std::thread::Builder::new()
            .name("ebql-compile".into())
            .stack_size(COMPILER_STACK_BYTES)
            .spawn_scoped(s, f)
            .map_err(|e| {
                CompileError::Internal(format!("cannot start the compiler thread: {e}"))
            })?;
        handle
            .join()
            .map_err(|panic| std::panic::resume_unwind(panic))
    })
}
