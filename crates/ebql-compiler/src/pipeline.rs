//! The compiler's passes in order, for one query: pre-pass and planning,
//! the split, codegen ([`compile_query`]), on a thread with a stack deep
//! enough for DataFusion's recursion ([`on_compiler_stack`]).

use crate::codegen::{self, CodegenOptions, Compiled};
use crate::error::CompileError;
use crate::physical::{self, PhysicalPlan};
use crate::planner::{self, EventSource, Planned};
use crate::split::{self, Split};
use crate::stack::on_compiler_stack;
use crate::syscall_hook;
use crate::wire::{self, WireRelation};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::execution::context::SessionContext;
use datafusion::logical_expr::LogicalPlan;

/// A query over a wire relation, beside its kernel part (the capture's):
/// what turns the captured rows into the relation's rows each window.
pub struct WireCapture {
    /// The relation read.
    pub relation: &'static WireRelation,
    /// The capture query's split: its kernel rows' schema (the records'
    /// layout is the compiled query's) and the user-space projection that
    /// names them (`time`, `pid`, `fd`, `id`, `ret`, `tail`, `data`).
    pub split: Split,
    /// The session the capture's projection runs in.
    pub ctx: SessionContext,
    /// The columns of [`wire::statement_schema`] the user's query reads, in the
    /// order of its placeholder's (DataFusion's projection of the scan).
    pub projection: Vec<usize>,
}

impl std::fmt::Debug for WireCapture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WireCapture")
            .field("relation", &self.relation.name)
            .field("projection", &self.projection)
            .finish()
    }
}

/// Everything compiled from one query.
pub struct CompiledQuery {
    /// The pre-pass result and DataFusion's optimized logical plan.
    pub planned: Planned,
    /// The plan cut into its kernel part and user-space remainder.
    pub split: Split,
    /// The physical decisions the code was generated under.
    pub physical: PhysicalPlan,
    /// The BPF program and maps generated for the kernel part.
    pub code: Compiled,
    /// A query over a wire relation ([`crate::wire`]): the kernel part is
    /// the relation's capture, whose rows user space decodes into the
    /// relation's before `split.remainder` runs.
    pub wire: Option<WireCapture>,
}

/// Compiles `query` against the events `source` knows, with the physical
/// choices that need no sampled rates (the rates in `opts.choices`, if
/// any, are used); [`crate::physical::compile_planned`] is the whole pass.
pub fn compile_query(
    query: &str,
    source: &dyn EventSource,
    opts: &CodegenOptions,
) -> Result<CompiledQuery, CompileError> {
    crate::views::with_views(query, |query| {
        if let Some((rel, span)) = wire::referenced(query) {
            return compile_wire(query, rel, span, source, opts, |capture, opts| {
                compile_query(capture, source, opts)
            });
        }
        compile_plain(query, source, opts)
    })
}

/// [`compile_query`] of a query without views or wire relations.
fn compile_plain(
    query: &str,
    source: &dyn EventSource,
    opts: &CodegenOptions,
) -> Result<CompiledQuery, CompileError> {
    on_compiler_stack(|| {
        let hooked = syscall_hook::HookedSource::new(source, &opts.choices);
        let mut planned = planner::plan_here(
            query,
            &hooked,
            planner::PlanMode::Kernel,
            !opts.choices.unchecked_casts,
            opts.scope,
        )?;
        planned.aggregate = opts.choices.aggregate;
        let mut split = split::split(&planned)?;
        split.kernel.hooks = hooked.hooks();
        // Physical choices, handed to codegen (which decides nothing).
        let physical = physical::choose(
            &mut split.kernel,
            &opts.choices,
            opts.task_storage,
            hooked.report(),
        )?;
        let code = codegen::compile(&split.kernel, &physical, opts)?;
        Ok(CompiledQuery {
            planned,
            split,
            physical,
            code,
            wire: None,
        })
    })?
}

/// A query over the wire relation `rel` (named at `span`): the user's
/// query planned over the relation's rows (the whole of it runs in user
/// space, over a placeholder of the scan's columns), with the kernel part
/// of the relation's capture, which `capture` compiles from its text
/// ([`wire::capture_sql`], in the user's window) with the options it is
/// given (a ring buffer of at least [`wire::CAPTURE_RINGBUF_BYTES`]).
///
/// Errors: the user's query's own; a capture this kernel cannot run is
/// reported at the relation's name.
pub(crate) fn compile_wire(
    query: &str,
    rel: &'static WireRelation,
    span: std::ops::Range<usize>,
    source: &dyn EventSource,
    opts: &CodegenOptions,
    capture: impl Fn(&str, &CodegenOptions) -> Result<CompiledQuery, CompileError>,
) -> Result<CompiledQuery, CompileError> {
    let planned = planner::plan_mode(
        query,
        source,
        planner::PlanMode::Kernel,
        !opts.choices.unchecked_casts,
        None,
    )?;
    wire::check_window(
        planned.prepared.window.as_ref(),
        planned.prepared.window_span.clone(),
    )
    .map_err(CompileError::Query)?;
    let mut scans = Vec::new();
    planned
        .plan
        .apply(|n| {
            if let LogicalPlan::TableScan(s) = n {
                scans.push(s.clone());
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .map_err(|e| CompileError::Internal(e.to_string()))?;
    let [scan] = scans.as_slice() else {
        return Err(CompileError::Query(
            crate::diag::Diagnostic::new(
                format!("{} is read alone: its rows are decoded in user space, and a query reads it or events, not both", rel.name),
                Some(span),
            )
            .with_hint("query the relation on its own (a view of it may filter and aggregate)"),
        ));
    };
    let (kernel_schema, input, with) = split::parts::placeholder(&scan.projected_schema)?;
    let remainder =
        split::parts::replace_node(&planned.plan, &LogicalPlan::TableScan(scan.clone()), with)?;
    let projection = scan
        .projection
        .clone()
        .unwrap_or_else(|| (0..wire::statement_schema().fields().len()).collect());
    let hook = wire::CaptureHook::choose(opts.choices.hook, |event| source.event(event).is_ok());
    let window = planned.prepared.window.as_ref();
    let peer = wire::PeerColumns::for_projection(&projection);
    let text = wire::capture_sql(rel, window, hook, peer);
    // Every server call is a record: room for about a second of a busy server's.
    let mut capture_opts = *opts;
    capture_opts.ringbuf_bytes = capture_opts.ringbuf_bytes.max(wire::CAPTURE_RINGBUF_BYTES);
    let compile_capture = |text: &str| {
        capture(text, &capture_opts).map_err(|e| match e {
            CompileError::Query(d) => CompileError::Query(
                crate::diag::Diagnostic::new(
                    format!("{} cannot be captured: {}", rel.name, d.message),
                    Some(span.clone()),
                )
                .with_hint(d.hint.unwrap_or_else(|| format!("its capture is `{text}`"))),
            ),
            other => other,
        })
    };
    let mut captured = compile_capture(&text)?;
    if hook == wire::CaptureHook::Sockets {
        // The same query over the socket writes, a program of its own
        // writing the same stream (a branch, crate::multi, of one layout).
        for event in &wire::SOCKET_EVENTS[1..] {
            let other = compile_capture(&wire::capture_sql_on(rel, window, hook, peer, event))?;
            captured.split.kernel.branches.push(other.split.kernel);
        }
        captured.code =
            codegen::compile(&captured.split.kernel, &captured.physical, &capture_opts)?;
    }
    let user_ops = vec![format!(
        "{} decoded from the capture's rows: {}",
        rel.name, rel.doc
    )];
    let split = split::parts::finish(
        &planned,
        captured.split.kernel.clone(),
        kernel_schema,
        input,
        remainder,
        user_ops,
    )?;
    Ok(CompiledQuery {
        planned,
        split,
        physical: captured.physical,
        code: captured.code,
        wire: Some(WireCapture {
            relation: rel,
            split: captured.split,
            ctx: captured.planned.ctx,
            projection,
        }),
    })
}
