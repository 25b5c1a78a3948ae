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
pub mod netfilter;
pub mod network;
pub mod readings;
pub mod reconcile;
pub mod redact;
pub mod retention;
pub mod runtime;
pub mod state;

/// Calls of [`off_runtime`] under way.
static OFF_RUNTIME: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Runs `f` on a blocking thread, off the runtime's (a system call that may wait on the disk,
/// the kernel or another program), and gives its result; a panic in `f` stays a panic.
pub async fn off_runtime<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    struct Counted;
    impl Drop for Counted {
        fn drop(&mut self) {
            OFF_RUNTIME.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
    OFF_RUNTIME.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let _counted = Counted;
    match tokio::task::spawn_blocking(f).await {
        Ok(done) => done,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// How many calls of [`off_runtime`] are under way: work that takes real time whatever a paused
/// clock says (tests on tokio's paused clock wait for it).
pub fn off_runtime_calls() -> usize {
    OFF_RUNTIME.load(std::sync::atomic::Ordering::SeqCst)
}
