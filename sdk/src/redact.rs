//! Keeping RPC credentials out of what is shown: logs, pages, error messages.
//!
//! RPC providers put API keys in URLs: in the query (`https://mainnet.helius-rpc.com/?api-key=…`),
//! in the path (`https://solana-mainnet.g.alchemy.com/v2/<key>`) or in the userinfo
//! (`https://user:pass@host`). [`redact_url`] keeps only what tells an operator which endpoint is
//! meant (scheme, host, port); [`redact_urls`] does the same to every URL inside free text, such
//! as an HTTP client's error message ("error sending request for url (https://…)").

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

#[cfg(test)]
mod tests {
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
}
