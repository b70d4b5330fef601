//! The executor's public face: [`Executor`] compiles, loads and starts
//! queries (and keeps those started by text, the thesis API); what it
//! returns is a [`super::RunningQuery`] handle, or a [`LoadReport`] for a
//! load without attaching.

use super::load::Loaded;
use super::options::ExecutorOptions;
use super::plan::{self, KernelCatalog, MachineSampler};
use super::running::RunningQuery;
use crate::error::{Error, Result};
use crate::window::QueryStats;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use ebql_compiler::physical::RateSampler;
use ebql_compiler::{compile_query, CompiledQuery};
use std::collections::HashMap;
use std::sync::mpsc::{channel, Receiver};

/// Runs queries. `execute_query`/`get_query_stats`/`stop_query` key queries by
/// their text, as in the thesis API; [`Executor::execute`] returns a handle instead.
pub struct Executor {
    options: ExecutorOptions,
    catalog: Option<ebql_catalog::Catalog>,
    queries: HashMap<String, RunningQuery>,
}

impl Default for Executor {
    fn default() -> Self {
        Self::new()
    }
}

impl Executor {
    /// An executor with default options. Nothing touches the kernel until a query runs.
    pub fn new() -> Executor {
        Self::with_options(ExecutorOptions::default())
    }

    /// An executor with these options. Nothing touches the kernel until a query runs.
    pub fn with_options(options: ExecutorOptions) -> Executor {
        Executor {
            options,
            catalog: None,
            queries: HashMap::new(),
        }
    }

    /// The event catalog (tracefs, mounted if needed).
    pub fn catalog(&mut self) -> Result<&ebql_catalog::Catalog> {
        if self.catalog.is_none() {
            self.catalog = Some(ebql_catalog::Catalog::open().map_err(Error::Catalog)?);
        }
        Ok(self.catalog.as_ref().unwrap())
    }

    /// Compiles without touching BPF; events of kinds this kernel lacks are
    /// refused (as [`Executor::execute`] would).
    pub fn compile(&mut self, sql: &str) -> Result<CompiledQuery> {
        self.compile_with(sql, true)
    }

    /// Compiles for `explain`: like [`Executor::compile`], but events of
    /// kinds this kernel lacks (kprobes, fentry here) compile too, since
    /// nothing is loaded; [`ebql_runtime::features::missing`] says what they lack.
    pub fn compile_for_explain(&mut self, sql: &str) -> Result<CompiledQuery> {
        self.compile_with(sql, false)
    }

    fn compile_with(&mut self, sql: &str, features: bool) -> Result<CompiledQuery> {
        self.catalog()?;
        let catalog = self.catalog.as_ref().expect("opened just above");
        plan::compile_with(&self.options, catalog, sql, features)
    }

    /// The layout of `sql`'s partial rows under these options' `partial`
    /// (default identity when unset): what a merge job reads
    /// ([`crate::partial::layout_json`]). Compiles without touching BPF.
    ///
    /// Errors: as [`Executor::compile`], and why the query has no partial form.
    pub fn partial_layout(&mut self, sql: &str) -> Result<ebql_compiler::partial::PartialLayout> {
        self.catalog()?;
        let mut options = self.options.clone();
        options.partial.get_or_insert_with(Default::default);
        let catalog = self.catalog.as_ref().expect("opened just above");
        let (_, layout) = plan::compile_partial(&options, catalog, sql, false)?;
        Ok(layout.expect("options.partial is set"))
    }

    /// Compiles for `explain --rates`: like [`Executor::compile_for_explain`],
    /// but the query runs for `sample` to measure its rates, and with them
    /// the aggregate's place is weighed as a query run would
    /// ([`ebql_compiler::physical::compile_planned`]). The rates are in
    /// [`ebql_compiler::physical::PhysicalPlan::rates`] when taken.
    pub fn compile_with_rates(
        &mut self,
        sql: &str,
        sample: std::time::Duration,
    ) -> Result<CompiledQuery> {
        let options = self.options.clone();
        let catalog = KernelCatalog(self.catalog()?, false);
        let sampler = MachineSampler {
            sql,
            catalog: &catalog,
            options: &options,
            syscalls: options.sample_rates,
            query: Some(sample),
        };
        ebql_compiler::physical::compile_planned(sql, &catalog, &options.codegen, &sampler)
            .map_err(|e| Error::compile(sql, e))
    }

    /// The schema of one event, refused when this kernel lacks what its kind
    /// needs (as queries are).
    pub fn event(&mut self, name: &ebql_catalog::EventName) -> Result<ebql_catalog::EventSchema> {
        use ebql_compiler::planner::EventSource;
        KernelCatalog(self.catalog()?, true)
            .event(name)
            .map_err(Error::Catalog)
    }

    /// Compiles, loads and attaches `sql`; when this returns Ok the probe is attached.
    pub fn execute(&mut self, sql: &str) -> Result<RunningQuery> {
        let compiled = self.compile(sql)?;
        super::synopsis::start(compiled, &self.options)
    }

    /// Loads and attaches a query [`Executor::compile`] compiled (with
    /// these options); [`super::result_schema`] tells its result schema
    /// before. `execute` is `compile`, then `start`.
    pub fn start(&mut self, compiled: CompiledQuery) -> Result<RunningQuery> {
        super::synopsis::start(compiled, &self.options)
    }

    /// Compiles `sql`, creates its maps and loads its program (the verifier
    /// runs), then closes everything without attaching. Cheap (a few ms):
    /// the query generator's compile-and-load run uses it.
    ///
    /// Errors: as [`Executor::execute`]; a verifier rejection is `Error::Verifier`.
    pub fn load_only(&mut self, sql: &str) -> Result<LoadReport> {
        let compiled = self.compile(sql)?;
        let loaded = Loaded::load(&compiled.code, None, false)?;
        let main = compiled.code.main();
        Ok(LoadReport {
            instructions: main.program.insns.len(),
            stack_bytes: main.stack_bytes,
            maps: loaded.map_count(),
        })
    }

    /// Runs `sql` under the differential oracle: the kernel plan and, in the
    /// same program and the same windows, a reference evaluation of the same
    /// SQL by DataFusion over the raw events (see [`crate::check`]).
    pub fn check(
        &mut self,
        sql: &str,
        opts: crate::check::CheckOptions,
    ) -> Result<crate::check::RunningCheck> {
        let mut codegen = self.options.codegen;
        let options = self.options.clone();
        let catalog = KernelCatalog(self.catalog()?, true);
        let sampler = MachineSampler {
            sql,
            catalog: &catalog,
            options: &options,
            syscalls: options.sample_rates,
            query: None,
        };
        // The plan under test runs on the hook a query run would choose.
        if let Ok(c) = compile_query(sql, &catalog, &codegen) {
            let hook = c.physical.hook.as_ref();
            if let Some(h) = hook.filter(|h| h.wants_rates(&codegen.choices)) {
                if let Some(Ok(rates)) = sampler.syscall_rates(&h.traced_nrs()) {
                    codegen.choices.rates = Some(rates);
                }
            }
        }
        let checked = ebql_compiler::check::compile_check(sql, &catalog, &codegen)
            .map_err(|e| Error::compile(sql, e))?;
        let ebql_compiler::check::CheckedQuery { query, reference } = checked;
        let bounds = ebql_compiler::check::output_bounds(&query.split);
        let second = crate::check::SecondInput {
            sql: reference.planned.prepared.sql.clone(),
            // DuckDB reads what the reference plan reads: the tap's rows, or the pairs.
            tap: datafusion::datasource::TableProvider::schema(reference.input.as_ref()),
            columns: datafusion::datasource::TableProvider::schema(reference.input.as_ref())
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect(),
            paired: reference.pairing.is_some(),
            branches: crate::check::duckdb::tap_branches(&reference),
        };
        let (tx, rx) = channel();
        let q = RunningQuery::start(query, Some((reference, tx)), &self.options)?;
        crate::check::RunningCheck::new(q, rx, opts, bounds, second)
    }

    /// Thesis API: runs a query and returns its output schema and a channel of
    /// record batches (one per window; per drain for raw streams).
    pub fn execute_query(&mut self, sql: String) -> Result<(SchemaRef, Receiver<RecordBatch>)> {
        if self.queries.contains_key(&sql) {
            return Err(Error::Internal(
                "this query is already running in this executor".into(),
            ));
        }
        let mut q = self.execute(&sql)?;
        let rx = q.take_receiver().expect("fresh query has its receiver");
        let schema = q.schema();
        self.queries.insert(sql, q);
        Ok((schema, rx))
    }

    /// Thesis API: stats of a query started with `execute_query`.
    pub fn get_query_stats(&self, sql: &str) -> Option<QueryStats> {
        self.queries.get(sql).map(|q| q.stats())
    }

    /// Stops a query started with `execute_query`: emits its last window and detaches it.
    pub fn stop_query(&mut self, sql: &str) -> Option<Result<QueryStats>> {
        self.queries.remove(sql).map(|q| q.stop())
    }
}

/// What [`Executor::load_only`] loaded.
#[derive(Debug, Clone, Copy)]
pub struct LoadReport {
    /// BPF instructions in the program (ld_imm64 counts as two).
    pub instructions: usize,
    /// Bytes of BPF stack the program uses.
    pub stack_bytes: usize,
    /// Maps created for it.
    pub maps: usize,
}
