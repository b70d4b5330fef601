//! The long-running service (`ebql serve --flight-sql ADDR`, issue 22):
//! queries from clients of [Arrow Flight SQL], the Arrow-native query
//! protocol, each streamed back as record batches while its windows close.
//!
//! * [`flight`]: the Flight SQL endpoints. A `CommandStatementQuery` is
//!   compiled at GetFlightInfo (a bad query is refused there, with its
//!   diagnostic), attached at DoGet, and ends with its stream: LIMIT
//!   reached, the duration the client asked for ([`DURATION_HEADER`]), the
//!   client gone (its programs detach), or the service stopping.
//! * [`client`]: each client's bounded buffer of windows; a slow reader
//!   loses whole windows, counted, and never holds up a query.
//! * [`standing`]: named queries added and removed while the service runs,
//!   each into its own sink (Flight actions `ebql.add|rm|ls`; `ebql ctl`).
//!
//! [Arrow Flight SQL]: https://arrow.apache.org/docs/format/FlightSql.html

pub mod client;
pub mod flight;
pub mod standing;

use crate::sink::prometheus::PrometheusServer;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// The gRPC header (metadata key) by which a client bounds its query's
/// run: a duration as `-d` takes it (`5s`, `500ms`, `2m`;
/// [`crate::duration::parse_duration`]). ADBC sets it with the option
/// `adbc.flight.sql.rpc.call_header.x-ebql-duration`. Without it, a query
/// without LIMIT runs until its client goes away.
pub const DURATION_HEADER: &str = "x-ebql-duration";

/// How the service runs its clients' queries.
#[derive(Debug, Clone)]
pub struct ServiceOptions {
    /// How each query is compiled and run (table sizes, planner choices).
    pub executor: crate::ExecutorOptions,
    /// Windows a client's buffer holds before later ones are dropped.
    pub client_buffer: usize,
    /// The bearer token clients must send (`authorization: Bearer TOKEN`);
    /// `None`: any client that can reach the address.
    pub token: Option<String>,
    /// Where standing queries added with format `prometheus` are exposed;
    /// `None`: that format is refused.
    pub prometheus: Option<Arc<PrometheusEndpoint>>,
}

/// The service's Prometheus endpoint: bound when the first query needs it
/// (the command line's standing queries at start, else the first added
/// with format `prometheus`), then shared by every query exposed there.
pub struct PrometheusEndpoint {
    addr: SocketAddr,
    server: Mutex<Option<Arc<PrometheusServer>>>,
}

impl std::fmt::Debug for PrometheusEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrometheusEndpoint")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl PrometheusEndpoint {
    /// An endpoint to bind at `addr` when first needed.
    pub fn new(addr: SocketAddr) -> PrometheusEndpoint {
        PrometheusEndpoint {
            addr,
            server: Mutex::new(None),
        }
    }

    /// The server, bound now if it is not yet.
    ///
    /// Errors: the address is in use or not ours to bind.
    pub fn server(&self) -> Result<Arc<PrometheusServer>, crate::Error> {
        let mut s = self.server.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(server) = &*s {
            return Ok(server.clone());
        }
        let server = Arc::new(PrometheusServer::bind(self.addr).map_err(crate::Error::Sink)?);
        *s = Some(server.clone());
        Ok(server)
    }
}

impl Default for ServiceOptions {
    fn default() -> Self {
        ServiceOptions {
            executor: crate::ExecutorOptions::default(),
            client_buffer: 64,
            token: None,
            prometheus: None,
        }
    }
}
