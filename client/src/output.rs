//! `--output table|json`: one record, or a list of records, from the same fields.

use clap::ValueEnum;
use serde_json::{Map, Value};
use solana_rpc_client_api::client_error::Error as ClientError;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum OutputFormat {
    Table,
    Json,
}

/// One record's fields, in display order. Amounts are decimal strings in token units (exact);
/// counts are JSON numbers; nested data (GPUs, score parts) are JSON values.
pub type Fields = Vec<(&'static str, Value)>;

/// Writes one line to standard output. A reader that went away (`gpu-market bid list | head`)
/// ends the command quietly, as it ends `ls` or `cat`: nothing more can be shown.
pub fn line(s: impl std::fmt::Display) {
    use std::io::Write;
    if let Err(e) = writeln!(std::io::stdout().lock(), "{s}") {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: cannot write to standard output: {e}");
        std::process::exit(1);
    }
}

/// Text on one line: its runs of whitespace (newlines too) as single spaces.
pub fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// clap's refusal as one sentence, without the usage hint that follows it (`error: …`).
pub fn clap_sentence(e: &clap::Error) -> String {
    let rendered = e.to_string();
    let sentence: Vec<&str> = rendered
        .lines()
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .collect();
    one_line(&sentence.join(" "))
}

/// A displayable value as a JSON string (keys, signatures, formatted amounts).
pub fn text(v: impl std::fmt::Display) -> Value {
    Value::String(v.to_string())
}

/// Fields as one JSON object (a nested record).
pub fn object(fields: &[(&'static str, Value)]) -> Value {
    Value::Object(
        fields
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect::<Map<_, _>>(),
    )
}

/// A value as a table cell: strings bare, everything else as compact JSON.
fn cell(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

/// Prints one record: aligned `key  value` lines, or one JSON object.
pub fn print_record(format: OutputFormat, fields: &[(&'static str, Value)]) {
    match format {
        OutputFormat::Json => line(object(fields)),
        OutputFormat::Table => {
            let width = fields.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
            for (k, v) in fields {
                line(format_args!("{k:<width$}  {}", cell(v)));
            }
        }
    }
}

/// Prints records with the same keys: a table with a header row (`columns` of each record,
/// nested values left for JSON), or a JSON array of the full records.
pub fn print_list(format: OutputFormat, columns: &[&'static str], rows: &[Fields]) {
    match format {
        OutputFormat::Json => {
            let list: Vec<Value> = rows.iter().map(|r| object(r)).collect();
            line(Value::Array(list));
        }
        OutputFormat::Table => {
            if rows.is_empty() {
                line("(none)");
                return;
            }
            let cells: Vec<Vec<String>> = rows
                .iter()
                .map(|r| {
                    columns
                        .iter()
                        .map(|c| {
                            r.iter()
                                .find(|(k, _)| k == c)
                                .map_or_else(|| "-".to_string(), |(_, v)| cell(v))
                        })
                        .collect()
                })
                .collect();
            for l in gpu_market_sdk::table::columns(columns, &cells).lines() {
                line(l);
            }
        }
    }
}

/// The most useful line of an RPC error: the program's own error message when there is one.
pub fn rpc_error(e: &ClientError) -> String {
    use solana_rpc_client_api::client_error::ErrorKind;
    use solana_rpc_client_api::request::{RpcError, RpcResponseErrorData};
    if let ErrorKind::RpcError(RpcError::RpcResponseError {
        data: RpcResponseErrorData::SendTransactionPreflightFailure(sim),
        message,
        ..
    }) = e.kind()
    {
        return program_message(sim.logs.as_deref().unwrap_or_default())
            .unwrap_or_else(|| message.clone());
    }
    match e.kind() {
        ErrorKind::Reqwest(_) | ErrorKind::Io(_) => {
            "no answer (is a validator running there?)".to_string()
        }
        kind => kind.to_string(),
    }
}

/// The program's own reason in a transaction's logs (an Anchor error's message, or a token
/// program's "insufficient" line); `None` when the logs hold neither.
pub fn program_message(logs: &[String]) -> Option<String> {
    if let Some(msg) = logs
        .iter()
        .find_map(|l| l.split_once("Error Message: ").map(|(_, m)| m))
    {
        return Some(msg.trim_end_matches('.').to_string());
    }
    logs.iter()
        .find(|l| l.contains("insufficient"))
        .map(|line| {
            line.trim_start_matches("Program log: ")
                .trim_start_matches("Error: ")
                .to_string()
        })
}
