//! `--output table|json`.

use clap::ValueEnum;
use solana_rpc_client_api::client_error::Error as ClientError;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum OutputFormat {
    Table,
    Json,
}

/// Prints one record: aligned `key: value` lines, or one JSON object.
pub fn print_record(format: OutputFormat, fields: &[(&str, String)]) {
    match format {
        OutputFormat::Json => {
            let map: serde_json::Map<String, serde_json::Value> = fields
                .iter()
                .map(|(k, v)| {
                    let value = v
                        .parse::<u64>()
                        .map(serde_json::Value::from)
                        .unwrap_or_else(|_| serde_json::Value::from(v.clone()));
                    (k.to_string(), value)
                })
                .collect();
            println!("{}", serde_json::Value::Object(map));
        }
        OutputFormat::Table => {
            let width = fields.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
            for (k, v) in fields {
                println!("{k:<width$}  {v}");
            }
        }
    }
}

/// The most useful line of an RPC error: the program's log error when there is one.
pub fn rpc_error(e: &ClientError) -> String {
    use solana_rpc_client_api::client_error::ErrorKind;
    use solana_rpc_client_api::request::{RpcError, RpcResponseErrorData};
    if let ErrorKind::RpcError(RpcError::RpcResponseError {
        data: RpcResponseErrorData::SendTransactionPreflightFailure(sim),
        message,
        ..
    }) = e.kind()
    {
        if let Some(line) = sim
            .logs
            .iter()
            .flatten()
            .find(|l| l.contains("Error Message:") || l.contains("insufficient"))
        {
            return line.clone();
        }
        return message.clone();
    }
    match e.kind() {
        ErrorKind::Reqwest(_) | ErrorKind::Io(_) => {
            "no answer (is a validator running there?)".to_string()
        }
        kind => kind.to_string(),
    }
}
