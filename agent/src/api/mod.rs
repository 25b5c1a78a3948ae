//! The lease owner's API (issue 17): HTTPS on `[api] listen` with the agent's key as its TLS key
//! ([`gpu_market_sdk::tls`]), each request signed by a lease's client
//! ([`gpu_market_sdk::api`]). A client reads its lease's container's state and published ports,
//! streams its logs, runs a command in it, and copies files out of its scratch folder, while it
//! runs and after it exited.
//!
//! Refusals, each with a JSON body `{"error": "..."}`: 401 unsigned, malformed, badly signed or
//! expired; 404 no container of the lease on this machine; 403 signed by another key than the
//! lease's client; 409 a replayed request; 400 a bad query. The signature is checked before
//! anything about the lease is looked up. The routes are in `routes`, the engine calls in
//! `engine`, an exec session in `exec`.

mod engine;
mod exec;
mod retained;
mod routes;

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use gpu_market_sdk::api::{Authorization, NonceCache, ReplayError};
use gpu_market_sdk::tls::{server_config, TlsError};
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use solana_keypair::Keypair;
use solana_pubkey::Pubkey;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

use crate::config::Config;
use crate::docker::DockerEngine;
use crate::metrics::unix_now;
use crate::runtime::RuntimeError;
use gpu_market_sdk::net::{accept_bounded, ConnectionCaps};
use gpu_market_sdk::net::{Quota, Slot};

/// The most requests of one lease whose nonces are remembered at once (each for at most
/// [`gpu_market_sdk::api::MAX_TTL_SECS`]: some 30 requests a second, sustained); only a
/// lease's client gets one remembered, in its lease's own cache, so a client that fills its
/// cache is refused (503) alone.
pub const NONCE_CAPACITY: usize = 10_000;
/// Exec sessions of one lease at once; one more is refused (429) until one ends. A session
/// lasts as long as its command, whether or not its client is still there.
pub const MAX_EXEC_SESSIONS: usize = 8;
/// Connections served at once, and from one address; those over either are closed at once.
const CONNECTION_CAPS: ConnectionCaps = ConnectionCaps {
    total: 256,
    per_peer: 32,
};
/// Time for a client to finish its TLS handshake, and to send a request head.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);

/// What the API serves from: the engine of this machine's containers, the machine the requests
/// must be signed for, each lease's nonces seen and exec sessions open, and the clock (unix
/// seconds) that expiries are read by.
pub struct Api {
    engine: Arc<DockerEngine>,
    /// The agent's data folder: what it retains of ended leases (`crate::retention`).
    data_dir: PathBuf,
    machine: Pubkey,
    /// Each lease's nonces (a cache with nothing left in it is dropped).
    nonces: Mutex<HashMap<Pubkey, NonceCache>>,
    nonce_capacity: usize,
    exec_sessions: Quota<Pubkey>,
    clock: fn() -> i64,
}

impl Api {
    /// The API of `machine`'s leases, remembering up to `nonce_capacity` nonces per lease.
    pub fn new(
        engine: Arc<DockerEngine>,
        data_dir: PathBuf,
        machine: Pubkey,
        nonce_capacity: usize,
        clock: fn() -> i64,
    ) -> Self {
        Api {
            engine,
            data_dir,
            machine,
            nonces: Mutex::default(),
            nonce_capacity,
            exec_sessions: Quota::new(MAX_EXEC_SESSIONS),
            clock,
        }
    }

    /// Remembers the nonce of `auth`, a request of `lease`'s client, in the lease's cache.
    fn admit(&self, lease: &Pubkey, auth: &Authorization) -> Result<(), ReplayError> {
        let now = (self.clock)();
        let mut caches = self.nonces.lock().unwrap_or_else(PoisonError::into_inner);
        caches.retain(|_, cache| {
            cache.forget_expired(now);
            !cache.is_empty()
        });
        caches
            .entry(*lease)
            .or_insert_with(|| NonceCache::new(self.nonce_capacity))
            .admit(auth, now)
    }

    /// One more exec session of `lease`, held until the returned slot is dropped; `None` when
    /// the lease has [`MAX_EXEC_SESSIONS`] open.
    fn exec_slot(&self, lease: Pubkey) -> Option<Slot<Pubkey>> {
        self.exec_sessions.take(lease)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("binding the API address {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Engine(#[from] RuntimeError),
    #[error(transparent)]
    Tls(#[from] TlsError),
}

/// Starts the API of `config` for the daemon's life, served with `agent`'s key on a connection
/// of its own to the engine; returns once it listens.
pub async fn start(config: &Config, agent: &Keypair) -> Result<(), ApiError> {
    let addr = config.api.listen;
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| ApiError::Bind { addr, source })?;
    let engine = DockerEngine::connect(&config.engine_socket, &config.machine.to_string()).await?;
    let api = Api::new(
        Arc::new(engine),
        config.data_dir.clone(),
        Pubkey::new_from_array(config.machine.0),
        NONCE_CAPACITY,
        unix_now,
    );
    let tls = server_config(agent)?;
    tracing::info!(%addr, "lease owner's API listening");
    tokio::spawn(serve(listener, tls, Arc::new(api), std::future::pending()));
    Ok(())
}

/// Serves `api` on `listener` with `tls` (the agent's, [`server_config`]) until `shutdown`
/// completes.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    api: Arc<Api>,
    shutdown: impl Future<Output = ()>,
) {
    let tls = TlsAcceptor::from(tls);
    accept_bounded("api", listener, CONNECTION_CAPS, shutdown, |socket| {
        connection(socket, tls.clone(), api.clone())
    })
    .await
}

/// One client's connection: its TLS handshake, then its requests (HTTP/1.1, kept alive; an
/// exec request hands the connection over to its session).
async fn connection(socket: TcpStream, tls: TlsAcceptor, api: Arc<Api>) {
    let stream = match tokio::time::timeout(CLIENT_TIMEOUT, tls.accept(socket)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => return tracing::debug!(error = %e, "api: TLS handshake failed"),
        Err(_) => return tracing::debug!("api: TLS handshake timed out"),
    };
    let service = service_fn(move |request| {
        let api = api.clone();
        async move { Ok::<_, Infallible>(routes::answer(&api, request).await) }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(CLIENT_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades()
        .await;
    if let Err(e) = served {
        tracing::debug!(error = %e, "api: connection ended");
    }
}
