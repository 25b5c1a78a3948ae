//! The API's answers: a request's endpoint, its signature, its lease's container and the
//! container's client are checked in that order, its nonce is remembered, and then its query is
//! read and answered.

use bollard::errors::Error as BollardError;
use futures_util::{Stream, StreamExt};
use gpu_market_sdk::api::{
    verify, AuthError, Authorization, Call, ContainerStatus, Endpoint, ErrorBody, LeaseStatus,
    LogsQuery, QueryError, ReplayError, RouteError, EXEC_PROTOCOL,
};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use hyper::{Request, Response, StatusCode};
use serde::Serialize;
use solana_pubkey::Pubkey;

use super::engine::{engine_status, LeaseContainer};
use super::{exec, retained, Api, MAX_EXEC_SESSIONS};
use crate::chain::Key;
use crate::retention;
use crate::runtime::SCRATCH_DIR;

/// Every answer's body: whole, or streamed from the engine.
pub(super) type Body = UnsyncBoxBody<Bytes, std::io::Error>;

/// Why a request is not served: its status, and its JSON body's `error`.
#[derive(Debug, thiserror::Error)]
pub(super) enum Refusal {
    #[error(transparent)]
    Route(#[from] RouteError),
    #[error(transparent)]
    Auth(#[from] AuthError),
    #[error("no container of lease {0} on this machine")]
    NoContainer(Pubkey),
    #[error("lease {0} is served to its client only")]
    NotTheClient(Pubkey),
    #[error(transparent)]
    Replay(#[from] ReplayError),
    #[error(transparent)]
    Query(#[from] QueryError),
    #[error("an exec request asks for `Connection: Upgrade` and `Upgrade: {EXEC_PROTOCOL}`")]
    NoUpgrade,
    #[error("the lease's container is not running")]
    NotRunning,
    #[error("the lease has {0} exec sessions open, its most at once")]
    TooManySessions(usize),
    #[error("no {0} in the lease's container")]
    NoSuchPath(String),
    /// Logged; the client is told no more.
    #[error("the container engine failed; the host's agent logs why")]
    Engine(BollardError),
    /// Logged; the client is told no more.
    #[error("the host could not read what it retains of the lease; its agent logs why")]
    Io(String),
}

impl Refusal {
    fn status(&self) -> StatusCode {
        match self {
            Refusal::Route(RouteError::NotFound)
            | Refusal::NoContainer(_)
            | Refusal::NoSuchPath(_) => StatusCode::NOT_FOUND,
            Refusal::Route(RouteError::MethodNotAllowed { .. }) => StatusCode::METHOD_NOT_ALLOWED,
            Refusal::Auth(_) => StatusCode::UNAUTHORIZED,
            Refusal::NotTheClient(_) => StatusCode::FORBIDDEN,
            Refusal::Replay(ReplayError::Replayed) | Refusal::NotRunning => StatusCode::CONFLICT,
            Refusal::Replay(ReplayError::Full { .. }) => StatusCode::SERVICE_UNAVAILABLE,
            Refusal::Query(_) | Refusal::NoUpgrade => StatusCode::BAD_REQUEST,
            Refusal::TooManySessions(_) => StatusCode::TOO_MANY_REQUESTS,
            Refusal::Engine(_) => StatusCode::BAD_GATEWAY,
            Refusal::Io(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn response(&self) -> Response<Body> {
        match self {
            Refusal::Engine(e) => tracing::warn!(error = %e, "api: the engine failed a request"),
            Refusal::Io(e) => tracing::warn!(error = %e, "api: reading a retained lease failed"),
            refusal => tracing::debug!(%refusal, "api: request refused"),
        }
        json(
            self.status(),
            &ErrorBody {
                error: self.to_string(),
            },
        )
    }

    /// The refusal of an engine error: `not_found` for the engine's 404.
    pub(super) fn engine(e: BollardError, not_found: impl FnOnce() -> Refusal) -> Refusal {
        match engine_status(&e) {
            Some(404) => not_found(),
            _ => Refusal::Engine(e),
        }
    }
}

/// The answer to `request`.
pub(super) async fn answer(api: &Api, request: Request<Incoming>) -> Response<Body> {
    respond(api, request)
        .await
        .unwrap_or_else(|refusal| refusal.response())
}

async fn respond(api: &Api, request: Request<Incoming>) -> Result<Response<Body>, Refusal> {
    let (endpoint, lease) = Endpoint::parse(request.method().as_str(), request.uri().path())?;
    let auth = authenticate(api, &request)?;
    // The client the agent recorded at the lease's start, kept through its retention: a
    // request signed by anyone else is refused before the engine is asked anything.
    let key = Key(lease.to_bytes());
    let Some(client) = retention::client_of(&api.data_dir, &key) else {
        return Err(Refusal::NoContainer(lease));
    };
    if Pubkey::new_from_array(client.0) != auth.signer {
        return Err(Refusal::NotTheClient(lease));
    }
    // Only a lease's client gets a nonce remembered, in its lease's cache: no one can fill
    // another lease's.
    api.admit(&lease, &auth)?;
    let call = Call::parse(endpoint, request.uri().query().unwrap_or_default())?;
    // A session over the lease's quota is refused before the engine is asked anything.
    let slot = match call {
        Call::Exec { .. } => Some(
            api.exec_slot(lease)
                .ok_or(Refusal::TooManySessions(MAX_EXEC_SESSIONS))?,
        ),
        _ => None,
    };
    let container = api
        .engine
        .lease_container(&lease)
        .await
        .map_err(Refusal::Engine)?;
    // The container's label, where it has one, names the same client.
    if container
        .as_ref()
        .and_then(|c| c.client)
        .is_some_and(|c| c != auth.signer)
    {
        return Err(Refusal::NotTheClient(lease));
    }
    let Some(LeaseContainer { id, .. }) = container else {
        return retained_answer(api, &key, call).await;
    };
    match call {
        Call::Status => {
            let status = api.engine.lease_status(&id).await;
            let status = status.map_err(|e| Refusal::engine(e, || Refusal::NoContainer(lease)))?;
            Ok(json(StatusCode::OK, &status))
        }
        Call::Logs(query) => logs(api, &id, query),
        Call::Exec { cmd, tty } => {
            let slot = slot.expect("taken for every exec call");
            exec::upgrade(api.engine.clone(), &id, (cmd, tty), request, slot).await
        }
        Call::Files(path) => {
            // The scratch folder is the host's (bound into the container): read there, it does
            // not depend on the container's state, which changes under a settling lease (seen:
            // a 404 from a container being cleaned up, while the host folder held the file).
            let scratch = retention::scratch_dir(&api.data_dir, &key);
            match scratch_path(&path) {
                Ok(inside) if scratch.is_dir() => retained::files(&scratch, inside),
                _ => files(api, &id, &path).await,
            }
        }
    }
}

/// The answer for a lease whose container is gone, from what the agent retains of it.
async fn retained_answer(api: &Api, lease: &Key, call: Call) -> Result<Response<Body>, Refusal> {
    match call {
        Call::Status => Ok(json(
            StatusCode::OK,
            &LeaseStatus {
                state: ContainerStatus::Gone,
                ports: Vec::new(),
                scratch: SCRATCH_DIR.to_string(),
            },
        )),
        Call::Logs(query) => retained::logs(&api.data_dir, lease, query.tail).await,
        Call::Exec { .. } => Err(Refusal::NotRunning),
        Call::Files(path) => {
            let path = scratch_path(&path)?;
            retained::files(&retention::scratch_dir(&api.data_dir, lease), path)
        }
    }
}

/// The request's `Authorization`, checked against the request itself at the API's clock.
fn authenticate(api: &Api, request: &Request<Incoming>) -> Result<Authorization, AuthError> {
    let header = request
        .headers()
        .get(AUTHORIZATION)
        .ok_or(AuthError::Missing)?
        .to_str()
        .map_err(|_| AuthError::Malformed("not visible ASCII"))?;
    let target = request.uri().path_and_query().map_or("/", |p| p.as_str());
    verify(
        header,
        &api.machine,
        request.method().as_str(),
        target,
        (api.clock)(),
    )
}

fn logs(api: &Api, id: &str, query: LogsQuery) -> Result<Response<Body>, Refusal> {
    let since = i32::try_from(query.since.unwrap_or(0))
        .map_err(|_| QueryError("since is after the engine's last second (2038)".into()))?;
    let output = api.engine.log_stream(id, query.tail, since, query.follow);
    Ok(streamed("application/octet-stream", output))
}

/// The archive of `path`, refused before anything is sent when the engine has no such path.
async fn files(api: &Api, id: &str, path: &str) -> Result<Response<Body>, Refusal> {
    let path = scratch_path(path)?;
    let mut archive = Box::pin(api.engine.archive(id, path));
    let first = match archive.next().await {
        Some(Err(e)) => return Err(Refusal::engine(e, || Refusal::NoSuchPath(path.into()))),
        first => first,
    };
    let archive = futures_util::stream::iter(first).chain(archive);
    Ok(streamed("application/x-tar", archive))
}

/// `path` if it is the scratch folder or in it, without a `..` that could leave it.
fn scratch_path(path: &str) -> Result<&str, QueryError> {
    let inside = path
        .strip_prefix(SCRATCH_DIR)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'));
    if !inside || path.split('/').any(|part| part == "..") {
        return Err(QueryError(format!(
            "{path:?} is not in the lease's scratch folder {SCRATCH_DIR}"
        )));
    }
    Ok(path)
}

/// A 200 answer streamed from the engine or a file; an error midway cuts the body short.
pub(super) fn streamed<E: std::error::Error + Send + Sync + 'static>(
    content_type: &'static str,
    stream: impl Stream<Item = Result<Bytes, E>> + Send + 'static,
) -> Response<Body> {
    let frames = stream.map(|chunk| chunk.map(Frame::data).map_err(std::io::Error::other));
    with_type(content_type, BodyExt::boxed_unsync(StreamBody::new(frames)))
}

fn json(status: StatusCode, value: &impl Serialize) -> Response<Body> {
    let bytes = serde_json::to_vec(value).expect("the API's answers serialise");
    let body = Full::new(Bytes::from(bytes)).map_err(|never| match never {});
    let mut response = with_type("application/json", BodyExt::boxed_unsync(body));
    *response.status_mut() = status;
    response
}

pub(super) fn with_type(content_type: &'static str, body: Body) -> Response<Body> {
    let mut response = Response::new(body);
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_paths_in_the_scratch_folder_are_served() {
        for path in [
            "/workspace",
            "/workspace/",
            "/workspace/out/r.txt",
            "/workspace/a..b",
        ] {
            assert_eq!(scratch_path(path), Ok(path));
        }
        for path in [
            "/etc/passwd",
            "/workspaces/x",
            "workspace/x",
            "/workspace/../etc/passwd",
            "/workspace/a/../../etc",
            "/",
        ] {
            assert!(scratch_path(path).is_err(), "{path}");
        }
    }

    #[test]
    fn refusals_answer_with_their_status() {
        let lease = Pubkey::new_unique();
        for (refusal, status) in [
            (Refusal::Auth(AuthError::Missing), 401),
            (Refusal::Auth(AuthError::BadSignature), 401),
            (Refusal::NotTheClient(lease), 403),
            (Refusal::NoContainer(lease), 404),
            (Refusal::Route(RouteError::NotFound), 404),
            (Refusal::Replay(ReplayError::Replayed), 409),
            (Refusal::Query(QueryError("x".into())), 400),
            (Refusal::Replay(ReplayError::Full { capacity: 1 }), 503),
        ] {
            assert_eq!(refusal.response().status().as_u16(), status, "{refusal}");
        }
    }
}
