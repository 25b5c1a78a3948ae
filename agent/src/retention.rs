//! What the agent keeps of a lease for its client, beside and after its container: the scratch
//! volume mounted at the container's `/workspace`, the client's key that the agent's API
//! serves them to, and the power logs behind the lease's proofs (`crate::evidence`). All stay
//! for the retention period after the lease ends, then go with the lease's saved logs.
//!
//! The scratch volume is a tmpfs of the size the bid asked, mounted by the agent under
//! `<data_dir>/leases/<lease>/scratch` and bound into the container: the size is a hard limit
//! (a write past it fails with ENOSPC inside the container), its pages count against the
//! container's memory limit while it runs, and what the container left survives its exit,
//! unlike the engine's own tmpfs mounts, for the client to fetch.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rustix::mount::{mount, unmount, MountFlags, UnmountFlags};

use crate::chain::Key;
use crate::runtime::RuntimeError;

/// The folder of `lease`'s retained files.
pub fn lease_dir(data_dir: &Path, lease: &Key) -> PathBuf {
    data_dir.join("leases").join(lease.to_string())
}

/// The host folder bound at the container's `/workspace`.
pub fn scratch_dir(data_dir: &Path, lease: &Key) -> PathBuf {
    lease_dir(data_dir, lease).join("scratch")
}

fn client_file(data_dir: &Path, lease: &Key) -> PathBuf {
    lease_dir(data_dir, lease).join("client")
}

fn ended_file(data_dir: &Path, lease: &Key) -> PathBuf {
    lease_dir(data_dir, lease).join("ended")
}

fn scratch_error(path: &Path, reason: impl ToString) -> RuntimeError {
    RuntimeError::Scratch {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}

/// What the agent keeps of one lease for its client while it runs and for the retention after.
#[derive(Debug, Clone)]
pub struct Retained {
    pub data_dir: PathBuf,
    pub lease: Key,
    /// The one the lease API serves the lease's files to.
    pub client: Key,
    /// The scratch volume's size (none for 0).
    pub scratch_bytes: u64,
}

impl Retained {
    /// Records the client the API serves the lease to, and mounts the scratch tmpfs; returns
    /// the scratch folder when there is one. Done again after a restart, it keeps what is
    /// mounted. Blocking (a mount).
    pub fn prepare(&self) -> Result<Option<PathBuf>, RuntimeError> {
        let (data_dir, lease) = (&self.data_dir, &self.lease);
        let dir = lease_dir(data_dir, lease);
        std::fs::create_dir_all(&dir).map_err(|e| scratch_error(&dir, e))?;
        let client_path = client_file(data_dir, lease);
        std::fs::write(&client_path, self.client.to_string())
            .map_err(|e| scratch_error(&client_path, e))?;
        // A lease readied before and abandoned (its `allocate` failed) runs now: its retention
        // has not started.
        match std::fs::remove_file(ended_file(data_dir, lease)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(scratch_error(&dir, e))
            }
            _ => {}
        }
        if self.scratch_bytes == 0 {
            return Ok(None);
        }
        let scratch = scratch_dir(data_dir, lease);
        std::fs::create_dir_all(&scratch).map_err(|e| scratch_error(&scratch, e))?;
        if !mounted(&scratch) {
            let options = std::ffi::CString::new(format!("size={},mode=1777", self.scratch_bytes))
                .expect("no NUL in the mount options");
            mount(
                "gpu-market-scratch",
                &scratch,
                "tmpfs",
                MountFlags::NOSUID | MountFlags::NODEV,
                options.as_c_str(),
            )
            .map_err(|e| scratch_error(&scratch, format!("cannot mount a tmpfs: {e}")))?;
        }
        Ok(Some(scratch))
    }
}

/// Whether `dir` is a mount point (another device than its parent's).
pub(crate) fn mounted(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let dev = |p: &Path| std::fs::metadata(p).map(|m| m.dev()).ok();
    match (dev(dir), dir.parent().and_then(dev)) {
        (Some(a), Some(b)) => a != b,
        _ => false,
    }
}

/// The client `lease`'s files are served to, while the agent retains them.
pub fn client_of(data_dir: &Path, lease: &Key) -> Option<Key> {
    std::fs::read_to_string(client_file(data_dir, lease))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Notes that `lease` ended now: its retention starts.
pub fn mark_ended(data_dir: &Path, lease: &Key) -> std::io::Result<()> {
    let dir = lease_dir(data_dir, lease);
    if !dir.exists() {
        return Ok(());
    }
    std::fs::write(ended_file(data_dir, lease), b"")
}

/// The leases `dir` holds a folder of, by the folders' names.
pub fn lease_folders(dir: &Path) -> Vec<Key> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<Key>().ok())
        .collect()
}

/// The leases the agent keeps files of.
fn kept(data_dir: &Path) -> Vec<Key> {
    lease_folders(&data_dir.join("leases"))
}

/// Starts the retention of every lease the agent keeps files of that is not in `live` and has
/// not ended: what was prepared for a lease that will not run here (its `allocate` failed
/// while it was being readied, or the agent was killed then) would otherwise be kept, its
/// scratch volume mounted, for ever. Returns them.
pub fn end_unknown(data_dir: &Path, live: &BTreeSet<Key>) -> Vec<Key> {
    kept(data_dir)
        .into_iter()
        .filter(|lease| !live.contains(lease) && !ended_file(data_dir, lease).exists())
        .filter(|lease| mark_ended(data_dir, lease).is_ok())
        .collect()
}

/// How long, and how much of, what ended leases leave the agent keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keep {
    /// From a lease's end.
    pub period: Duration,
    /// The most memory the scratch volumes of ended leases may hold together (a tmpfs keeps
    /// its pages after its container is gone; the machine does not offer this memory to leases).
    pub scratch_bytes: u64,
}

/// Why a lease's retained files were deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Swept {
    /// Its retention period ended.
    Ended,
    /// The ended leases' scratch volumes held more memory than [`Keep::scratch_bytes`]: it was
    /// the oldest.
    OverBudget,
}

/// Deletes what the agent kept of leases that ended more than `keep.period` before `now` (their
/// scratch volume unmounted, their saved logs with them), and then, while the scratch volumes
/// of the ended leases left hold more than `keep.scratch_bytes` of memory, those of the
/// lease that ended first; never those in `live` (running, or being prepared again). Returns
/// them, with why.
pub fn sweep(
    data_dir: &Path,
    keep: Keep,
    now: SystemTime,
    live: &BTreeSet<Key>,
) -> Vec<(Key, Swept)> {
    let mut ended: Vec<(SystemTime, Key)> = kept(data_dir)
        .into_iter()
        .filter(|l| !live.contains(l))
        .filter_map(|l| {
            let at = std::fs::metadata(ended_file(data_dir, &l)).and_then(|m| m.modified());
            Some((at.ok()?, l))
        })
        .collect();
    ended.sort();
    let (due, mut left): (Vec<_>, Vec<_>) = ended
        .into_iter()
        .partition(|(at, _)| now.duration_since(*at).is_ok_and(|age| age >= keep.period));
    let mut doomed: Vec<(Key, Swept)> = due.into_iter().map(|(_, l)| (l, Swept::Ended)).collect();
    let mut held: u64 = left
        .iter()
        .map(|(_, l)| held_bytes(&scratch_dir(data_dir, l)))
        .sum();
    left.reverse();
    while held > keep.scratch_bytes {
        let Some((_, oldest)) = left.pop() else { break };
        held = held.saturating_sub(held_bytes(&scratch_dir(data_dir, &oldest)));
        doomed.push((oldest, Swept::OverBudget));
    }
    doomed
        .into_iter()
        .filter(|(lease, _)| delete(data_dir, lease))
        .collect()
}

/// Deletes what the agent kept of `lease`: its scratch volume unmounted, its files and saved
/// logs; whether it could.
fn delete(data_dir: &Path, lease: &Key) -> bool {
    let scratch = scratch_dir(data_dir, lease);
    if mounted(&scratch) {
        if let Err(e) = unmount(&scratch, UnmountFlags::DETACH) {
            tracing::warn!(%lease, error = %e, "cannot unmount the lease's scratch volume");
            return false;
        }
    }
    let _ = std::fs::remove_file(crate::reconcile::logs_path(data_dir, lease));
    match std::fs::remove_dir_all(lease_dir(data_dir, lease)) {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(%lease, error = %e, "cannot delete the lease's retained files");
            false
        }
    }
}

/// The memory the tmpfs mounted at `dir` holds: its used blocks (none where nothing is
/// mounted).
fn held_bytes(dir: &Path) -> u64 {
    if !mounted(dir) {
        return 0;
    }
    rustix::fs::statvfs(dir).map_or(0, |s| {
        s.f_blocks
            .saturating_sub(s.f_bfree)
            .saturating_mul(s.f_frsize)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kept for `period`, with no bound on memory.
    fn keep(period: Duration) -> Keep {
        Keep {
            period,
            scratch_bytes: u64::MAX,
        }
    }

    #[test]
    fn retained_files_stay_until_the_retention_ends_then_go_with_the_logs() {
        let dir = tempfile::tempdir().unwrap();
        let (lease, client) = (Key([1; 32]), Key([2; 32]));
        let retained = Retained {
            data_dir: dir.path().to_path_buf(),
            lease,
            client,
            scratch_bytes: 0,
        };
        assert_eq!(retained.prepare().unwrap(), None);
        assert_eq!(client_of(dir.path(), &lease), Some(client));
        let logs = crate::reconcile::logs_path(dir.path(), &lease);
        std::fs::create_dir_all(logs.parent().unwrap()).unwrap();
        std::fs::write(&logs, b"out").unwrap();
        // The power logs behind its proofs expire with the rest (before, they were never
        // deleted).
        let evidence = crate::evidence::lease_dir(dir.path(), &lease);
        std::fs::create_dir_all(&evidence).unwrap();
        std::fs::write(evidence.join("0.json"), b"{}").unwrap();
        let hour = Duration::from_secs(3600);
        let none = BTreeSet::new();
        // Running: never swept.
        assert!(sweep(dir.path(), keep(hour), SystemTime::now() + 2 * hour, &none).is_empty());
        mark_ended(dir.path(), &lease).unwrap();
        assert!(sweep(dir.path(), keep(hour), SystemTime::now(), &none).is_empty());
        assert_eq!(client_of(dir.path(), &lease), Some(client));
        assert_eq!(
            sweep(dir.path(), keep(hour), SystemTime::now() + 2 * hour, &none),
            vec![(lease, Swept::Ended)]
        );
        assert_eq!(client_of(dir.path(), &lease), None);
        assert!(!logs.exists());
        assert!(!evidence.exists());
    }

    #[test]
    fn files_of_a_lease_the_agent_does_not_run_go_after_the_retention_unless_it_runs_again() {
        let dir = tempfile::tempdir().unwrap();
        let retained = |lease: Key| Retained {
            data_dir: dir.path().to_path_buf(),
            lease,
            client: Key([9; 32]),
            scratch_bytes: 0,
        };
        let (known, unknown) = (Key([1; 32]), Key([2; 32]));
        retained(known).prepare().unwrap();
        retained(unknown).prepare().unwrap();
        let hour = Duration::from_secs(3600);
        let later = SystemTime::now() + 2 * hour;
        // Before, a lease readied and abandoned (or one a killed agent was preparing) had no
        // end, and its files and scratch mount stayed for ever.
        assert!(sweep(dir.path(), keep(hour), later, &BTreeSet::new()).is_empty());
        let live = BTreeSet::from([known]);
        assert_eq!(end_unknown(dir.path(), &live), vec![unknown]);
        assert!(end_unknown(dir.path(), &live).is_empty(), "once");
        // Readied here again before the retention ends: its files stay.
        retained(unknown).prepare().unwrap();
        assert!(sweep(dir.path(), keep(hour), later, &live).is_empty());
        mark_ended(dir.path(), &unknown).unwrap();
        // Being prepared again now: never swept under it.
        assert!(sweep(dir.path(), keep(hour), later, &BTreeSet::from([unknown])).is_empty());
        assert_eq!(
            sweep(dir.path(), keep(hour), later, &live),
            vec![(unknown, Swept::Ended)]
        );
        assert_eq!(client_of(dir.path(), &known), Some(Key([9; 32])));
    }

    /// Issue 32, fault 7: the scratch volumes of ended leases hold memory (a tmpfs keeps its
    /// pages after its container is gone) that the machine does not offer to leases. Over
    /// `[network] retained_scratch_mib`, the oldest go before their retention ends; before,
    /// they stayed for the whole retention, however many leases ended.
    #[test]
    fn ended_leases_scratch_volumes_over_the_budget_go_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        let leases = [Key([1; 32]), Key([2; 32]), Key([3; 32])];
        /// Unmounts what a failed assertion would leave mounted.
        struct Unmount<'a>(&'a Path, [Key; 3]);
        impl Drop for Unmount<'_> {
            fn drop(&mut self) {
                for l in &self.1 {
                    let _ = delete(self.0, l);
                }
            }
        }
        let _unmount = Unmount(dir.path(), leases);
        let start = SystemTime::now();
        for (i, lease) in leases.iter().enumerate() {
            let retained = Retained {
                data_dir: dir.path().to_path_buf(),
                lease: *lease,
                client: Key([9; 32]),
                scratch_bytes: 8 << 20,
            };
            let scratch = retained.prepare().unwrap().expect("a tmpfs scratch volume");
            std::fs::write(scratch.join("results"), vec![7u8; 3 << 20]).unwrap();
            mark_ended(dir.path(), lease).unwrap();
            // Ended a minute apart, the first first.
            std::fs::File::options()
                .write(true)
                .open(ended_file(dir.path(), lease))
                .unwrap()
                .set_modified(start + Duration::from_secs(60 * i as u64))
                .unwrap();
        }
        let held = |l: &Key| held_bytes(&scratch_dir(dir.path(), l));
        assert!(leases.iter().all(|l| held(l) >= 3 << 20), "3 MiB each");
        let budget = Keep {
            period: Duration::from_secs(3_600),
            scratch_bytes: 7 << 20,
        };
        let now = start + Duration::from_secs(600);
        // 9 MiB held, 7 allowed: the first to end goes; 6 MiB are left.
        assert_eq!(
            sweep(dir.path(), budget, now, &BTreeSet::new()),
            vec![(leases[0], Swept::OverBudget)]
        );
        assert_eq!(client_of(dir.path(), &leases[0]), None);
        assert!(sweep(dir.path(), budget, now, &BTreeSet::new()).is_empty());
        assert_eq!(client_of(dir.path(), &leases[2]), Some(Key([9; 32])));
        // The retention of the others ends: both go, unmounted.
        let later = start + Duration::from_secs(2 * 3_600);
        let mut swept = sweep(dir.path(), budget, later, &BTreeSet::new());
        swept.sort_by_key(|(l, _)| *l);
        assert_eq!(
            swept,
            vec![(leases[1], Swept::Ended), (leases[2], Swept::Ended)]
        );
        assert!(!mounted(&scratch_dir(dir.path(), &leases[1])));
    }
}
