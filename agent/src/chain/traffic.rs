//! What the agent exchanges with its RPC node, as a public RPC provider meters it: requests and
//! bytes. [`Counting`] wraps the HTTP transport and adds each request's and each answer's JSON
//! size to a shared [`Traffic`]; the websocket feed adds each notification's
//! (`watch::subscribe_all`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use solana_rpc_client::rpc_sender::{RpcSender, RpcTransportStats};
use solana_rpc_client_api::client_error::Result as ClientResult;
use solana_rpc_client_api::request::RpcRequest;

/// Bytes exchanged with the RPC node so far: JSON-RPC requests and answers over HTTP, and the
/// websocket's notifications. Shared by the transport, the feed and `/metrics`.
#[derive(Debug, Default)]
pub struct Traffic {
    http: AtomicU64,
    websocket: AtomicU64,
}

impl Traffic {
    /// A JSON-RPC exchange of `bytes` (request and answer bodies).
    pub fn http(&self, bytes: usize) {
        self.http.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// A websocket notification of `bytes`.
    pub fn websocket(&self, bytes: usize) {
        self.websocket.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub fn http_bytes(&self) -> u64 {
        self.http.load(Ordering::Relaxed)
    }

    pub fn websocket_bytes(&self) -> u64 {
        self.websocket.load(Ordering::Relaxed)
    }
}

/// An RPC transport that counts the JSON it sends and receives into `traffic` (the body as
/// serialised: a compact encoding of what crossed the wire, headers left out).
pub struct Counting<S> {
    inner: S,
    traffic: Arc<Traffic>,
}

impl<S> Counting<S> {
    pub fn new(inner: S, traffic: Arc<Traffic>) -> Self {
        Counting { inner, traffic }
    }
}

#[async_trait]
impl<S: RpcSender + Send + Sync> RpcSender for Counting<S> {
    async fn send(&self, request: RpcRequest, params: Value) -> ClientResult<Value> {
        let sent = json_len(&request.build_request_json(0, params.clone()));
        let answer = self.inner.send(request, params).await;
        let received = answer.as_ref().map(json_len).unwrap_or(0);
        tracing::trace!(%request, sent, received, "JSON-RPC request");
        self.traffic.http(sent + received);
        answer
    }

    fn get_transport_stats(&self) -> RpcTransportStats {
        self.inner.get_transport_stats()
    }

    fn url(&self) -> String {
        self.inner.url()
    }
}

/// The size of `value` as compact JSON.
pub fn json_len<T: serde::Serialize>(value: &T) -> usize {
    serde_json::to_vec(value).map_or(0, |v| v.len())
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// A node that answers every request with `answer` (a test fake).
    struct Answers {
        answer: Value,
        seen: Mutex<u64>,
    }

    #[async_trait]
    impl RpcSender for Answers {
        async fn send(&self, _: RpcRequest, _: Value) -> ClientResult<Value> {
            *self.seen.lock().unwrap() += 1;
            Ok(self.answer.clone())
        }
        fn get_transport_stats(&self) -> RpcTransportStats {
            RpcTransportStats {
                request_count: *self.seen.lock().unwrap() as usize,
                ..Default::default()
            }
        }
        fn url(&self) -> String {
            "test".into()
        }
    }

    #[tokio::test]
    async fn each_exchange_counts_its_request_and_its_answer() {
        let traffic = Arc::new(Traffic::default());
        let answer = serde_json::json!({"context": {"slot": 5}, "value": "x".repeat(1000)});
        let sender = Counting::new(
            Answers {
                answer: answer.clone(),
                seen: Mutex::new(0),
            },
            traffic.clone(),
        );
        let params = serde_json::json!(["11111111111111111111111111111111"]);
        sender
            .send(RpcRequest::GetAccountInfo, params.clone())
            .await
            .unwrap();
        let request = RpcRequest::GetAccountInfo.build_request_json(0, params);
        assert_eq!(
            traffic.http_bytes(),
            (json_len(&request) + json_len(&answer)) as u64
        );
        assert!(traffic.http_bytes() > 1000);
        assert_eq!(sender.get_transport_stats().request_count, 1);
        assert_eq!(traffic.websocket_bytes(), 0);
    }
}
