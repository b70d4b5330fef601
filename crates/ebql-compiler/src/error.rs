//! The compiler's error type: why a query could not be compiled, by fault.

use crate::diag::Diagnostic;

/// Why a query could not be compiled, by fault.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// The query is wrong or asks for something unsupported: the user can fix it.
    #[error("{0}")]
    Query(Diagnostic),
    /// The event catalog (tracefs) could not be read.
    #[error(transparent)]
    Catalog(#[from] ebql_catalog::CatalogError),
    /// A bug in eBQL.
    #[error("internal error (a bug in eBQL, please report it): {0}")]
    Internal(String),
}
