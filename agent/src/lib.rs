//! The host agent: the daemon a host operator runs on each GPU server.
//!
//! A reconcile loop ([`reconcile`]) over three backends: the market program ([`chain::Chain`]),
//! the container engine ([`runtime::ContainerRuntime`]) and the GPUs ([`gpu::GpuBackend`]), each
//! with a real implementation and one for tests.

pub mod api;
pub mod chain;
pub mod check;
pub mod config;
pub mod control;
pub mod detect;
pub mod docker;
pub mod env;
pub mod evidence;
pub mod firewall;
pub mod gpu;
pub mod images;
pub mod metrics;
pub mod network;
pub mod readings;
pub mod reconcile;
pub mod redact;
pub mod retention;
pub mod runtime;
pub mod state;

/// Runs `f` on a blocking thread, off the runtime's (a system call that may wait on the disk,
/// the kernel or another program), and gives its result; a panic in `f` stays a panic.
pub async fn off_runtime<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(f).await {
        Ok(done) => done,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}
