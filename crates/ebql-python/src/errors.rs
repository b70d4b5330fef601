//! The package's exceptions, and engine errors converted to them.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(ebql, Error, PyException, "Base class of eBQL's errors.");
create_exception!(
    ebql,
    QueryError,
    Error,
    "The query is wrong or unsupported (the CLI's exit code 2).\n\n\
     str() is the diagnostic as the CLI prints it: the offending line with `~~~`\n\
     under the culprit, then the hint. Attributes: `message` (str), `hint`\n\
     (str or None), `position` ((line, first_column, last_column), 1-based,\n\
     columns in characters, end inclusive; None when no position applies),\n\
     `span` ((start, end) byte offsets into `query`, or None), `query` (str)."
);
create_exception!(
    ebql,
    KernelError,
    Error,
    "The system or eBQL failed while running a valid query (the CLI's exit code 1):\n\
     a syscall refused (permissions, limits, a missing kernel feature), tracefs\n\
     missing, the verifier rejecting generated code, or a bug. Attribute `hint`\n\
     (str or None) says what to do when known."
);

create_exception!(
    ebql,
    WindowFailed,
    pyo3::exceptions::PyUserWarning,
    "A window's result could not be computed (an exact SUM beyond its result\n\
     type, a failing CAST, a division by zero): its batch has no rows and its\n\
     schema metadata holds the cause under b'ebql.window_error'. Issued as a\n\
     warning; the query goes on with the next window, and stats()\n\
     counts such windows in windows_failed."
);

/// Converts an engine error to the Python exception for its fault.
pub(crate) fn to_py(py: Python<'_>, e: ebql::Error) -> PyErr {
    let text = e.render().trim_end().to_string();
    match &e {
        ebql::Error::Query { query, diagnostic } => {
            let err = QueryError::new_err(text);
            let v = err.value(py);
            let span = diagnostic
                .span
                .clone()
                .filter(|s| s.start <= query.len() && s.end <= query.len());
            let attrs = (|| -> PyResult<()> {
                v.setattr("message", &diagnostic.message)?;
                v.setattr("hint", diagnostic.hint.as_deref())?;
                v.setattr("query", query)?;
                v.setattr("span", span.as_ref().map(|s| (s.start, s.end)))?;
                v.setattr("position", span.map(|s| position(query, s)))?;
                Ok(())
            })();
            attrs.err().unwrap_or(err)
        }
        other => {
            let hint = match other {
                ebql::Error::Runtime(r) => r.hint(),
                _ => None,
            };
            let err = KernelError::new_err(text);
            match err.value(py).setattr("hint", hint) {
                Ok(()) => err,
                Err(e) => e,
            }
        }
    }
}

/// `(line, first_column, last_column)` of a byte span, 1-based, columns in
/// characters, end inclusive and clamped to the span's first line: the
/// numbers of the rendered diagnostic's `query:LINE:FIRST-LAST:` header.
fn position(query: &str, span: std::ops::Range<usize>) -> (usize, usize, usize) {
    let before = &query[..span.start];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line_end = query[span.start..]
        .find('\n')
        .map_or(query.len(), |i| span.start + i);
    let end = span.end.clamp(span.start, line_end);
    let first = before[line_start..].chars().count() + 1;
    let width = query[span.start..end].chars().count().max(1);
    (line, first, first + width - 1)
}
