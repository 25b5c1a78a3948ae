//! Keeping secrets out of logs: [`SecretUrl`] holds a URL that may carry a credential in the
//! configuration and shows it only through [`redact_url`], even through `Debug`, and
//! [`RedactingWriter`] applies [`redact_urls`] to every log line the agent writes, whatever
//! logged it (both from `gpu_market_sdk::redact`); [`log_filter`] keeps the engine client's
//! request and answer bodies (a container's environment: the lease's secrets) out of the log
//! at every level.

use std::fmt;
use std::io::{self, Write};

pub use gpu_market_sdk::redact::{redact_url, redact_urls, REDACTED};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

/// Libraries whose debug and trace records carry what the agent keeps to itself, at most at
/// the level given: bollard writes each request's body (a container's `Env`) at trace and each
/// answer (an inspect shows the `Env` again) at debug.
const QUIET: &[&str] = &["bollard=info"];

/// The log filter of `spec` (`RUST_LOG`'s syntax; `info` when unset or unreadable), with
/// [`QUIET`]'s libraries capped whatever it asks.
pub fn log_filter(spec: Option<&str>) -> EnvFilter {
    let filter = spec
        .and_then(|s| EnvFilter::try_new(s).ok())
        .unwrap_or_else(|| EnvFilter::new("info"));
    QUIET.iter().fold(filter, |f, d| {
        f.add_directive(d.parse().expect("a valid directive"))
    })
}

/// A URL from the configuration that may carry a credential: `Display` and `Debug` show it
/// through [`redact_url`]; [`SecretUrl::expose`] gives the whole URL to the client that
/// connects with it.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretUrl(String);

impl SecretUrl {
    pub fn new(url: impl Into<String>) -> Self {
        SecretUrl(url.into())
    }

    /// The whole URL, credential included: for connecting, never for logging.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact_url(&self.0))
    }
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretUrl({:?})", redact_url(&self.0))
    }
}

/// A log writer that redacts every URL in each log record before `W` gets it: the backstop for
/// URLs that libraries put into their messages and errors. Each record is written whole, once,
/// when the writer the subscriber made for it is dropped.
pub struct RedactingWriter<M>(pub M);

impl<'a, M: MakeWriter<'a>> MakeWriter<'a> for RedactingWriter<M> {
    type Writer = RedactedRecord<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        RedactedRecord {
            record: Vec::new(),
            inner: self.0.make_writer(),
        }
    }
}

/// One log record on its way through [`RedactingWriter`].
pub struct RedactedRecord<W: Write> {
    record: Vec<u8>,
    inner: W,
}

impl<W: Write> Write for RedactedRecord<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.record.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<W: Write> Drop for RedactedRecord<W> {
    fn drop(&mut self) {
        let text = String::from_utf8_lossy(&self.record);
        // A log line that cannot be written has nowhere to report that.
        let _ = self.inner.write_all(redact_urls(&text).as_bytes());
        let _ = self.inner.flush();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[test]
    fn secret_urls_show_no_secret_through_display_or_debug() {
        let url = SecretUrl::new("https://mainnet.helius-rpc.com/?api-key=s3cret");
        assert!(!format!("{url}").contains("s3cret"));
        assert!(!format!("{url:?}").contains("s3cret"));
        assert_eq!(
            url.expose(),
            "https://mainnet.helius-rpc.com/?api-key=s3cret"
        );
    }

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);
    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn log_records_reach_the_output_redacted_even_at_debug() {
        let out = Captured::default();
        let sink = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .json()
            .with_writer(RedactingWriter(move || sink.clone()))
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::debug!(
                url = "https://h.example/?api-key=s3cret",
                "error sending request for url (https://h.example/v2/s3cret)"
            );
        });
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        assert!(!text.contains("s3cret"), "{text}");
        assert!(text.contains("https://h.example/?<redacted>"), "{text}");
        assert!(text.contains("https://h.example/<redacted>"), "{text}");
    }

    /// What a trace-level log of the agent holds, through `filter`.
    fn logged_at_trace(filter: EnvFilter) -> String {
        let out = Captured::default();
        let sink = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(RedactingWriter(move || sink.clone()))
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            // As bollard logs a container's creation and its inspection.
            tracing::trace!(target: "bollard::docker", r#"request: b"{{\"Env\":[\"TOKEN=canary-7f3a\"]}}""#);
            tracing::debug!(target: "bollard::docker", r#"Decoded into string: {{"Config":{{"Env":["TOKEN=canary-7f3a"]}}}}"#);
            tracing::info!(target: "bollard::docker", "engine answered");
            tracing::trace!(target: "gpu_market_agent::reconcile", "the agent's own trace");
        });
        let bytes = out.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn a_secret_in_a_containers_environment_never_reaches_the_log_even_at_trace() {
        // The filter the agent had: `RUST_LOG=trace` as written.
        let before = logged_at_trace(EnvFilter::new("trace"));
        assert!(before.contains("canary-7f3a"), "{before}");
        let text = logged_at_trace(log_filter(Some("trace")));
        assert!(!text.contains("canary-7f3a"), "{text}");
        assert!(text.contains("engine answered") && text.contains("the agent's own trace"));
        let explicit = logged_at_trace(log_filter(Some("bollard=trace")));
        assert!(!explicit.contains("canary-7f3a"), "{explicit}");
    }
}
