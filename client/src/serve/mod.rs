//! `gpu-market serve`: the market for wallets. An HTTP service that builds the transactions a
//! wallet signs (the Solana Actions convention: `/actions.json`, `GET /api/actions/<name>` for an
//! action's metadata, `POST` with `{"account"}` for an unsigned transaction), relays a signed
//! one (`POST /api/send`), and serves the market page (`/`, `/bid/<key>`, `/wallet.js`).
//!
//! Every transaction is built by the CLI verb's own plan (`actions`) and tried on the cluster
//! (a simulation without signatures) before it is returned: a request the program would refuse
//! gets an error object with the program's reason, and no transaction.
//!
//! The reserve-price plot is sampled at each billing interval by a thread of its own.
//!
//! Chosen: hyper's HTTP/1.1 server (already built for bollard and the agent's API) over a web
//! framework; the RPC client is blocking, so each request is answered on tokio's blocking pool.

mod actions;
mod env_api;
mod lease_api;
mod page;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use anyhow::{anyhow, Context, Result};
use base64::Engine as _;
use clap::Args;
use gpu_market_sdk::net::{accept_bounded, ConnectionCaps};
use gpu_market_sdk::redact::redact_urls;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::{json, Value};
use solana_instruction::Instruction;
use solana_message::Message;
use solana_pubkey::Pubkey;
use solana_transaction::Transaction;

use self::actions::Action;
use crate::config::Config;
use crate::output::{self, rpc_error};

#[derive(Args)]
pub struct ServeArgs {
    /// The market the page shows and the actions act in.
    #[arg(long)]
    market: Pubkey,
    /// Address to listen on (port 0: any free port; the URL is printed).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// The URL clients reach the service at, when not the listening address (behind a proxy):
    /// action icons and links are absolute.
    #[arg(long)]
    public_url: Option<String>,
}

/// What every request reads: the cluster, the market, and who the service says it is.
struct Site {
    config: Config,
    market: Pubkey,
    public_url: String,
    /// CAIP-2 id of the cluster (`solana:` + its genesis hash's first 32 characters), sent in
    /// `X-Blockchain-Ids` as the Actions spec asks.
    blockchain_id: String,
    /// The Wallet Standard's name of the cluster (`solana:mainnet`, `solana:devnet`,
    /// `solana:testnet`, else `solana:localnet`).
    wallet_chain: &'static str,
    /// The last render of each page, by path, with when it started; held while a page is
    /// rendered, so renders go one at a time.
    pages: Mutex<HashMap<String, (Instant, Answer)>>,
}

/// The Actions spec version this service speaks.
const ACTION_VERSION: &str = "2.4";
/// The largest request body read (a signed transaction is at most 1,232 bytes).
const MAX_BODY: usize = 64 * 1024;
/// Connections served at once, and from one address; those over either are closed at once.
const CONNECTION_CAPS: ConnectionCaps = ConnectionCaps {
    total: 256,
    per_peer: 32,
};
/// Time for a client to send a request's head.
const HEAD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// Pages kept at once (one per bid asked for), each until a newer render of it.
const PAGES_KEPT: usize = 1024;
/// What the pages may load and do: their own script and styles, nothing from elsewhere, and
/// no framing by another site.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; \
     form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

pub fn run(config: Config, args: ServeArgs) -> Result<()> {
    config.fetch::<gpu_market::state::Market>(&args.market, "market")?;
    let genesis = config
        .rpc()
        .get_genesis_hash()
        .map_err(|e| {
            anyhow!(
                "cannot reach the cluster at {}: {}",
                config.url,
                rpc_error(&e)
            )
        })?
        .to_string();
    let wallet_chain = match &genesis[..] {
        "5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp1FkVwc8mAwh8" => "solana:mainnet",
        g if g.starts_with("EtWTRABZaYq6iMfeYKouRu166VU2xqa1") => "solana:devnet",
        g if g.starts_with("4uhcVJyU9pJkvQyS88uRDiswHXSCkY3z") => "solana:testnet",
        _ => "solana:localnet",
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        let local = listener.local_addr()?;
        let public_url = args
            .public_url
            .unwrap_or_else(|| format!("http://{local}"))
            .trim_end_matches('/')
            .to_string();
        output::line(format!("serving {public_url}"));
        let site = Arc::new(Site {
            config,
            market: args.market,
            blockchain_id: format!("solana:{}", &genesis[..genesis.len().min(32)]),
            wallet_chain,
            public_url,
            pages: Mutex::default(),
        });
        let sampled = site.clone();
        std::thread::spawn(move || loop {
            // A cluster away for a while leaves a gap in the plot, not a stopped sampler.
            let wait = page::sample_history(&sampled.config, &sampled.market)
                .unwrap_or(std::time::Duration::from_secs(10));
            std::thread::sleep(wait);
        });
        accept_bounded(
            "serve",
            listener,
            CONNECTION_CAPS,
            std::future::pending(),
            |stream| {
                let site = site.clone();
                async move {
                    let service = service_fn(move |request| answer(site.clone(), request));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .timer(TokioTimer::new())
                        .header_read_timeout(HEAD_TIMEOUT)
                        .serve_connection(TokioIo::new(stream), service)
                        // A terminal's WebSocket takes the connection over.
                        .with_upgrades()
                        .await;
                }
            },
        )
        .await;
        Ok(())
    })
}

/// An answer: its status, content type and body; every answer carries the Actions headers.
#[derive(Clone)]
struct Answer {
    status: StatusCode,
    content_type: &'static str,
    body: Vec<u8>,
    /// A file to save: its name and sha256 (`Content-Disposition`, `X-Sha256`).
    file: Option<(String, String)>,
}

impl Answer {
    fn json(status: StatusCode, value: Value) -> Answer {
        Answer {
            status,
            content_type: "application/json",
            body: value.to_string().into_bytes(),
            file: None,
        }
    }

    /// The spec's error object: `{"message"}`, with a client-error status; any URL in it (the
    /// cluster's, which may carry an API key) redacted.
    fn refused(status: StatusCode, e: &anyhow::Error) -> Answer {
        Answer::json(status, json!({ "message": redact_urls(&format!("{e:#}")) }))
    }
}

async fn answer(
    site: Arc<Site>,
    mut request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    if let Some(switched) = stream_upgrade(&site, &mut request) {
        return Ok(switched);
    }
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let query: Vec<(String, String)> = request
        .uri()
        .query()
        .map(|q| {
            url::form_urlencoded::parse(q.as_bytes())
                .into_owned()
                .collect()
        })
        .unwrap_or_default();
    let body = match method {
        Method::POST => match Limited::new(request.into_body(), MAX_BODY).collect().await {
            Ok(b) => Some(b.to_bytes()),
            Err(e) => {
                let e = anyhow!("cannot read the request body: {e}");
                return Ok(respond(&site, Answer::refused(StatusCode::BAD_REQUEST, &e)));
            }
        },
        _ => None,
    };
    let routed = site.clone();
    let arrived = Instant::now();
    let answer =
        tokio::task::spawn_blocking(move || route(&routed, &method, &path, &query, body, arrived))
            .await
            .unwrap_or_else(|e| {
                Answer::refused(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &anyhow!("the request failed: {e}"),
                )
            });
    Ok(respond(&site, answer))
}

/// `GET /api/lease/LEASE/stream` as a WebSocket (`lease_api::stream`): switches protocols, then
/// reads the browser's first message (the request its wallet signed, `lease_api::sign`'s) and
/// bridges the socket to the lease's agent: its logs as printed, or a terminal. `None`: not such
/// a request.
fn stream_upgrade(
    site: &Arc<Site>,
    request: &mut Request<Incoming>,
) -> Option<Response<Full<Bytes>>> {
    use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
    use tokio_tungstenite::tungstenite::protocol::Role;
    let lease: Pubkey = request
        .uri()
        .path()
        .strip_prefix("/api/lease/")?
        .strip_suffix("/stream")?
        .parse()
        .ok()?;
    let headers = request.headers();
    let websocket = headers
        .get(hyper::header::UPGRADE)
        .is_some_and(|u| u.as_bytes().eq_ignore_ascii_case(b"websocket"));
    let key = headers.get(hyper::header::SEC_WEBSOCKET_KEY)?;
    if request.method() != Method::GET || !websocket {
        return None;
    }
    let accept = derive_accept_key(key.as_bytes());
    let upgrade = hyper::upgrade::on(request);
    let site = site.clone();
    tokio::spawn(async move {
        let Ok(upgraded) = upgrade.await else {
            return;
        };
        let mut ws = tokio_tungstenite::WebSocketStream::from_raw_socket(
            TokioIo::new(upgraded),
            Role::Server,
            None,
        )
        .await;
        use futures_util::StreamExt;
        // The signed request comes first, and soon: a socket that says nothing is closed.
        let hello = match tokio::time::timeout(HEAD_TIMEOUT, ws.next()).await {
            Ok(Some(Ok(tokio_tungstenite::tungstenite::Message::Text(text)))) => text.to_string(),
            _ => return,
        };
        let signed = tokio::task::spawn_blocking(move || {
            let request: lease_api::LeaseRequest =
                serde_json::from_str(&hello).context("the stream's first message")?;
            lease_api::signed(&site.config, &site.market, &lease, &request)
        })
        .await
        .unwrap_or_else(|e| Err(anyhow!("the request failed: {e}")));
        lease_api::stream(ws, lease, signed).await;
    });
    let mut switched = Response::new(Full::new(Bytes::new()));
    *switched.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = switched.headers_mut();
    h.insert(
        hyper::header::UPGRADE,
        HeaderValue::from_static("websocket"),
    );
    h.insert(
        hyper::header::CONNECTION,
        HeaderValue::from_static("Upgrade"),
    );
    if let Ok(accept) = HeaderValue::from_str(&accept) {
        h.insert(hyper::header::SEC_WEBSOCKET_ACCEPT, accept);
    }
    Some(switched)
}

fn respond(site: &Site, a: Answer) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(a.body)));
    *response.status_mut() = a.status;
    let h = response.headers_mut();
    let mut set = |name: &'static str, value: &str| {
        if let Ok(v) = HeaderValue::from_str(value) {
            h.insert(name, v);
        }
    };
    set(CONTENT_TYPE.as_str(), a.content_type);
    // What the Actions spec asks of every answer, so that Blink clients on any origin can call.
    set("access-control-allow-origin", "*");
    set("access-control-allow-methods", "GET,POST,PUT,OPTIONS");
    set(
        "access-control-allow-headers",
        "Content-Type, Authorization, Content-Encoding, Accept-Encoding, X-Action-Version, X-Blockchain-Ids",
    );
    set(
        "access-control-expose-headers",
        "X-Action-Version, X-Blockchain-Ids",
    );
    set("x-action-version", ACTION_VERSION);
    set("x-blockchain-ids", &site.blockchain_id);
    set("content-security-policy", CONTENT_SECURITY_POLICY);
    set("x-frame-options", "DENY");
    set("x-content-type-options", "nosniff");
    set("referrer-policy", "no-referrer");
    if let Some((name, sha256)) = &a.file {
        let name: String = name
            .chars()
            .filter(|c| c.is_ascii_graphic() && *c != '"' && *c != '\\')
            .collect();
        set(
            "content-disposition",
            &format!("attachment; filename=\"{name}\""),
        );
        set("x-sha256", sha256);
        set("access-control-expose-headers", "X-Sha256");
    }
    response
}

/// The page at `path` for a request that `arrived` then: a render started after it arrived is
/// as fresh as the request asks and is served again; otherwise `render` makes one. Renders go
/// one at a time, so a flood of page loads costs the cluster one render at a time, each serving
/// every request that waited for it, and no page is older than its request.
fn page(site: &Site, path: &str, arrived: Instant, render: impl FnOnce() -> Answer) -> Answer {
    let mut pages = site.pages.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, kept)) = pages.get(path).filter(|(started, _)| *started >= arrived) {
        return kept.clone();
    }
    let started = Instant::now();
    let answer = render();
    if pages.len() >= PAGES_KEPT {
        pages.clear();
    }
    pages.insert(path.to_string(), (started, answer.clone()));
    answer
}

fn route(
    site: &Site,
    method: &Method,
    path: &str,
    query: &[(String, String)],
    body: Option<Bytes>,
    arrived: Instant,
) -> Answer {
    let html = |page: Result<String>| match page {
        Ok(page) => Answer {
            status: StatusCode::OK,
            content_type: "text/html; charset=utf-8",
            body: page.into_bytes(),
            file: None,
        },
        Err(e) => Answer::refused(StatusCode::BAD_GATEWAY, &e),
    };
    let action = path.strip_prefix("/api/actions/").map(Action::from_name);
    match (method, path, action) {
        (&Method::OPTIONS, _, _) => Answer::json(StatusCode::OK, json!({})),
        (&Method::GET, "/actions.json", _) => Answer::json(
            StatusCode::OK,
            json!({"rules": [{"pathPattern": "/api/actions/**", "apiPath": "/api/actions/**"}]}),
        ),
        (&Method::GET, "/icon.svg", _) => Answer {
            status: StatusCode::OK,
            content_type: "image/svg+xml",
            body: ICON.as_bytes().to_vec(),
            file: None,
        },
        (&Method::GET, "/wallet.js", _) => Answer {
            status: StatusCode::OK,
            content_type: "text/javascript; charset=utf-8",
            body: page::WALLET_JS.as_bytes().to_vec(),
            file: None,
        },
        (&Method::GET, p, _) if p.starts_with("/web/") => {
            match page::WEB
                .iter()
                .find(|(name, _, _)| p["/web/".len()..] == **name)
            {
                Some((_, content_type, text)) => Answer {
                    status: StatusCode::OK,
                    content_type,
                    body: text.as_bytes().to_vec(),
                    file: None,
                },
                None => not_found(path),
            }
        }
        (&Method::POST, "/api/env/salt", _) => done(env_api::salt(&body.unwrap_or_default())),
        (&Method::GET, p, _) if p.starts_with("/api/env/") => {
            match p["/api/env/".len()..].parse() {
                Ok(bid) => done(env_api::recipients(&site.config, &site.market, &bid)),
                Err(_) => not_found(path),
            }
        }
        (&Method::POST, p, _) if p.starts_with("/api/env/") && p.ends_with("/seal") => {
            match p["/api/env/".len()..p.len() - "/seal".len()].parse() {
                Ok(bid) => seal_env(site, &bid, body.unwrap_or_default()),
                Err(_) => not_found(path),
            }
        }
        (&Method::GET, "/", _) => page(site, path, arrived, || {
            html(page::market_page(
                &site.config,
                &site.market,
                site.wallet_chain,
            ))
        }),
        (&Method::GET, _, Some(Some(a))) => Answer::json(
            StatusCode::OK,
            a.metadata(&format!("{}/icon.svg", site.public_url)),
        ),
        (&Method::POST, _, Some(Some(a))) => post_action(site, a, query, body.unwrap_or_default()),
        (&Method::POST, "/api/send", _) => relay(site, body.unwrap_or_default()),
        (&Method::GET, p, _) if p.starts_with("/bid/") => match p["/bid/".len()..].parse() {
            Ok(bid) => page(site, path, arrived, || {
                html(page::bid_page(
                    &site.config,
                    &site.market,
                    &bid,
                    site.wallet_chain,
                ))
            }),
            Err(_) => not_found(path),
        },
        (&Method::POST, p, _) if p.starts_with("/api/lease/") => lease_call(site, p, body),
        (&Method::GET, p, _) if p.starts_with("/wallet/") => match p["/wallet/".len()..].parse() {
            Ok(key) => page(site, path, arrived, || {
                html(page::wallet_page(
                    &site.config,
                    &site.market,
                    &key,
                    site.wallet_chain,
                ))
            }),
            Err(_) => not_found(path),
        },
        _ => not_found(path),
    }
}

/// `POST /api/lease/LEASE/sign` and `/send` (`lease_api`): the bytes a wallet signs for a
/// request of its lease's container, and that request sent with its signature.
fn lease_call(site: &Site, path: &str, body: Option<Bytes>) -> Answer {
    use gpu_market_sdk::api::client::ClientError;
    let rest = &path["/api/lease/".len()..];
    let Some((lease, op)) = rest.split_once('/') else {
        return not_found(path);
    };
    let Ok(lease) = lease.parse::<Pubkey>() else {
        return not_found(path);
    };
    let body = body.unwrap_or_default();
    let (config, market) = (&site.config, &site.market);
    match op {
        "sign" => match lease_api::sign(config, market, &lease, &body) {
            Ok(v) => Answer::json(StatusCode::OK, v),
            Err(e) => Answer::refused(StatusCode::BAD_REQUEST, &e),
        },
        "send" => match lease_api::send(config, market, &lease, &body) {
            Ok(lease_api::Sent::File { bytes, file }) => Answer {
                status: StatusCode::OK,
                content_type: "application/octet-stream",
                body: bytes,
                file: Some(file),
            },
            Ok(lease_api::Sent::Status(status)) => Answer::json(StatusCode::OK, status),
            Err(e) => {
                // The agent's refusal keeps its status (403 for a stranger, 401 for a bad
                // signature); anything else is the service's gateway failing.
                let status = match e.downcast_ref::<ClientError>() {
                    Some(ClientError::Refused { status, .. }) => StatusCode::from_u16(*status).ok(),
                    _ => None,
                };
                Answer::refused(status.unwrap_or(StatusCode::BAD_GATEWAY), &e)
            }
        },
        _ => not_found(path),
    }
}

/// A JSON answer, or the request's refusal.
fn done(answer: Result<Value>) -> Answer {
    match answer {
        Ok(v) => Answer::json(StatusCode::OK, v),
        Err(e) => Answer::refused(StatusCode::BAD_REQUEST, &e),
    }
}

/// `POST /api/env/BID/seal` (`env_api::seal`): the `seal_env` transaction of a copy the page
/// sealed, unsigned, for the bid's client.
fn seal_env(site: &Site, bid: &Pubkey, body: Bytes) -> Answer {
    done((|| -> Result<Value> {
        let request: Value = serde_json::from_slice(&body).map_err(|_| {
            anyhow!("the body is not JSON: send {{\"account\", \"recipient\", \"sealed\"}}")
        })?;
        let account = account_of(&request)?;
        let (instructions, message) =
            env_api::seal(&site.config, &site.market, bid, &account, &request)?;
        unsigned(site, &account, &instructions, &message)
    })())
}

fn not_found(path: &str) -> Answer {
    Answer::refused(
        StatusCode::NOT_FOUND,
        &anyhow!("nothing is served at {path}"),
    )
}

/// The POST of an action: `{"account": "<base58>"}` → `{"type": "transaction", "transaction":
/// "<base64>", "message"}`, the transaction unsigned with the account as fee payer, on the
/// cluster's latest blockhash, with the compute budget a simulation finds it to use; or an
/// error object, and nothing built.
fn post_action(site: &Site, action: Action, query: &[(String, String)], body: Bytes) -> Answer {
    let built = (|| -> Result<Value> {
        let request: Value = serde_json::from_slice(&body)
            .map_err(|_| anyhow!("the body is not JSON: send {{\"account\": \"<public key>\"}}"))?;
        let account = account_of(&request)?;
        let built = action.instructions(&site.config, &site.market, query, &account)?;
        let mut answer = unsigned(site, &account, &built.instructions, &built.message)?;
        if let Some(bid) = built.bid {
            answer["bid"] = json!(bid.to_string());
        }
        Ok(answer)
    })();
    done(built)
}

/// The wallet's key a POST names (`{"account": "<base58>"}`).
fn account_of(request: &Value) -> Result<Pubkey> {
    request["account"]
        .as_str()
        .ok_or_else(|| anyhow!("the body has no account"))?
        .parse()
        .map_err(|_| anyhow!("the account is not a public key"))
}

/// The spec's transaction answer for `instructions` of `account`: `{"type": "transaction",
/// "transaction": "<base64>", "message"}`, the transaction unsigned with the account as fee payer,
/// on the cluster's latest blockhash, with the compute budget a simulation finds it to use.
fn unsigned(
    site: &Site,
    account: &Pubkey,
    instructions: &[Instruction],
    message: &str,
) -> Result<Value> {
    // With the compute budget it uses, as the CLI sends it (the leader reserves what a
    // transaction asks of the market's accounts); one simulation says both.
    let instructions = site
        .config
        .budgeted(account, instructions)?
        .map_err(|reason| anyhow!("the cluster would refuse it: {reason}"))?;
    let blockhash = site
        .config
        .rpc()
        .get_latest_blockhash()
        .map_err(|e| anyhow!("cannot reach the cluster: {}", rpc_error(&e)))?;
    let tx = Transaction::new_unsigned(Message::new_with_blockhash(
        &instructions,
        Some(account),
        &blockhash,
    ));
    let bytes = bincode::serialize(&tx)?;
    Ok(json!({
        "type": "transaction",
        "transaction": base64::engine::general_purpose::STANDARD.encode(bytes),
        "message": message,
    }))
}

/// `POST /api/send` with `{"transaction": "<base64 signed>"}`: sends it to the cluster and
/// waits for the configured commitment → `{"signature"}`. For wallets that sign but do not
/// send (`solana:signTransaction`). Only what an action builds is relayed: a transaction with
/// an instruction of the market's program and none but its and the compute budget's, so the
/// service's cluster endpoint is no open relay.
fn relay(site: &Site, body: Bytes) -> Answer {
    let sent = (|| -> Result<Value> {
        let request: Value = serde_json::from_slice(&body)
            .map_err(|_| anyhow!("the body is not JSON: send {{\"transaction\": \"<base64>\"}}"))?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(request["transaction"].as_str().unwrap_or_default())
            .map_err(|_| anyhow!("the transaction is not base64"))?;
        let tx: Transaction =
            bincode::deserialize(&bytes).map_err(|_| anyhow!("the bytes are not a transaction"))?;
        relayable(&tx)?;
        let signature = site
            .config
            .rpc()
            .send_and_confirm_transaction(&tx)
            .map_err(|e| anyhow!("transaction failed: {}", rpc_error(&e)))?;
        Ok(json!({ "signature": signature.to_string() }))
    })();
    done(sent)
}

/// Whether `tx` is one this service relays: every instruction's program the market's or the
/// compute budget's, and one at least the market's.
fn relayable(tx: &Transaction) -> Result<()> {
    let keys = &tx.message.account_keys;
    let programs: Vec<Pubkey> = tx
        .message
        .instructions
        .iter()
        .map(|ix| {
            keys.get(usize::from(ix.program_id_index))
                .copied()
                .unwrap_or_default()
        })
        .collect();
    let ours = |p: &Pubkey| *p == gpu_market::ID;
    let allowed = |p: &Pubkey| ours(p) || *p == solana_compute_budget_interface::ID;
    if let Some(other) = programs.iter().find(|p| !allowed(p)) {
        anyhow::bail!(
            "this service relays only the market's transactions, not one calling program {other}"
        );
    }
    if !programs.iter().any(ours) {
        anyhow::bail!("this service relays only the market's transactions: this one calls none of its instructions");
    }
    Ok(())
}

/// The actions' icon: a GPU card.
const ICON: &str = r##"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 64 64"><rect width="64" height="64" rx="8" fill="#1d2433"/><rect x="8" y="18" width="48" height="26" rx="3" fill="#3fb68b"/><circle cx="24" cy="31" r="7" fill="#1d2433"/><circle cx="42" cy="31" r="7" fill="#1d2433"/><rect x="12" y="44" width="6" height="6" fill="#c9a227"/><rect x="22" y="44" width="6" height="6" fill="#c9a227"/><rect x="32" y="44" width="6" height="6" fill="#c9a227"/></svg>"##;
