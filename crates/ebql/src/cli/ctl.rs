//! `ebql ctl`: the client of a running service's standing queries
//! (`ebql serve --flight-sql`), over its Flight actions `ebql.add`,
//! `ebql.rm` and `ebql.ls` ([`ebql::service::flight`]). Prints each
//! action's JSON result on stdout.

use super::common::read_token;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::Action;
use ebql::service::flight::{ACTION_ADD, ACTION_LS, ACTION_RM};
use ebql::service::standing::AddRequest;
use ebql::Error;
use futures::StreamExt;
use std::path::PathBuf;

/// `ebql ctl`'s arguments.
#[derive(clap::Args)]
pub(super) struct CtlArgs {
    /// The service (`ebql serve --flight-sql ADDR`).
    #[arg(long, value_name = "URI", default_value = "grpc://127.0.0.1:50051")]
    connect: String,
    /// A file holding the service's token (`ebql serve --token-file`).
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    #[command(subcommand)]
    action: CtlAction,
}

#[derive(clap::Subcommand)]
enum CtlAction {
    /// Add a standing query: it runs into its sink until removed.
    Add {
        /// Its name (unique in the service).
        name: String,
        /// The query.
        sql: String,
        /// The sink's format: json, csv, parquet, arrow, null, or prometheus
        /// (the service's --prometheus endpoint, the name as the metrics' prefix).
        #[arg(short, long, default_value = "parquet")]
        format: String,
        /// Where it writes: a file, a Parquet directory, kafka://HOST:PORT/TOPIC.
        #[arg(short, long)]
        output: Option<String>,
    },
    /// Remove a standing query: its last window is written, its programs
    /// detach; prints its final counters.
    Rm {
        /// Its name.
        name: String,
    },
    /// List the standing queries and their counters.
    Ls,
}

/// Runs one action against the service and prints its result.
pub(super) fn ctl(a: CtlArgs) -> Result<(), Error> {
    let (kind, body) = match a.action {
        CtlAction::Add {
            name,
            sql,
            format,
            output,
        } => {
            let req = AddRequest {
                name,
                sql,
                format,
                output,
            };
            (ACTION_ADD, serde_json::to_vec(&req).unwrap_or_default())
        }
        CtlAction::Rm { name } => (
            ACTION_RM,
            serde_json::to_vec(&serde_json::json!({ "name": name })).unwrap_or_default(),
        ),
        CtlAction::Ls => (ACTION_LS, Vec::new()),
    };
    let token = read_token(a.token_file.as_deref())?;
    let failed = |what: &str, e: &dyn std::fmt::Display| {
        Error::Unavailable(format!("{what} {}: {e}", a.connect))
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Internal(format!("starting the client's runtime: {e}")))?;
    let results: Vec<Vec<u8>> = rt.block_on(async {
        let channel = tonic::transport::Endpoint::from_shared(a.connect.clone())
            .map_err(|e| failed("the address", &e))?
            .connect()
            .await
            .map_err(|e| failed("connecting to", &e))?;
        let mut client = FlightServiceClient::new(channel);
        let mut request = tonic::Request::new(Action {
            r#type: kind.to_string(),
            body: body.into(),
        });
        if let Some(t) = token {
            let value = format!("Bearer {t}")
                .parse()
                .map_err(|_| Error::Unavailable("the token is not header text".into()))?;
            request.metadata_mut().insert("authorization", value);
        }
        let mut stream = client
            .do_action(request)
            .await
            .map_err(|s| failed(kind, &s.message()))?
            .into_inner();
        let mut out = Vec::new();
        while let Some(r) = stream.next().await {
            out.push(r.map_err(|s| failed(kind, &s.message()))?.body.to_vec());
        }
        Ok::<_, Error>(out)
    })?;
    for body in results {
        let value: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        println!(
            "{}",
            serde_json::to_string_pretty(&value).unwrap_or_default()
        );
    }
    Ok(())
}
