//! The operator's `gpu-market-agent drain`, reaching the running daemon through its data folder:
//! only who may write there (the daemon's own user, root) can drain a host, and nothing listens
//! on a port for it.
//!
//! The verb writes `drain.request`; the daemon, which looks for it every second, renames it
//! `drain.accepted` and drains; when done it writes `drain.result` (JSON) and, if every lease
//! ended, removes the acceptance, then exits. The verb waits for the acceptance, then for the
//! result. A drain is sticky: while it is accepted, every start of the daemon drains.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How a drain ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainReport {
    /// Every lease was stopped, finally proven and ended.
    pub drained: bool,
    /// The leases still in the state file when the drain deadline passed.
    pub left: Vec<String>,
}

/// The drain request files of one data folder.
#[derive(Debug, Clone)]
pub struct DrainControl {
    dir: PathBuf,
}

impl DrainControl {
    pub fn new(data_dir: &Path) -> Self {
        DrainControl {
            dir: data_dir.to_path_buf(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The operator asks for a drain; a result left by an earlier one is removed.
    pub fn request(&self) -> io::Result<()> {
        remove_if_there(&self.path("drain.result"))?;
        std::fs::write(self.path("drain.request"), b"")
    }

    /// Withdraws a request no daemon took.
    pub fn withdraw(&self) -> io::Result<()> {
        remove_if_there(&self.path("drain.request"))
    }

    /// The daemon: completes once a drain is requested (or was accepted before a restart: a
    /// drain cut short by a crash goes on), having accepted it.
    pub async fn requested(&self) {
        loop {
            if self.path("drain.accepted").exists() {
                return;
            }
            if std::fs::rename(self.path("drain.request"), self.path("drain.accepted")).is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// Whether a daemon took the request.
    pub fn accepted(&self) -> bool {
        self.path("drain.accepted").exists()
    }

    /// The daemon: the drain ended with `report`. One that left leases stays accepted: the
    /// next start (a supervisor's restart) goes on draining and takes no bid; a finished drain
    /// is over, and the next start takes bids again.
    pub fn finish(&self, report: &DrainReport) -> io::Result<()> {
        let json = serde_json::to_vec(report).expect("a drain report serialises");
        std::fs::write(self.path("drain.result"), json)?;
        if report.drained {
            remove_if_there(&self.path("drain.accepted"))?;
        }
        Ok(())
    }

    /// The result of the last drain, if one ended.
    pub fn result(&self) -> io::Result<Option<DrainReport>> {
        match std::fs::read(self.path("drain.result")) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
}

fn remove_if_there(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_request_is_accepted_once_and_its_result_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let operator = DrainControl::new(dir.path());
        let daemon = DrainControl::new(dir.path());
        let waiting = tokio::spawn({
            let daemon = daemon.clone();
            async move { daemon.requested().await }
        });
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(!waiting.is_finished(), "nothing was requested yet");
        operator.request().unwrap();
        waiting.await.unwrap();
        assert!(operator.accepted());
        assert_eq!(operator.result().unwrap(), None);

        let report = DrainReport {
            drained: false,
            left: vec!["Lease1".into()],
        };
        daemon.finish(&report).unwrap();
        assert_eq!(operator.result().unwrap(), Some(report));
        // Leases were left: the drain stays accepted, and the next start (a supervisor restarts
        // a daemon that exited with an error) drains on. Before the fix it took bids again.
        assert!(operator.accepted());
        tokio::time::timeout(Duration::from_secs(1), daemon.requested())
            .await
            .expect("the unfinished drain goes on after a restart");
        let done = DrainReport {
            drained: true,
            left: Vec::new(),
        };
        daemon.finish(&done).unwrap();
        assert!(!operator.accepted(), "a finished drain is over");
        assert_eq!(operator.result().unwrap(), Some(done));
        // A new request forgets the old result.
        operator.request().unwrap();
        assert_eq!(operator.result().unwrap(), None);
        operator.withdraw().unwrap();
        assert!(!dir.path().join("drain.request").exists());
    }

    #[tokio::test(start_paused = true)]
    async fn a_drain_accepted_before_a_crash_goes_on_after_the_restart() {
        let dir = tempfile::tempdir().unwrap();
        let c = DrainControl::new(dir.path());
        c.request().unwrap();
        c.requested().await;
        // The daemon dies mid-drain; the next one drains at once.
        tokio::time::timeout(
            Duration::from_secs(1),
            DrainControl::new(dir.path()).requested(),
        )
        .await
        .expect("the accepted drain goes on");
    }
}
