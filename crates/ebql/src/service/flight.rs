//! The Flight SQL endpoints of the service ([`FlightSql`]) and its server
//! ([`serve`]):
//!
//! * ad-hoc queries: GetFlightInfo of a `CommandStatementQuery`, then
//!   DoGet of its ticket (the two calls every Flight SQL client makes to
//!   run a query: ADBC's `cursor.execute`, JDBC's `executeQuery`);
//! * standing queries ([`super::standing`]) through three custom actions
//!   (DoAction), JSON in and out: [`ACTION_ADD`], [`ACTION_RM`],
//!   [`ACTION_LS`]; `ebql ctl` is their client.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow::datatypes::SchemaRef;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightServiceServer;
use arrow_flight::sql::server::FlightSqlService;
use arrow_flight::sql::{CommandStatementQuery, ProstMessageExt, SqlInfo, TicketStatementQuery};
use arrow_flight::{Action, ActionType, FlightDescriptor, FlightEndpoint, FlightInfo, Ticket};
use ebql_compiler::prepass::WindowSpec;
use ebql_compiler::CompiledQuery;
use futures::{Stream, StreamExt};
use prost::Message;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};

use super::client::ClientSink;
use super::standing::{AddRequest, Standing};
use super::{ServiceOptions, DURATION_HEADER};
use crate::executor::result_schema;
use crate::sink::arrow_ipc::file_schema;
use crate::sink::{QueryInfo, WindowKind};
use crate::window::WallClock;
use crate::{Error, Executor};

/// Action: add a standing query. Body: [`AddRequest`] as JSON; result:
/// `{"name": …, "programs": [ids]}`.
pub const ACTION_ADD: &str = "ebql.add";
/// Action: remove a standing query. Body: `{"name": …}`; result: its final
/// counters (the stats line's JSON).
pub const ACTION_RM: &str = "ebql.rm";
/// Action: list the standing queries. Body: empty; result: a JSON array of
/// [`super::standing::Listed`].
pub const ACTION_LS: &str = "ebql.ls";

/// A query compiled at GetFlightInfo, waiting for its DoGet.
struct Pending {
    sql: String,
    /// The stream's schema, as GetFlightInfo gave it.
    schema: SchemaRef,
    compiled: CompiledQuery,
    run_for: Option<Duration>,
    since: Instant,
}

/// Tickets not fetched within this long are forgotten (a client that
/// asked for a query's plan and never ran it).
const TICKET_TTL: Duration = Duration::from_secs(60);

/// The service's Flight SQL side: compiled queries waiting for their
/// DoGet, and the flag that ends every stream when the service stops.
pub struct FlightSql {
    opts: ServiceOptions,
    next_ticket: AtomicU64,
    pending: Mutex<HashMap<u64, Pending>>,
    stopping: Arc<AtomicBool>,
    standing: Arc<Standing>,
}

impl FlightSql {
    /// The endpoints; every running query ends once `stopping` is set.
    pub fn new(
        opts: ServiceOptions,
        stopping: Arc<AtomicBool>,
        standing: Arc<Standing>,
    ) -> FlightSql {
        FlightSql {
            opts,
            next_ticket: AtomicU64::new(1),
            pending: Mutex::new(HashMap::new()),
            stopping,
            standing,
        }
    }

    /// One of the standing-query actions, run off the async threads: its
    /// result's JSON.
    async fn standing_action(&self, kind: &str, body: &[u8]) -> Result<serde_json::Value, Status> {
        let standing = self.standing.clone();
        let bad = |e: serde_json::Error| Status::invalid_argument(format!("{kind}: its body: {e}"));
        let job: Box<dyn FnOnce() -> Result<serde_json::Value, Error> + Send> = match kind {
            ACTION_ADD => {
                let req: AddRequest = serde_json::from_slice(body).map_err(bad)?;
                Box::new(move || {
                    let name = req.name.clone();
                    let programs = standing.add(req)?;
                    Ok(serde_json::json!({"name": name, "programs": programs}))
                })
            }
            ACTION_RM => {
                #[derive(serde::Deserialize)]
                struct Rm {
                    name: String,
                }
                let rm: Rm = serde_json::from_slice(body).map_err(bad)?;
                Box::new(move || {
                    let stats = standing.remove(&rm.name)?;
                    Ok(serde_json::from_str(&stats.to_json()).unwrap_or_default())
                })
            }
            ACTION_LS => {
                Box::new(move || Ok(serde_json::to_value(standing.list()).unwrap_or_default()))
            }
            other => {
                return Err(Status::invalid_argument(format!(
                    "no action `{other}`: this service has {ACTION_ADD}, {ACTION_RM}, {ACTION_LS}"
                )))
            }
        };
        tokio::task::spawn_blocking(job)
            .await
            .map_err(|e| Status::internal(format!("{kind}: {e}")))?
            .map_err(status_of)
    }

    /// Refuses a call without the service's token, when it has one.
    fn authorize(&self, md: &MetadataMap) -> Result<(), Status> {
        let Some(token) = &self.opts.token else {
            return Ok(());
        };
        let sent = md
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if sent == Some(token.as_str()) {
            Ok(())
        } else {
            Err(Status::unauthenticated(
                "this service wants `authorization: Bearer TOKEN` (ebql serve --token-file)",
            ))
        }
    }

    fn park(&self, p: Pending) -> u64 {
        let id = self.next_ticket.fetch_add(1, Ordering::Relaxed);
        let mut pending = self.pending.lock().expect("pending tickets");
        pending.retain(|_, p| p.since.elapsed() < TICKET_TTL);
        pending.insert(id, p);
        id
    }

    fn take(&self, id: u64) -> Option<Pending> {
        self.pending.lock().expect("pending tickets").remove(&id)
    }
}

/// The duration a client bounds its query with ([`DURATION_HEADER`]).
fn run_for(md: &MetadataMap) -> Result<Option<Duration>, Status> {
    let Some(v) = md.get(DURATION_HEADER) else {
        return Ok(None);
    };
    let text = v
        .to_str()
        .map_err(|_| Status::invalid_argument(format!("{DURATION_HEADER}: not text")))?;
    crate::duration::parse_duration(text)
        .map(Some)
        .map_err(|e| Status::invalid_argument(format!("{DURATION_HEADER}: {e}")))
}

/// An engine error as the client sees it: a bad query is the client's
/// (`InvalidArgument`, with the rendered diagnostic: position, underline,
/// hint); what this machine cannot do is `FailedPrecondition`; the rest
/// are the service's (`Internal`).
fn status_of(e: Error) -> Status {
    let text = e.render();
    match e {
        Error::Query { .. } => Status::invalid_argument(text),
        Error::Unavailable(_) | Error::Catalog(_) | Error::Runtime(_) => {
            Status::failed_precondition(text)
        }
        _ => Status::internal(text),
    }
}

/// What the client's stream carries: the query's result schema with the
/// query, eBQL's version and the window kind in its metadata, as the
/// Arrow IPC and Parquet outputs have it.
fn stream_schema(sql: &str, compiled: &CompiledQuery) -> SchemaRef {
    let window = match compiled.split.kernel.window {
        None => WindowKind::None,
        Some(WindowSpec::Time { .. }) => WindowKind::Time,
        Some(WindowSpec::Count { .. }) => WindowKind::Count,
    };
    file_schema(&QueryInfo {
        sql: sql.to_string(),
        schema: result_schema(compiled),
        window,
        clock: WallClock::now(),
        version: env!("CARGO_PKG_VERSION"),
        host: crate::partial::hostname(),
    })
}

type DoGetStream = Pin<Box<dyn Stream<Item = Result<arrow_flight::FlightData, Status>> + Send>>;
type ActionStream = Pin<Box<dyn Stream<Item = Result<arrow_flight::Result, Status>> + Send>>;

#[tonic::async_trait]
impl FlightSqlService for FlightSql {
    type FlightService = FlightSql;

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.authorize(request.metadata())?;
        let run_for = run_for(request.metadata())?;
        let opts = self.opts.executor.clone();
        let sql = query.query;
        // Compiling may sample the machine for a moment: off the async threads.
        let (sql, compiled) = tokio::task::spawn_blocking(move || {
            let compiled = Executor::with_options(opts).compile(&sql);
            (sql, compiled)
        })
        .await
        .map_err(|e| Status::internal(format!("compiling the query: {e}")))?;
        let compiled = compiled.map_err(status_of)?;
        let schema = stream_schema(&sql, &compiled);
        let id = self.park(Pending {
            sql,
            schema: schema.clone(),
            compiled,
            run_for,
            since: Instant::now(),
        });
        let ticket = TicketStatementQuery {
            statement_handle: id.to_le_bytes().to_vec().into(),
        };
        let endpoint =
            FlightEndpoint::new().with_ticket(Ticket::new(ticket.as_any().encode_to_vec()));
        let info = FlightInfo::new()
            .try_with_schema(&schema)
            .map_err(|e| Status::internal(format!("encoding the schema: {e}")))?
            .with_endpoint(endpoint)
            .with_descriptor(request.into_inner())
            .with_ordered(true);
        Ok(Response::new(info))
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.authorize(request.metadata())?;
        let asked = run_for(request.metadata())?;
        let id = <[u8; 8]>::try_from(ticket.statement_handle.as_ref())
            .map(u64::from_le_bytes)
            .map_err(|_| Status::invalid_argument("not a ticket of this service"))?;
        let p = self.take(id).ok_or_else(|| {
            Status::not_found("no such query: a ticket runs once, within a minute of GetFlightInfo")
        })?;
        let run_for = asked.or(p.run_for);
        let schema = p.schema.clone();
        let (mut sink, rx, client) = ClientSink::new(self.opts.client_buffer);
        let opts = self.opts.executor.clone();
        let stopping = self.stopping.clone();
        let sql = p.sql.clone();
        // Attach here, so that an error reaches the client as this call's status.
        let q = tokio::task::spawn_blocking(move || Executor::with_options(opts).start(p.compiled))
            .await
            .map_err(|e| Status::internal(format!("starting the query: {e}")))?
            .map_err(status_of)?;
        let info = QueryInfo::of(&sql, &q);
        let gone = sink.gone_probe();
        let begun = Instant::now();
        std::thread::Builder::new()
            .name("ebql-flight-query".into())
            .spawn(move || {
                let stop = || {
                    gone()
                        || stopping.load(Ordering::Relaxed)
                        || run_for.is_some_and(|d| begun.elapsed() >= d)
                };
                let r = crate::sink::drive(q, &info, &mut sink, stop);
                if client.dropped() > 0 || client.failed() > 0 {
                    eprintln!(
                        "ebql: flight query {id}: {} windows dropped for a slow reader, {} failed",
                        client.dropped(),
                        client.failed()
                    );
                }
                if let Err(e) = r {
                    eprintln!("ebql: flight query {id} failed: {}", e.error.render());
                }
            })
            .map_err(|e| Status::internal(format!("starting the query's thread: {e}")))?;
        let batches = rx.map(Ok::<_, FlightError>);
        let stream = FlightDataEncoderBuilder::new()
            .with_schema(schema)
            .build(batches)
            .map(|r| r.map_err(Status::from));
        Ok(Response::new(Box::pin(stream)))
    }

    async fn do_action_fallback(
        &self,
        request: Request<Action>,
    ) -> Result<Response<ActionStream>, Status> {
        self.authorize(request.metadata())?;
        let action = request.into_inner();
        let result = self.standing_action(&action.r#type, &action.body).await?;
        let body = serde_json::to_vec(&result)
            .map_err(|e| Status::internal(format!("encoding the result: {e}")))?;
        let one = arrow_flight::Result { body: body.into() };
        Ok(Response::new(Box::pin(futures::stream::iter([Ok::<
            _,
            Status,
        >(
            one
        )]))))
    }

    async fn list_custom_actions(&self) -> Option<Vec<Result<ActionType, Status>>> {
        let action = |t: &str, d: &str| -> Result<ActionType, Status> {
            Ok(ActionType {
                r#type: t.to_string(),
                description: d.to_string(),
            })
        };
        Some(vec![
            action(
                ACTION_ADD,
                "add a standing query: {name, sql, format, output}",
            ),
            action(
                ACTION_RM,
                "remove a standing query: {name}; its final counters",
            ),
            action(ACTION_LS, "the standing queries and their counters"),
        ])
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}

/// Runs the Flight SQL server on `listener` (bound by the caller, so that
/// a taken port fails before anything attaches) until `stopping` is set
/// (checked every 100 ms), then ends every query's stream.
///
/// Errors: the server failed.
pub fn serve(
    listener: std::net::TcpListener,
    opts: ServiceOptions,
    stopping: Arc<AtomicBool>,
) -> Result<(), Error> {
    let standing = Arc::new(
        Standing::new(opts.executor.clone(), stopping.clone())
            .with_prometheus(opts.prometheus.clone()),
    );
    let served = serve_standing(listener, opts, standing.clone(), stopping);
    // Each standing query writes its last window and finishes its sink.
    standing.stop_all();
    served
}

/// [`serve`] with the caller's standing queries (e.g. `ebql serve`'s
/// command-line queries, listed and removable by clients), which it leaves
/// running when it returns.
pub fn serve_standing(
    listener: std::net::TcpListener,
    opts: ServiceOptions,
    standing: Arc<Standing>,
    stopping: Arc<AtomicBool>,
) -> Result<(), Error> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::Internal(format!("starting the Flight SQL runtime: {e}")))?;
    let service = FlightSql::new(opts, stopping.clone(), standing.clone());
    let served = rt.block_on(async move {
        listener
            .set_nonblocking(true)
            .map_err(|e| Error::Internal(format!("the Flight SQL listener: {e}")))?;
        let listener = tokio::net::TcpListener::from_std(listener)
            .map_err(|e| Error::Internal(format!("the Flight SQL listener: {e}")))?;
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        let shutdown = async move {
            while !stopping.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        tonic::transport::Server::builder()
            .add_service(FlightServiceServer::new(service))
            .serve_with_incoming_shutdown(incoming, shutdown)
            .await
            .map_err(|e| Error::Internal(format!("the Flight SQL server: {e}")))
    });
    served
}
