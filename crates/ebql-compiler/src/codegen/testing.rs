//! Test support for the codegen parts: queries compiled against fixed
//! tracepoint formats (no tracefs, no BPF), and their programs' listings.

use crate::{compile_query, CodegenOptions, CompiledQuery, EventSource};
use ebql_catalog::samples::{SYS_ENTER_PREAD64, SYS_EXIT_PREAD64};
use ebql_catalog::{parse_format, CatalogError, EventName, EventSchema};

/// `pread64`'s enter and exit tracepoints; every other event is unknown.
struct Fixed;

impl EventSource for Fixed {
    fn event(&self, name: &EventName) -> Result<EventSchema, CatalogError> {
        match (name.category.as_str(), name.name.as_str()) {
            ("syscalls", "sys_enter_pread64") => parse_format(name.clone(), SYS_ENTER_PREAD64),
            ("syscalls", "sys_exit_pread64") => parse_format(name.clone(), SYS_EXIT_PREAD64),
            _ => Err(CatalogError::UnknownEvent {
                name: name.table_name(),
                suggestion: None,
            }),
        }
    }
}

/// The pread64 enter tracepoint, as queries name it.
pub(super) const PREAD: &str = "tracepoint/syscalls/sys_enter_pread64";

/// `sql` compiled with the default options (panics on a compile error).
pub(super) fn compile(sql: &str) -> CompiledQuery {
    compile_with(sql, &CodegenOptions::default())
}

/// `sql` compiled with `opts` (panics on a compile error).
pub(super) fn compile_with(sql: &str, opts: &CodegenOptions) -> CompiledQuery {
    compile_query(sql, &Fixed, opts).unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// The listing of program `i` of `q` (origins, comments, disassembly).
pub(super) fn listing(q: &CompiledQuery, i: usize) -> String {
    q.code.programs[i].program.listing()
}

/// The instructions under the first origin line (`;; …`) containing `origin`, up to the next origin.
pub(super) fn section<'a>(listing: &'a str, origin: &str) -> Vec<&'a str> {
    listing
        .lines()
        .skip_while(|l| !(l.starts_with(";;") && l.contains(origin)))
        .skip(1)
        .take_while(|l| !l.starts_with(";;"))
        .filter(|l| !l.trim_start().starts_with(";;"))
        .map(|l| l.split_once(": ").map_or(l, |(_, t)| t))
        .collect()
}
