//! Keeping secrets out of logs.
//!
//! RPC providers put API keys in URLs: in the query (`https://mainnet.helius-rpc.com/?api-key=…`),
//! in the path (`https://solana-mainnet.g.alchemy.com/v2/<key>`) or in the userinfo
//! (`https://user:pass@host`). [`redact_url`] keeps only what tells an operator which endpoint is
//! meant (scheme, host, port); [`SecretUrl`] holds such a URL in the configuration and shows only
//! that, even through `Debug`; [`redact_urls`] does the same to every URL inside free text, such
//! as an HTTP client's error message ("error sending request for url (https://…)"), and
//! [`RedactingWriter`] applies it to every log line the agent writes, whatever logged it.

use std::fmt;
use std::io::{self, Write};

use tracing_subscriber::fmt::MakeWriter;

/// What replaces a removed part of a URL.
pub const REDACTED: &str = "<redacted>";

/// `raw` with its userinfo, query and fragment replaced by [`REDACTED`], and its path too where
/// the URL names a host (a network endpoint, whose path may carry a key); a URL without a host
/// (`unix:///var/run/docker.sock`) keeps its path. Text that does not parse as a URL keeps only
/// its scheme.
pub fn redact_url(raw: &str) -> String {
    let Ok(url) = url::Url::parse(raw) else {
        return match raw.split_once("://") {
            Some((scheme, rest)) if !rest.is_empty() => format!("{scheme}://{REDACTED}"),
            Some(_) => raw.to_string(),
            None => REDACTED.to_string(),
        };
    };
    let mut out = format!("{}:", url.scheme());
    if url.has_authority() {
        out.push_str("//");
    }
    if !url.username().is_empty() || url.password().is_some() {
        out.push_str(REDACTED);
        out.push('@');
    }
    match url.host_str() {
        Some(host) => {
            out.push_str(host);
            if let Some(port) = url.port() {
                out.push_str(&format!(":{port}"));
            }
            match url.path() {
                "" | "/" => out.push_str(url.path()),
                _ => {
                    out.push('/');
                    out.push_str(REDACTED);
                }
            }
        }
        None => out.push_str(url.path()),
    }
    if url.query().is_some() {
        out.push('?');
        out.push_str(REDACTED);
    }
    if url.fragment().is_some() {
        out.push('#');
        out.push_str(REDACTED);
    }
    out
}

/// `text` with every URL in it (a run of scheme characters, `://`, and everything up to
/// whitespace, a control character, a quote, a bracket or a backslash, less trailing
/// punctuation) passed through [`redact_url`].
pub fn redact_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let scheme_start = rest[..at]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
            .map_or(0, |i| i + 1);
        let token_end = rest[at + 3..]
            .find(|c: char| {
                c.is_whitespace()
                    || c.is_control()
                    || matches!(c, '"' | '\'' | '`' | '<' | '>' | '(' | ')' | '\\')
            })
            .map_or(rest.len(), |i| at + 3 + i);
        // Punctuation that ends a sentence or a list item is not part of the URL.
        let end = at
            + 3
            + rest[at + 3..token_end]
                .trim_end_matches([',', '.', ';', ':', '!'])
                .len();
        out.push_str(&rest[..scheme_start]);
        if scheme_start == at {
            // "://" with no scheme before it: not a URL.
            out.push_str(&rest[at..at + 3]);
            rest = &rest[at + 3..];
            continue;
        }
        out.push_str(&redact_url(&rest[scheme_start..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
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
    fn keys_in_the_query_path_or_userinfo_are_removed() {
        assert_eq!(
            redact_url("https://mainnet.helius-rpc.com/?api-key=0123-secret"),
            "https://mainnet.helius-rpc.com/?<redacted>"
        );
        assert_eq!(
            redact_url("https://solana-mainnet.g.alchemy.com/v2/secretkey"),
            "https://solana-mainnet.g.alchemy.com/<redacted>"
        );
        assert_eq!(
            redact_url("wss://user:hunter2@rpc.example.com:8900/ws#frag"),
            "wss://<redacted>@rpc.example.com:8900/<redacted>#<redacted>"
        );
    }

    #[test]
    fn urls_without_secrets_keep_what_names_the_endpoint() {
        assert_eq!(
            redact_url("http://127.0.0.1:8899"),
            "http://127.0.0.1:8899/"
        );
        assert_eq!(
            redact_url("wss://api.devnet.solana.com"),
            "wss://api.devnet.solana.com/"
        );
        assert_eq!(
            redact_url("unix:///var/run/docker.sock"),
            "unix:///var/run/docker.sock"
        );
    }

    #[test]
    fn unparsable_text_keeps_only_its_scheme() {
        assert_eq!(redact_url("http://[::1:secret"), "http://<redacted>");
        assert_eq!(redact_url("http://"), "http://");
        assert_eq!(redact_url("api-key=secret"), "<redacted>");
    }

    #[test]
    fn every_url_in_a_message_is_redacted_and_the_rest_kept() {
        let message = "error sending request for url (https://h.example/?api-key=s3cret): \
                       connection refused; retry ws://u:p@w.example:1/x, \"http://a/b?c\"";
        assert_eq!(
            redact_urls(message),
            "error sending request for url (https://h.example/?<redacted>): connection \
             refused; retry ws://<redacted>@w.example:1/<redacted>, \"http://a/<redacted>?<redacted>\""
        );
        assert_eq!(redact_urls("no url :// here"), "no url :// here");
        assert_eq!(redact_urls(""), "");
    }

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
}
