//! Logical planning with Apache DataFusion: each event is a table whose
//! provider answers filter pushdown with `Exact` exactly when our BPF backend
//! compiles the predicate, so DataFusion's own optimizer does predicate and
//! projection pushdown, conjunct splitting and constant folding for us.

use crate::attrs::attr_type;
use crate::diag::{catalog_diag, offset_of, suggest, Diagnostic};
use crate::error::CompileError;
use crate::kexpr::{translate_pred, Scope};
use crate::prepass::{prepare, Prepared};
use crate::scope::ProcessScope;
use async_trait::async_trait;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{DFSchema, DataFusionError, ExprSchema, SchemaError};
use datafusion::datasource::MemTable;
use datafusion::execution::context::{SessionConfig, SessionContext};
use datafusion::logical_expr::{Expr, LogicalPlan, TableProviderFilterPushDown, TableType};
use datafusion::physical_plan::ExecutionPlan;
use ebql_catalog::{CatalogError, EventName, EventSchema, FieldKind};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Where event schemas come from: tracefs in production, fixed texts in tests.
/// `Sync`: queries are compiled on a thread of their own (see [`crate::compile_query`]).
pub trait EventSource: Sync {
    /// The schema of event `name`; an error if it does not exist or cannot be read.
    fn event(&self, name: &EventName) -> Result<EventSchema, CatalogError>;

    /// The column `path` (a dotted name split at the dots, e.g. `prev`,
    /// `comm`) of `event`, for kinds with BTF-typed arguments
    /// ([`ebql_catalog::source::field_path`]); `Ok(None)` when it is no path of the event.
    fn field_path(
        &self,
        event: &EventSchema,
        path: &[String],
    ) -> Result<Option<ebql_catalog::TraceField>, CatalogError> {
        ebql_catalog::source::field_path(&event.event, path)
    }
}

impl EventSource for ebql_catalog::Catalog {
    fn event(&self, name: &EventName) -> Result<EventSchema, CatalogError> {
        ebql_catalog::Catalog::event(self, name)
    }
}

/// The Arrow schema of an event table: its queryable tracepoint fields (integers
/// by size and sign, pointers as UInt64, char arrays and `__data_loc` strings as Utf8), then the system
/// attributes the event has ([`EventSchema::attrs`]), each named `sys_<name>`
/// where a field of the same name shadows it. Stack columns are Utf8 (their symbolized frames) marked with
/// [`crate::contract::STACK_METADATA`]. No column is nullable.
pub fn event_arrow_schema(ev: &EventSchema) -> SchemaRef {
    let mut fields = Vec::new();
    for f in &ev.fields {
        if let ebql_catalog::Access::StackId { user } = f.access {
            // A stack id in the kernel, its frames in user space (crate `ebql`, `symbolize`).
            let kind = if user { "user" } else { "kernel" };
            let meta = std::collections::HashMap::from([(
                crate::contract::STACK_METADATA.to_string(),
                kind.to_string(),
            )]);
            fields.push(Field::new(&f.name, DataType::Utf8, false).with_metadata(meta));
            continue;
        }
        let dt = match (&f.kind, crate::kexpr::field_expr(f)) {
            (_, Some(e)) => e.ty().data_type(),
            (FieldKind::CharArray { .. } | FieldKind::DataLocString, _) => DataType::Utf8,
            _ => continue,
        };
        let field = Field::new(&f.name, dt, false);
        let root =
            f.kind == FieldKind::Pointer && ebql_catalog::source::struct_fields_hint(f).is_some();
        fields.push(if root {
            field.with_metadata([(crate::paths::PATH_ROOT.to_string(), String::new())].into())
        } else {
            field
        });
    }
    for &a in &ev.attrs {
        // A field of the same name shadows the attribute, reachable as
        // `sys_<name>` ([`EventSchema::resolve`]).
        let name = match ev.field(a.name()) {
            None => a.name().to_string(),
            Some(_) => format!("sys_{}", a.name()),
        };
        fields.push(Field::new(name, attr_type(a), false));
    }
    Arc::new(Schema::new(fields))
}

/// How much of a query the kernel may run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PlanMode {
    /// Push every filter and aggregate the BPF backend compiles into the kernel.
    #[default]
    Kernel,
    /// The differential oracle's reference: no filter or aggregate is pushed,
    /// the kernel only streams the columns the query reads and DataFusion
    /// evaluates all of the SQL.
    Reference,
}

/// A tracepoint as a DataFusion table. Never scanned by DataFusion: the
/// runtime produces its rows; it exists for planning and pushdown answers.
#[derive(Debug)]
pub struct EventTable {
    /// The event's schema.
    pub event: EventSchema,
    schema: SchemaRef,
    /// The schema qualified by the table name, as filters reference it.
    qualified: DFSchema,
    mode: PlanMode,
}

impl EventTable {
    /// The table for `event`, named `table` (its identifier in the rewritten SQL).
    pub fn new(
        table: &str,
        event: EventSchema,
        mode: PlanMode,
    ) -> datafusion::common::Result<Self> {
        let schema = event_arrow_schema(&event);
        let qualified = DFSchema::try_from_qualified_schema(
            datafusion::common::TableReference::bare(table),
            &schema,
        )?;
        Ok(EventTable {
            event,
            schema,
            qualified,
            mode,
        })
    }
}

#[async_trait]
impl TableProvider for EventTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn table_type(&self) -> TableType {
        TableType::Base
    }
    async fn scan(
        &self,
        _state: &dyn Session,
        _projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> datafusion::common::Result<Arc<dyn ExecutionPlan>> {
        Err(DataFusionError::Internal(
            "event tables are produced by the eBQL runtime, not scanned".into(),
        ))
    }
    /// `Exact` when the BPF backend compiles the predicate (it then runs in
    /// the kernel before anything else), `Unsupported` otherwise (user space).
    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> datafusion::common::Result<Vec<TableProviderFilterPushDown>> {
        let scope = Scope {
            event: &self.event,
            schema: &self.qualified,
            start: None,
        };
        Ok(filters
            .iter()
            .map(|f| match translate_pred(f, &scope) {
                Ok(_) if self.mode == PlanMode::Kernel => TableProviderFilterPushDown::Exact,
                _ => TableProviderFilterPushDown::Unsupported,
            })
            .collect())
    }
}

/// The input of the user-space part of a plan: rows the kernel produced for
/// one window (or one drain of the ring buffer), set before each execution.
#[derive(Debug)]
pub struct WindowInput {
    schema: SchemaRef,
    batches: Mutex<Vec<datafusion::arrow::record_batch::RecordBatch>>,
}

impl WindowInput {
    /// An input of `schema` holding no rows yet.
    pub fn new(schema: SchemaRef) -> Self {
        WindowInput {
            schema,
            batches: Mutex::new(Vec::new()),
        }
    }
    /// Replaces the rows the next execution reads.
    pub fn set(&self, batches: Vec<datafusion::arrow::record_batch::RecordBatch>) {
        *self.batches.lock().unwrap() = batches;
    }
}

#[async_trait]
impl TableProvider for WindowInput {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn table_type(&self) -> TableType {
        TableType::Temporary
    }
    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> datafusion::common::Result<Arc<dyn ExecutionPlan>> {
        let batches = self.batches.lock().unwrap().clone();
        MemTable::try_new(self.schema.clone(), vec![batches])?
            .scan(state, projection, filters, limit)
            .await
    }
}

/// A planned query: the pre-pass result, the event schemas by table name, and
/// DataFusion's optimized logical plan.
pub struct Planned {
    /// The query as the user typed it (diagnostics point into it).
    pub query: String,
    /// Result of the pre-pass.
    pub prepared: Prepared,
    /// Event schema per table identifier.
    pub events: HashMap<String, EventSchema>,
    /// DataFusion's optimized logical plan.
    pub plan: LogicalPlan,
    /// The session the plan was built in (event tables registered); the
    /// user-space remainder runs in it.
    pub ctx: SessionContext,
    /// What the kernel may run.
    pub mode: PlanMode,
    /// Where an aggregate both sides can run goes (the split reads it;
    /// [`PlanMode::Reference`] pushes none anyway).
    pub aggregate: crate::choose::AggregateChoice,
}

/// A DataFusion session configured for eBQL: one partition, spans collected
/// for diagnostics. `checked_casts` false leaves out [`crate::intcast::NarrowingCasts`]
/// (see [`crate::choose::PlanChoices::unchecked_casts`]).
pub fn session(checked_casts: bool) -> SessionContext {
    let mut config = SessionConfig::new()
        .with_target_partitions(1)
        .with_information_schema(false);
    config.options_mut().sql_parser.collect_spans = true;
    // `ebql.wall_offset_ns`, which the executor sets when the query starts.
    let config = crate::walltime::with_run_clock(config);
    let mut rules = datafusion::optimizer::Analyzer::new().rules;
    rules.insert(0, Arc::new(crate::coerce::UnsignedLiterals));
    // After DataFusion's type coercion, which adds casts of its own.
    if checked_casts {
        rules.push(Arc::new(crate::intcast::NarrowingCasts));
    }
    let state = datafusion::execution::SessionStateBuilder::new()
        .with_config(config)
        .with_default_features()
        .with_analyzer_rules(rules)
        .build();
    // Struct paths (`prev.comm`) before DataFusion's own struct field access.
    let mut planners: Vec<Arc<dyn datafusion::logical_expr::planner::ExprPlanner>> =
        vec![Arc::new(crate::paths::PathPlanner)];
    planners.extend(datafusion::execution::FunctionRegistry::expr_planners(
        &state,
    ));
    let state = datafusion::execution::SessionStateBuilder::new_from_existing(state)
        .with_expr_planners(planners)
        .build();
    let ctx = SessionContext::new_with_state(state);
    crate::udaf::register(&ctx);
    crate::checked_sum::register(&ctx);
    crate::intcast::register(&ctx);
    crate::strfn::register(&ctx);
    crate::memfn::register(&ctx);
    crate::uregs::register(&ctx);
    crate::walltime::register(&ctx);
    crate::names::register(&ctx);
    ctx
}

/// Pre-pass, bind and optimize `query` for the kernel. Errors point into `query`.
pub fn plan(query: &str, source: &dyn EventSource) -> Result<Planned, CompileError> {
    plan_mode(query, source, PlanMode::Kernel, true, None)
}

/// [`plan`], with `mode` deciding what may be pushed into the kernel;
/// `checked_casts` as in [`session`]; `scope`: the processes every event
/// is filtered to ([`crate::scope`]).
pub fn plan_mode(
    query: &str,
    source: &dyn EventSource,
    mode: PlanMode,
    checked_casts: bool,
    scope: Option<ProcessScope>,
) -> Result<Planned, CompileError> {
    crate::stack::on_compiler_stack(|| plan_here(query, source, mode, checked_casts, scope))?
}

/// [`plan_mode`] on the caller's stack.
pub(crate) fn plan_here(
    query: &str,
    source: &dyn EventSource,
    mode: PlanMode,
    checked_casts: bool,
    scope: Option<ProcessScope>,
) -> Result<Planned, CompileError> {
    let prepared = prepare(query).map_err(CompileError::Query)?;
    let ctx = session(checked_casts);
    let mut events = HashMap::new();
    for r in &prepared.events {
        if events.contains_key(&r.table) {
            continue; // the same event twice (a self-join): one table
        }
        let mut schema = source.event(&r.event).map_err(|e| match e {
            CatalogError::UnknownEvent { .. }
            | CatalogError::BadEventName { .. }
            | CatalogError::BadParameter { .. }
            | CatalogError::Unavailable { .. }
            | CatalogError::BadBinary { .. }
            | CatalogError::NotInBinary { .. } => {
                CompileError::Query(catalog_diag(&e, r.span.clone()))
            }
            other => CompileError::Catalog(other),
        })?;
        add_path_columns(&mut schema, &prepared, source)?;
        let table = EventTable::new(&r.table, schema.clone(), mode)
            .map_err(|e| CompileError::Internal(e.to_string()))?;
        // As is: a &str would be parsed as SQL and lowercased (`ReadyForQuery`), the query quotes it.
        ctx.register_table(
            datafusion::common::TableReference::bare(r.table.as_str()),
            Arc::new(table),
        )
        .map_err(|e| CompileError::Internal(e.to_string()))?;
        events.insert(r.table.clone(), schema);
    }
    if let Some((rel, _)) = crate::wire::referenced(query) {
        register_wire_table(&ctx, rel)?;
    }
    let state = ctx.state();
    let to_diag =
        |e: DataFusionError| CompileError::Query(datafusion_diag(&e, query, &prepared, &events));
    let logical =
        futures::executor::block_on(state.create_logical_plan(&prepared.sql)).map_err(to_diag)?;
    check_is_query(&logical, &prepared)?;
    check_no_placeholders(&logical, query)?;
    let logical = match scope {
        Some(scope) => crate::scope::apply(logical, scope, &events, &prepared)?,
        None => logical,
    };
    let logical = crate::latest::order_by_recency(logical, &events).map_err(to_diag)?;
    let plan = state.optimize(&logical).map_err(to_diag)?;
    check_reads_one_event(&plan, &prepared)?;
    check_implicit_string_casts(&plan, query)?;
    crate::refuse::check_constants(&plan, query, whole_query_span(&prepared))?;
    Ok(Planned {
        query: query.to_string(),
        prepared,
        events,
        plan,
        ctx,
        mode,
        aggregate: crate::choose::AggregateChoice::Auto,
    })
}

/// Registers `rel` as a table of [`crate::wire::statement_schema`] with no
/// rows: the pipeline replaces its scan by the rows decoded each window
/// ([`crate::pipeline::compile_wire`]); filters over it run in user space.
fn register_wire_table(
    ctx: &SessionContext,
    rel: &crate::wire::WireRelation,
) -> Result<(), CompileError> {
    let internal = |e: DataFusionError| CompileError::Internal(e.to_string());
    let catalog = ctx
        .catalog("datafusion")
        .ok_or_else(|| CompileError::Internal("no default catalog".into()))?;
    catalog
        .register_schema(
            rel.parts.0,
            Arc::new(datafusion::catalog::MemorySchemaProvider::new()),
        )
        .map_err(internal)?;
    let table =
        MemTable::try_new(crate::wire::statement_schema(), vec![vec![]]).map_err(internal)?;
    ctx.register_table(
        datafusion::common::TableReference::partial(rel.parts.0, rel.parts.1),
        Arc::new(table),
    )
    .map_err(internal)?;
    Ok(())
}

/// Adds to `schema` the struct paths (`prev.comm`) the query names that are
/// rooted at one of its arguments (each suffix of a chain is tried: `s.prev.comm`
/// may be alias `s`, path `prev.comm`).
fn add_path_columns(
    schema: &mut EventSchema,
    prepared: &Prepared,
    source: &dyn EventSource,
) -> Result<(), CompileError> {
    for (parts, range) in crate::paths::dotted_names(&prepared.sql) {
        for k in 0..parts.len() - 1 {
            let path = &parts[k..];
            let name = path.join(".");
            if schema.field(&name).is_some() || schema.field(&path[0]).is_none() {
                continue;
            }
            match source.field_path(schema, path) {
                Ok(Some(f)) => schema.fields.push(f),
                Ok(None) => {}
                Err(e @ CatalogError::UnknownField { .. }) => {
                    let span = prepared.map.range_to_original(range.clone());
                    return Err(CompileError::Query(catalog_diag(&e, span)));
                }
                Err(e) => return Err(CompileError::Catalog(e)),
            }
            break;
        }
    }
    Ok(())
}

/// Rejects statements that are not queries (DDL, DML, EXPLAIN, SET, ...):
/// DataFusion plans some of them, but eBQL only runs SELECT.
fn check_is_query(plan: &LogicalPlan, prepared: &Prepared) -> Result<(), CompileError> {
    let what = match plan {
        LogicalPlan::Ddl(_) => "definitions (CREATE, DROP)",
        LogicalPlan::Dml(_) | LogicalPlan::Copy(_) => "changes (INSERT, UPDATE, DELETE, COPY)",
        LogicalPlan::Explain(_) | LogicalPlan::Analyze(_) => "EXPLAIN",
        LogicalPlan::Statement(_) => "statements other than SELECT (SET, transactions, PREPARE)",
        LogicalPlan::DescribeTable(_) => "DESCRIBE",
        _ => return Ok(()),
    };
    let span = first_word_span(prepared);
    let hint = if what == "EXPLAIN" {
        "run `ebql explain QUERY` instead"
    } else {
        "eBQL runs SELECT queries over events"
    };
    Err(CompileError::Query(
        Diagnostic::new(format!("{what} are not supported"), Some(span)).with_hint(hint),
    ))
}

/// `$1` and `?` are parameters of prepared statements; eBQL has no way to bind them.
fn check_no_placeholders(plan: &LogicalPlan, query: &str) -> Result<(), CompileError> {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    let mut found: Option<String> = None;
    plan.apply_with_subqueries(|n| {
        for e in n.expressions() {
            e.apply(|x| {
                if let Expr::Placeholder(p) = x {
                    found.get_or_insert(p.id.clone());
                }
                Ok(TreeNodeRecursion::Continue)
            })?;
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .map_err(|e| CompileError::Internal(e.to_string()))?;
    let Some(id) = found else { return Ok(()) };
    let at = query.find(&id).or_else(|| query.find('?')).unwrap_or(0);
    let len = if query[at..].starts_with(&id) {
        id.len()
    } else {
        1
    };
    Err(CompileError::Query(
        Diagnostic::new(
            "query parameters ($1, ?) are not supported",
            Some(at..(at + len).min(query.len())),
        )
        .with_hint("write the value into the query"),
    ))
}

/// After optimization at least one event must be scanned: none means the
/// query reads no event (or can never return a row); several is a pairing,
/// a union or a join of relations, each scan in the plan itself.
fn check_reads_one_event(plan: &LogicalPlan, prepared: &Prepared) -> Result<(), CompileError> {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    let mut scans = 0;
    plan.apply_with_subqueries(|n| {
        scans += matches!(n, LogicalPlan::TableScan(_)) as usize;
        Ok(TreeNodeRecursion::Continue)
    })
    .map_err(|e| CompileError::Internal(e.to_string()))?;
    // Scans the split sees: not those inside expressions (a subquery the
    // optimizer could not turn into a join).
    let mut planned_scans = 0;
    plan.apply(|n| {
        planned_scans += matches!(n, LogicalPlan::TableScan(_)) as usize;
        Ok(TreeNodeRecursion::Continue)
    })
    .map_err(|e| CompileError::Internal(e.to_string()))?;
    let d = match (scans, prepared.events.as_slice()) {
        (1, _) => return Ok(()),
        // A pairing, a union, a join of relations: the split (crate::multi, crate::pair).
        (n, _) if n >= 2 && planned_scans == n => return Ok(()),
        (0, []) => Diagnostic::new("the query reads no event", Some(prepared.sql_end..prepared.sql_end))
            .with_hint("add FROM tracepoint/<category>/<name>; `ebql events` lists them"),
        (0, [first, ..]) => Diagnostic::new("the query can never return a row", Some(first.span.clone()))
            .with_hint("its WHERE condition is always false or its LIMIT is 0, so no probe would ever be needed"),
        (_, events) => Diagnostic::new(
            "a subquery inside an expression that DataFusion cannot turn into a join is not supported",
            Some(events.get(1).unwrap_or(&events[0]).span.clone()),
        )
        .with_hint("write it as a JOIN of a subquery in FROM, or as two queries"),
    };
    Err(CompileError::Query(d))
}

/// The first word of the query (after whitespace and comments), or where the query ends.
fn first_word_span(prepared: &Prepared) -> std::ops::Range<usize> {
    let sql = &prepared.sql;
    match sql.find(|c: char| !c.is_whitespace()) {
        Some(start) => {
            let len = sql[start..]
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(sql.len() - start)
                .max(1);
            prepared.map.range_to_original(start..start + len)
        }
        None => prepared.sql_end..prepared.sql_end,
    }
}

/// Turns a DataFusion error into a positioned diagnostic about the user's query.
pub fn datafusion_diag(
    e: &DataFusionError,
    query: &str,
    prepared: &Prepared,
    events: &HashMap<String, EventSchema>,
) -> Diagnostic {
    let span = e
        .iter()
        .find_map(|x| x.diagnostic())
        .and_then(|d| d.span)
        .and_then(|s| {
            let a = offset_of(&prepared.sql, s.start.line, s.start.column)?;
            let b = offset_of(&prepared.sql, s.end.line, s.end.column)
                .unwrap_or(a + 1)
                .max(a + 1);
            Some(prepared.map.range_to_original(a..b))
        });
    let root = e.find_root();
    if let DataFusionError::SchemaError(err, _) = root {
        if let SchemaError::FieldNotFound {
            field,
            valid_fields,
        } = err.as_ref()
        {
            let name = &field.name;
            if events.is_empty() {
                return Diagnostic::new(
                    "the query reads no event",
                    Some(prepared.sql_end..prepared.sql_end),
                )
                .with_hint(format!(
                    "'{name}' is a column of an event: add FROM tracepoint/<category>/<name>"
                ));
            }
            let event = events.values().next();
            let where_ = event
                .map(|ev| format!(" in {}:{}", ev.event.category, ev.event.name))
                .unwrap_or_default();
            let span = span.or_else(|| find_word(query, name));
            let mut d = Diagnostic::new(format!("unknown field '{name}'{where_}"), span);
            let mut candidates: Vec<String> = valid_fields.iter().map(|c| c.name.clone()).collect();
            for ev in events.values() {
                candidates.extend(
                    event_arrow_schema(ev)
                        .fields()
                        .iter()
                        .map(|f| f.name().clone()),
                );
            }
            // An integer array field is its elements (`args[0]` …): the array itself, or an index past its end.
            let array = name
                .strip_suffix(']')
                .and_then(|n| n.rsplit_once('['))
                .map_or(name.as_str(), |(a, _)| a);
            let elements = (0..)
                .take_while(|i| candidates.contains(&format!("{array}[{i}]")))
                .count();
            if elements > 0 {
                return d.with_hint(format!("`{array}` is an array of {elements}: read its elements as `{array}[0]` … `{array}[{}]` (indexed from 0, as in C)", elements - 1));
            }
            d = match suggest(name, candidates.iter().map(String::as_str)) {
                Some(s) => d.with_hint(format!("did you mean '{s}'?")),
                None => d.with_hint("`ebql describe EVENT` lists the fields and system attributes"),
            };
            return d;
        }
    }
    let raw = root.to_string();
    if let Some(d) = end_of_input_diag(&raw, query, prepared) {
        return d;
    }
    if raw.contains("No SQL statements were provided") {
        return Diagnostic::new(
            "the query is empty",
            Some(prepared.sql_end..prepared.sql_end),
        )
        .with_hint(
            "write SELECT … FROM tracepoint/<category>/<name>; `ebql events` lists the events",
        );
    }
    if raw.contains("RecursionLimitExceeded") {
        return Diagnostic::new(
            "the query nests too deeply",
            Some(whole_query_span(prepared)),
        )
        .with_hint("sqlparser allows 50 levels of nested expressions, functions and subqueries");
    }
    if let Some(table) = raw
        .strip_prefix("Error during planning: table '")
        .and_then(|r| r.split("' not found").next())
    {
        let name = table.rsplit('.').next().unwrap_or(table);
        let span = span
            .or_else(|| find_word(query, name))
            .unwrap_or_else(|| whole_query_span(prepared));
        return Diagnostic::new(format!("`{name}` is not an event"), Some(span))
            .with_hint("events are named tracepoint/<category>/<name>; `ebql events` lists them");
    }
    let function = raw
        .split('\'')
        .nth(1)
        .filter(|_| raw.contains("No function matches") || raw.contains("does not support"));
    let span = span
        .or_else(|| parser_location(&raw, prepared, query))
        .or_else(|| cast_literal_span(&raw, query))
        .or_else(|| function.and_then(|f| find_word(query, f)));
    // Errors DataFusion does not locate are about the whole query.
    let span = span.or_else(|| Some(whole_query_span(prepared)));
    let message = clean_message(&raw);
    // DataFusion lists candidate signatures on the lines after the message.
    let candidates: Vec<&str> = raw
        .lines()
        .skip_while(|l| !l.contains("Candidate functions:"))
        .skip(1)
        .map(str::trim)
        .collect();
    if !candidates.is_empty() {
        return Diagnostic::new(message, span)
            .with_hint(format!("it takes {}", candidates.join(" or ")));
    }
    if let Some(d) = pointer_compared_with_text(&message, span.clone(), query, events) {
        return d;
    }
    let hint = if raw.contains("ParserError") || raw.contains("TokenizerError") {
        "eBQL is SQL: SELECT … FROM tracepoint/<category>/<name> [WHERE …] [GROUP BY …] [HAVING …] [ORDER BY …] [LIMIT n] [WINDOW(time, ms, ms)]"
    } else if message.contains("type") || raw.contains("coerc") || raw.contains("Cannot") {
        "check the types: `ebql describe EVENT` shows each column's type; strings are compared to 'quoted' literals"
    } else {
        "see the query language reference in README.md"
    };
    Diagnostic::new(message, span).with_hint(hint)
}

/// A string literal compared with a pointer field (`filename = '/etc/passwd'`):
/// the field is an address; its text is `str(filename)`. The field is the
/// identifier right before the literal's comparison operator.
fn pointer_compared_with_text(
    message: &str,
    span: Option<std::ops::Range<usize>>,
    query: &str,
    events: &HashMap<String, EventSchema>,
) -> Option<Diagnostic> {
    // `p LIKE 'x%'`: DataFusion names no position, only the two types.
    if message.contains("coerce") && message.contains("Utf8") {
        let (word, at) = events.values().find_map(|e| {
            e.fields
                .iter()
                .filter(|f| f.kind == FieldKind::Pointer)
                .find_map(|f| Some((f.name.clone(), find_word(query, &f.name)?)))
        })?;
        return Some(pointer_diag(&word, at));
    }
    if !message.starts_with("type error: the string") {
        return None;
    }
    let span = span?;
    let before = query.get(..span.start)?.trim_end();
    let before = before
        .trim_end_matches(|c: char| "=<>!(, ".contains(c))
        .trim_end();
    let before = before
        .strip_suffix("LIKE")
        .or_else(|| before.strip_suffix("like"))
        .or_else(|| before.strip_suffix("IN"))
        .or_else(|| before.strip_suffix("in"))
        .unwrap_or(before)
        .trim_end();
    let word: String = before
        .chars()
        .rev()
        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '.')
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    let field = word.rsplit('.').next()?;
    let pointer = events
        .values()
        .any(|e| e.field(field).is_some_and(|f| f.kind == FieldKind::Pointer));
    pointer.then(|| pointer_diag(&word, span))
}

fn pointer_diag(word: &str, span: std::ops::Range<usize>) -> Diagnostic {
    Diagnostic::new(
        format!("type error: `{word}` is a pointer (an address), compared with text"),
        Some(span),
    )
    .with_hint(format!(
        "compare the string it points to: write str({word}) instead of {word}"
    ))
}

/// From the first word of the query to the end of its last token.
fn whole_query_span(prepared: &Prepared) -> std::ops::Range<usize> {
    let first = first_word_span(prepared);
    first.start..prepared.sql_end.max(first.end)
}

/// sqlparser's "Expected: X, found: EOF": the query (or, after the pre-pass
/// moved clauses or cut the WINDOW, the clause) stops before it is complete.
/// Points right after the last token, where something is missing.
fn end_of_input_diag(raw: &str, query: &str, prepared: &Prepared) -> Option<Diagnostic> {
    let rest = &raw[raw.find("Expected: ")? + 10..];
    let expected = &rest[..rest.find(", found: EOF")?];
    let end = prepared.sql_end;
    let tail = query[end..].trim_start();
    let at_end = tail.is_empty()
        || tail.starts_with("--")
        || tail.starts_with("/*")
        || tail.starts_with(';');
    let (message, hint) = if at_end {
        (
            "unexpected end of query",
            format!("the query ends here; expected {expected}"),
        )
    } else {
        (
            "unexpected end of clause",
            format!("this clause ends here; expected {expected}"),
        )
    };
    Some(Diagnostic::new(message, Some(end..end)).with_hint(hint))
}

/// DataFusion's and sqlparser's messages, minus their wrapping.
fn clean_message(m: &str) -> String {
    // An aggregate given an argument type it has no signature for: DataFusion
    // reports it as an internal error; it is the query's (`SUM(comm)`).
    if let Some(rest) = m
        .split("Function '")
        .nth(1)
        .filter(|_| m.contains("failed to match any signature"))
    {
        let function = rest.split('\'').next().unwrap_or(rest);
        let received = m
            .split("but received ")
            .nth(1)
            .and_then(|r| r.split([' ', '.', ',']).next())
            .unwrap_or("this");
        return format!(
            "type error: {function}() cannot take a {} argument",
            received.to_lowercase()
        );
    }
    let mut m = m.lines().next().unwrap_or(m).to_string();
    if let Some(i) = m.find(". No function matches") {
        m.truncate(i);
    }
    for wrapper in [
        "Error during planning: ",
        "SQL error: ",
        "Arrow error: ",
        "ParserError(\"",
        "TokenizerError(\"",
    ] {
        m = m.replace(wrapper, "");
    }
    if let Some(i) = m.find(" at Line: ") {
        m.truncate(i);
    }
    let m = m.trim_end_matches("\")").trim();
    if let Some(rest) = m.strip_prefix("Cast error: Cannot cast string ") {
        return format!(
            "type error: the string {} is compared with or used as a number",
            rest.split(" to value").next().unwrap_or(rest)
        );
    }
    if m.starts_with("Cannot coerce arithmetic expression") || m.starts_with("Cannot infer common")
    {
        return format!("type error: {}", m[..1].to_lowercase() + &m[1..]);
    }
    let mut chars = m.chars();
    match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// sqlparser puts "at Line: L, Column: C" into its messages; the span covers the word there.
fn parser_location(
    message: &str,
    prepared: &Prepared,
    query: &str,
) -> Option<std::ops::Range<usize>> {
    let rest = &message[message.find("Line: ")? + 6..];
    let line: u64 = rest.split(',').next()?.trim().parse().ok()?;
    let col_part = &rest[rest.find("Column: ")? + 8..];
    let col: u64 = col_part
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect::<String>()
        .parse()
        .ok()?;
    let at = offset_of(&prepared.sql, line, col)?;
    let start = prepared.map.to_original(at);
    let rest = &query[start..];
    let len = rest
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    // At least one character, never past the end.
    let len = if len == 0 {
        rest.chars().next().map_or(0, char::len_utf8)
    } else {
        len
    };
    Some(start..start + len)
}

/// "Cannot cast string 'x' …": underline the literal 'x' in the query.
fn cast_literal_span(message: &str, query: &str) -> Option<std::ops::Range<usize>> {
    let rest = &message[message.find("Cannot cast string '")? + 19..];
    let lit = &rest[..rest[1..].find('\'')? + 2];
    let at = query.find(lit)?;
    Some(at..at + lit.len())
}

/// First occurrence of `word` as a whole identifier in `text`.
pub fn find_word(text: &str, word: &str) -> Option<std::ops::Range<usize>> {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let lower = text.to_ascii_lowercase();
    let w = word.to_ascii_lowercase();
    if w.is_empty() {
        return None; // "" is found everywhere and would never advance
    }
    let mut from = 0;
    while let Some(i) = lower[from..].find(&w) {
        let s = from + i;
        let e = s + w.len();
        let before = lower[..s].chars().next_back().is_none_or(|c| !is_ident(c));
        let after = lower[e..].chars().next().is_none_or(|c| !is_ident(c));
        if before && after {
            return Some(s..e);
        }
        from = e;
    }
    None
}

/// DataFusion coerces `comm > 5` by casting the string column to a number at
/// run time, which fails on the first event. Reject it while planning instead.
fn check_implicit_string_casts(plan: &LogicalPlan, query: &str) -> Result<(), CompileError> {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    let mut found: Option<(String, DataType)> = None;
    // Finds CAST(<string column> AS <number or boolean>) in `e`.
    let mut scan_expr = |e: &Expr, is_string: &dyn Fn(&datafusion::common::Column) -> bool| {
        e.apply(|x| {
            if let Expr::Cast(c) = x {
                let to = c.field.data_type();
                if let Expr::Column(col) = c.expr.as_ref() {
                    if is_string(col) && (to.is_numeric() || to == &DataType::Boolean) {
                        found.get_or_insert((col.name.clone(), to.clone()));
                    }
                }
            }
            Ok(TreeNodeRecursion::Continue)
        })
    };
    plan.apply(|node| {
        if let LogicalPlan::TableScan(scan) = node {
            let schema = scan.source.schema();
            let is_string = |c: &datafusion::common::Column| {
                schema
                    .field_with_name(&c.name)
                    .is_ok_and(|f| f.data_type() == &DataType::Utf8)
            };
            for f in &scan.filters {
                scan_expr(f, &is_string)?;
            }
        } else if let Some(input) = node.inputs().first() {
            let schema = input.schema().clone();
            let is_string = |c: &datafusion::common::Column| {
                schema
                    .field_from_column(c)
                    .is_ok_and(|f| f.data_type() == &DataType::Utf8)
            };
            for e in node.expressions() {
                scan_expr(&e, &is_string)?;
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .map_err(|e| CompileError::Internal(e.to_string()))?;
    match found {
        Some((name, to)) => Err(CompileError::Query(
            Diagnostic::new(format!("type error: '{name}' is a string and is used here as {to}"), find_word(query, &name))
                .with_hint("compare strings with = or <> against a 'quoted' literal; `ebql describe EVENT` shows column types"),
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::find_word;

    /// Regression (found by the fuzzer): an empty word looped forever.
    #[test]
    fn find_word_of_nothing_is_nothing() {
        assert_eq!(find_word("SELECT fd FROM t", ""), None);
        assert_eq!(find_word("SELECT fd, fdx FROM t", "FDX"), Some(11..14));
        assert_eq!(find_word("SELECT fdx, fd FROM t", "fd"), Some(12..14));
    }
}
