//! The accounts one machine's agent reads, kept up to date from the websocket's notifications
//! (`watch`), so that a tick reads memory instead of asking the RPC node for every account
//! again: a public RPC node will not serve `getProgramAccounts` to every host every second.
//!
//! What is kept: the accounts the feed watches one by one (the clock, the market, the machine,
//! the books) and the program accounts its subscriptions match (this machine's leases, the bids
//! it may take, and every machine and lease of the market: the packing policy's input), each
//! with the slot it was seen at; an older answer never replaces a newer one. The market's
//! machines and leases are served as a whole ([`Mirror::listing`]) once one scan of each was
//! installed after the feed subscribed; until then they are scanned from the RPC node.
//! A program subscription does not tell when an account closes (it is no longer the program's),
//! so the list of the machine's leases is scanned again whenever the machine account changes,
//! which every allocation and every settlement does. Everything is dropped when the feed
//! drops, when one of its subscriptions ends, and every [`RELIST`](super::watch::RELIST) (so
//! that closed bids and anything a lost notification left stale go): until it is subscribed
//! again, reads go to the RPC node as they would without it. The clock is served only while
//! it is fresh ([`CLOCK_FRESHNESS`]).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};

use std::time::Duration;

use solana_pubkey::Pubkey;
use solana_rpc_client_api::filter::RpcFilterType;
use tokio::time::Instant;

/// An account's data, `None` once it is known closed, as of `slot`, and when it came.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    slot: u64,
    data: Option<Vec<u8>>,
    at: Instant,
}

/// The longest the clock sysvar is served from the mirror after it came: a live node sends it
/// every slot (400 ms), so an older one means a feed that stalls, and the time it says is read
/// from the RPC node instead. (Before, a silent feed froze the agent's time until the watcher
/// gave up on it, 30 s by default.)
pub const CLOCK_FRESHNESS: Duration = Duration::from_secs(2);

#[derive(Default)]
pub struct Mirror {
    inner: Mutex<Inner>,
}

/// The most accounts the mirror remembers as changed between two reads of its changes
/// ([`Mirror::changes`]); past it, the reader builds what it keeps afresh.
const CHANGED_LIMIT: usize = 1 << 17;

/// The accounts that changed since a reader last asked ([`Mirror::changes`]): those open, as
/// they are now, for each of the reader's filters, and those closed.
#[derive(Debug, Default)]
pub struct Changed {
    pub matched: Vec<Vec<(Pubkey, Vec<u8>)>>,
    pub closed: Vec<Pubkey>,
}

#[derive(Default)]
struct Inner {
    /// Whether the feed is subscribed: only then is anything here current.
    live: bool,
    /// The accounts the feed watches one by one.
    watched: BTreeSet<Pubkey>,
    /// The program subscriptions' filters: an account one of them matches is kept current.
    subscriptions: Vec<Vec<RpcFilterType>>,
    /// The machine account: its change may mean a lease closed.
    machine: Pubkey,
    accounts: HashMap<Pubkey, Seen>,
    /// The machine's lease accounts as of `slot`, unless a change since calls for a new scan.
    leases: Option<(u64, BTreeSet<Pubkey>)>,
    /// The slot of the machine account's last notification: a scan older than it may list a
    /// lease closed since.
    machine_slot: u64,
    /// The filters that match a lease of the machine.
    lease_filters: Vec<RpcFilterType>,
    /// The program subscriptions whose every account the mirror holds: a scan by their
    /// filters was installed since the feed subscribed (the market's machines and leases for
    /// the packing policy), and the feed keeps them current but for closed accounts.
    listed: Vec<Vec<RpcFilterType>>,
    /// Counts the feed's subscriptions and drops, and the followers of the changes: what was
    /// kept from the mirror of another generation may have missed a change.
    generation: u64,
    /// The accounts stored since the last read of the changes (`None`: nobody follows them,
    /// or more than [`CHANGED_LIMIT`] changed).
    changed: Option<HashSet<Pubkey>>,
}

/// What a read found in the mirror: each key's data where the mirror is current for it, and
/// the keys it is not (to be read from the RPC node).
pub struct Found {
    pub accounts: Vec<Option<Option<Vec<u8>>>>,
    pub missing: Vec<Pubkey>,
}

impl Mirror {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().expect("mirror lock")
    }

    /// The feed (re)subscribed: nothing from before is current, and from now on `watched` and
    /// the accounts `subscriptions` match are followed; `lease_filters` match the machine's
    /// leases.
    pub fn subscribed(
        &self,
        machine: Pubkey,
        watched: BTreeSet<Pubkey>,
        subscriptions: Vec<Vec<RpcFilterType>>,
        lease_filters: Vec<RpcFilterType>,
    ) {
        let mut s = self.lock();
        *s = Inner {
            live: true,
            watched,
            subscriptions,
            machine,
            accounts: HashMap::new(),
            leases: None,
            machine_slot: 0,
            lease_filters,
            listed: Vec::new(),
            generation: s.generation + 1,
            changed: None,
        };
    }

    /// The feed dropped: reads go to the RPC node until it is subscribed again.
    pub fn dropped(&self) {
        let mut s = self.lock();
        *s = Inner {
            generation: s.generation + 1,
            ..Inner::default()
        };
    }

    /// Starts following the changes: a new generation, to be given to [`Self::changes`],
    /// which then lists what was stored after this call (to this caller alone: a follower of an
    /// earlier generation gets `None` from then on). `None` while the feed is not subscribed.
    pub fn follow_changes(&self) -> Option<u64> {
        let mut s = self.lock();
        s.generation += 1;
        s.changed = Some(HashSet::new());
        s.live.then_some(s.generation)
    }

    /// The accounts stored since the last call (or [`Self::follow_changes`]) of generation
    /// `generation`: those open that pass each of `filters`, and those closed. `None` where
    /// the mirror may have missed one since: the feed subscribed again or dropped, or more
    /// than [`CHANGED_LIMIT`] changed.
    pub fn changes(&self, generation: u64, filters: &[Vec<RpcFilterType>]) -> Option<Changed> {
        let mut s = self.lock();
        if !s.live || s.generation != generation {
            return None;
        }
        let changed = s.changed.as_mut().map(std::mem::take)?;
        let mut out = Changed {
            matched: vec![Vec::new(); filters.len()],
            closed: Vec::new(),
        };
        for key in changed {
            match s.accounts.get(&key).map(|a| a.data.as_deref()) {
                Some(Some(data)) => {
                    for (f, found) in filters.iter().zip(out.matched.iter_mut()) {
                        if matches(f, data) {
                            found.push((key, data.to_vec()));
                        }
                    }
                }
                Some(None) => out.closed.push(key),
                None => {}
            }
        }
        Some(out)
    }

    pub fn is_live(&self) -> bool {
        self.lock().live
    }

    /// A notification: `key` holds `data` (`None`: closed) as of `slot`.
    pub fn notified(&self, key: Pubkey, slot: u64, data: Option<Vec<u8>>) {
        let mut s = self.lock();
        if !s.live {
            return;
        }
        if key == s.machine {
            s.leases = None;
            s.machine_slot = s.machine_slot.max(slot);
        }
        let is_lease = data
            .as_deref()
            .is_some_and(|d| matches(&s.lease_filters, d));
        if let (true, Some((_, leases))) = (is_lease, s.leases.as_mut()) {
            leases.insert(key);
        }
        s.put(key, slot, data);
    }

    /// The accounts at `keys`, where the mirror has them.
    pub fn get(&self, keys: &[Pubkey]) -> Found {
        let s = self.lock();
        let mut found = Found {
            accounts: Vec::with_capacity(keys.len()),
            missing: Vec::new(),
        };
        for key in keys {
            let seen = s.live.then(|| s.accounts.get(key)).flatten().filter(|a| {
                *key != solana_sdk_ids::sysvar::clock::ID || a.at.elapsed() <= CLOCK_FRESHNESS
            });
            if seen.is_none() {
                found.missing.push(*key);
            }
            found.accounts.push(seen.map(|a| a.data.clone()));
        }
        found
    }

    /// What the RPC node answered for `key` as of `slot`: kept when the feed follows it (or
    /// followed it: a closed account's entry says so from now on).
    pub fn answered(&self, key: Pubkey, slot: u64, data: Option<&[u8]>) {
        let mut s = self.lock();
        let followed = s.watched.contains(&key)
            || s.accounts.contains_key(&key)
            || data.is_some_and(|d| s.subscriptions.iter().any(|f| matches(f, d)));
        if s.live && followed {
            s.put(key, slot, data.map(<[u8]>::to_vec));
        }
    }

    /// The machine's lease accounts, if the mirror knows them all.
    pub fn leases(&self) -> Option<Vec<(Pubkey, Vec<u8>)>> {
        let s = self.lock();
        let (_, keys) = s.leases.as_ref().filter(|_| s.live)?;
        Some(
            keys.iter()
                .filter_map(|k| Some((*k, s.accounts.get(k)?.data.clone()?)))
                .collect(),
        )
    }

    /// A scan of the machine's leases as of `slot` found `found`: with the leases notified
    /// since, they are the machine's leases; one kept from before that the scan did not find
    /// has closed.
    pub fn scanned_leases(&self, slot: u64, found: &[(Pubkey, Vec<u8>)]) {
        let mut s = self.lock();
        if !s.live {
            return;
        }
        let lease_filters = s.lease_filters.clone();
        let leases = s.install(&lease_filters, slot, found);
        // A scan that raced a settlement (the machine notified at a later slot) may list the
        // lease it closed: the next read scans again.
        if slot >= s.machine_slot {
            s.leases = Some((slot, leases));
        }
    }

    /// A scan by `filters` as of `slot` found `found`. Kept as [`Self::scanned_leases`] keeps
    /// the machine's leases: what it found, and as closed what the mirror had that it did not.
    /// When a subscription of the feed has exactly these filters, the mirror has all of its
    /// accounts from now on ([`Self::listing`]).
    pub fn scanned(&self, filters: &[RpcFilterType], slot: u64, found: &[(Pubkey, Vec<u8>)]) {
        let mut s = self.lock();
        if !s.live {
            return;
        }
        s.install(filters, slot, found);
        if s.subscriptions.iter().any(|f| f == filters) && !s.listed.iter().any(|f| f == filters) {
            s.listed.push(filters.to_vec());
        }
    }

    /// Every open account that passes `filters`, when the mirror holds them all: a scan by
    /// these filters was installed since the feed subscribed ([`Self::scanned`]), and the feed
    /// notified every change since. A program subscription does not say when an account
    /// closes: one closed since the scan is still listed, and its reader finds out otherwise
    /// (the packing policy counts each machine's leases).
    pub fn listing(&self, filters: &[RpcFilterType]) -> Option<Vec<(Pubkey, Vec<u8>)>> {
        let s = self.lock();
        if !s.live || !s.listed.iter().any(|f| f == filters) {
            return None;
        }
        let mut found: Vec<(Pubkey, Vec<u8>)> = s
            .accounts
            .iter()
            .filter_map(|(k, a)| Some((*k, a.data.clone()?)))
            .filter(|(_, d)| matches(filters, d))
            .collect();
        found.sort_by_key(|(k, _)| *k);
        Some(found)
    }
}

impl Inner {
    /// Installs a scan by `filters` as of `slot` that found `found`: each found account as of
    /// `slot`, and as closed each one the mirror had that passes the filters, was seen no later
    /// than `slot` and was not found. Returns the open accounts that pass the filters.
    fn install(
        &mut self,
        filters: &[RpcFilterType],
        slot: u64,
        found: &[(Pubkey, Vec<u8>)],
    ) -> BTreeSet<Pubkey> {
        let keys: BTreeSet<Pubkey> = found.iter().map(|(k, _)| *k).collect();
        let closed: Vec<Pubkey> = self
            .accounts
            .iter()
            .filter(|(k, a)| {
                a.slot <= slot
                    && !keys.contains(k)
                    && a.data.as_deref().is_some_and(|d| matches(filters, d))
            })
            .map(|(k, _)| *k)
            .collect();
        for key in closed {
            self.put(key, slot, None);
        }
        for (key, data) in found {
            self.put(*key, slot, Some(data.clone()));
        }
        self.accounts
            .iter()
            .filter(|(_, a)| a.data.as_deref().is_some_and(|d| matches(filters, d)))
            .map(|(k, _)| *k)
            .collect()
    }

    fn put(&mut self, key: Pubkey, slot: u64, data: Option<Vec<u8>>) {
        match self.accounts.get(&key) {
            Some(seen) if seen.slot > slot => {}
            seen => {
                let moved = seen.is_none_or(|seen| seen.data != data);
                let at = Instant::now();
                self.accounts.insert(key, Seen { slot, data, at });
                if let (true, Some(changed)) = (moved, &mut self.changed) {
                    changed.insert(key);
                    if changed.len() > CHANGED_LIMIT {
                        self.changed = None;
                    }
                }
            }
        }
    }
}

/// Whether `data` passes every filter (the node's rule for a program subscription).
fn matches(filters: &[RpcFilterType], data: &[u8]) -> bool {
    filters.iter().all(|f| match f {
        RpcFilterType::DataSize(size) => data.len() as u64 == *size,
        RpcFilterType::Memcmp(m) => m.bytes_match(data),
        RpcFilterType::TokenAccountState => false,
    })
}

#[cfg(test)]
mod tests {
    use solana_rpc_client_api::filter::Memcmp;

    use super::*;

    const LEASE: u8 = 7;

    fn lease_filters(machine: &Pubkey) -> Vec<RpcFilterType> {
        vec![
            RpcFilterType::Memcmp(Memcmp::new_raw_bytes(0, vec![LEASE])),
            RpcFilterType::Memcmp(Memcmp::new_raw_bytes(1, machine.to_bytes().to_vec())),
        ]
    }

    fn lease_data(machine: &Pubkey, n: u8) -> Vec<u8> {
        let mut d = vec![LEASE];
        d.extend(machine.to_bytes());
        d.push(n);
        d
    }

    fn live() -> (Mirror, Pubkey, Pubkey) {
        let (machine, clock) = (Pubkey::new_unique(), Pubkey::new_unique());
        let m = Mirror::new();
        m.subscribed(
            machine,
            [machine, clock].into(),
            vec![lease_filters(&machine)],
            lease_filters(&machine),
        );
        (m, machine, clock)
    }

    #[test]
    fn only_followed_accounts_are_kept_and_an_older_answer_never_replaces_a_newer_one() {
        let (m, machine, clock) = live();
        let stranger = Pubkey::new_unique();
        m.answered(clock, 10, Some(&[1]));
        m.answered(stranger, 10, Some(&[1]));
        let found = m.get(&[clock, stranger]);
        assert_eq!(found.accounts, vec![Some(Some(vec![1])), None]);
        assert_eq!(
            found.missing,
            vec![stranger],
            "not followed: read from the node"
        );

        m.notified(clock, 12, Some(vec![2]));
        m.answered(clock, 11, Some(&[9]));
        assert_eq!(m.get(&[clock]).accounts, vec![Some(Some(vec![2]))]);
        // A lease of the machine is followed by the program subscription.
        let lease = Pubkey::new_unique();
        m.answered(lease, 12, Some(&lease_data(&machine, 1)));
        assert!(m.get(&[lease]).missing.is_empty());
    }

    #[test]
    fn the_lease_list_is_scanned_again_after_the_machine_changes() {
        let (m, machine, _) = live();
        assert!(m.leases().is_none(), "not scanned yet");
        let (a, b, c) = (
            Pubkey::new_unique(),
            Pubkey::new_unique(),
            Pubkey::new_unique(),
        );
        // B is notified (created) after the scan's slot: it is one of the machine's leases.
        m.notified(b, 21, Some(lease_data(&machine, 2)));
        m.scanned_leases(20, &[(a, lease_data(&machine, 1))]);
        let keys: Vec<Pubkey> = m.leases().unwrap().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys.len(), 2);
        assert!(keys.contains(&a) && keys.contains(&b));
        // A new lease notified while the list is known joins it.
        m.notified(c, 22, Some(lease_data(&machine, 3)));
        assert_eq!(m.leases().unwrap().len(), 3);
        // A settlement changes the machine (the closed lease itself is not notified).
        m.notified(machine, 23, Some(vec![0]));
        assert!(m.leases().is_none(), "scan again");
        // The scan no longer finds A: it is closed, listed no more and read as closed.
        m.scanned_leases(
            23,
            &[(b, lease_data(&machine, 2)), (c, lease_data(&machine, 3))],
        );
        assert_eq!(m.leases().unwrap().len(), 2);
        assert_eq!(m.get(&[a]).accounts, vec![Some(None)]);
    }

    /// What changed since a reader last asked: each account stored with new data once (the
    /// same data again is no change), by the reader's filters, closed ones apart; nothing of
    /// another generation of the mirror (the feed subscribed again or dropped), nor past the
    /// limit.
    #[test]
    fn the_changes_since_the_last_read_are_each_account_stored_anew_once() {
        let (m, machine, clock) = live();
        let mine = lease_filters(&machine);
        let generation = m.follow_changes().expect("live");
        let (a, b) = (Pubkey::new_unique(), Pubkey::new_unique());
        m.notified(a, 10, Some(lease_data(&machine, 1)));
        m.notified(a, 11, Some(lease_data(&machine, 2)));
        m.notified(clock, 11, Some(vec![1]));
        let changed = m.changes(generation, std::slice::from_ref(&mine)).unwrap();
        assert_eq!(changed.matched, vec![vec![(a, lease_data(&machine, 2))]]);
        assert!(changed.closed.is_empty());
        // The same data again, and a scan that no longer finds A: only A's closing.
        m.notified(a, 12, Some(lease_data(&machine, 2)));
        m.scanned(&mine, 13, &[]);
        let changed = m.changes(generation, std::slice::from_ref(&mine)).unwrap();
        assert_eq!(changed.matched, vec![Vec::new()]);
        assert_eq!(changed.closed, vec![a]);
        // A second follower: the first reads no changes any more.
        let second = m.follow_changes().expect("live");
        assert!(m.changes(generation, &[]).is_none());
        let generation = second;
        // A new generation: what was kept from the last may have missed a change.
        m.notified(b, 14, Some(lease_data(&machine, 3)));
        m.subscribed(
            machine,
            [machine, clock].into(),
            vec![mine.clone()],
            mine.clone(),
        );
        assert!(m.changes(generation, &[]).is_none());
        let generation = m.follow_changes().expect("live");
        for n in 0..=CHANGED_LIMIT as u64 {
            m.notified(Pubkey::new_unique(), 20 + n, Some(vec![1]));
        }
        assert!(m.changes(generation, &[]).is_none(), "past the limit");
        m.dropped();
        assert!(m.follow_changes().is_none());
    }

    #[test]
    fn a_scan_older_than_the_machines_last_change_installs_no_lease_list() {
        let (m, machine, _) = live();
        let (a, b) = (Pubkey::new_unique(), Pubkey::new_unique());
        // A settlement at slot 31 closes A (the machine is notified, A is not); the scan the
        // agent sent before it answers as of slot 30 and still lists A.
        m.notified(machine, 31, Some(vec![0]));
        m.scanned_leases(
            30,
            &[(a, lease_data(&machine, 1)), (b, lease_data(&machine, 2))],
        );
        assert!(m.leases().is_none(), "before, A was listed as open");
        m.scanned_leases(31, &[(b, lease_data(&machine, 2))]);
        let keys: Vec<Pubkey> = m.leases().unwrap().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, vec![b]);
    }

    #[test]
    fn a_listing_is_served_once_scanned_and_kept_current_by_notifications() {
        let (machine, clock) = (Pubkey::new_unique(), Pubkey::new_unique());
        let other = Pubkey::new_unique();
        let all_leases = vec![RpcFilterType::Memcmp(Memcmp::new_raw_bytes(0, vec![LEASE]))];
        let m = Mirror::new();
        m.subscribed(
            machine,
            [machine, clock].into(),
            vec![lease_filters(&machine), all_leases.clone()],
            lease_filters(&machine),
        );
        let (a, b, c) = (
            Pubkey::new_unique(),
            Pubkey::new_unique(),
            Pubkey::new_unique(),
        );
        // Notified before any scan: not a listing yet (other accounts may exist unnotified).
        m.notified(a, 9, Some(lease_data(&other, 1)));
        assert!(m.listing(&all_leases).is_none(), "not scanned yet");
        // A scan by filters no subscription has is kept but makes no listing.
        m.scanned(&lease_filters(&other), 10, &[(a, lease_data(&other, 1))]);
        assert!(m.listing(&lease_filters(&other)).is_none());
        // The scan as of slot 10 lists A and B; C is notified after it.
        m.scanned(
            &all_leases,
            10,
            &[(a, lease_data(&other, 1)), (b, lease_data(&machine, 2))],
        );
        m.notified(c, 11, Some(lease_data(&other, 3)));
        m.notified(b, 12, Some(lease_data(&machine, 4)));
        let listed = m.listing(&all_leases).unwrap();
        assert_eq!(listed.len(), 3);
        assert!(
            listed.contains(&(b, lease_data(&machine, 4))),
            "B as notified"
        );
        // A later scan of one machine's leases finds A gone: it is closed, listed no more.
        m.scanned(&lease_filters(&other), 13, &[(c, lease_data(&other, 3))]);
        let keys: Vec<Pubkey> = m
            .listing(&all_leases)
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(keys.len(), 2);
        assert!(keys.contains(&b) && keys.contains(&c));
        // Nothing is served once the feed drops, nor after it subscribes again until a scan.
        m.dropped();
        assert!(m.listing(&all_leases).is_none());
        m.subscribed(
            machine,
            [machine].into(),
            vec![all_leases.clone()],
            lease_filters(&machine),
        );
        m.notified(c, 20, Some(lease_data(&other, 3)));
        assert!(m.listing(&all_leases).is_none(), "a new feed scans first");
    }

    #[tokio::test(start_paused = true)]
    async fn a_clock_older_than_its_freshness_is_read_from_the_node() {
        let (m, machine, _) = live();
        let clock = solana_sdk_ids::sysvar::clock::ID;
        m.subscribed(
            machine,
            [machine, clock].into(),
            vec![lease_filters(&machine)],
            lease_filters(&machine),
        );
        m.notified(clock, 5, Some(vec![1]));
        m.notified(machine, 5, Some(vec![2]));
        tokio::time::advance(CLOCK_FRESHNESS).await;
        assert!(m.get(&[clock, machine]).missing.is_empty());
        // The feed stalls: the clock is read from the node, the machine still served.
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(m.get(&[clock, machine]).missing, vec![clock]);
        m.answered(clock, 6, Some(&[3]));
        assert_eq!(m.get(&[clock]).accounts, vec![Some(Some(vec![3]))]);
    }

    #[test]
    fn nothing_is_served_once_the_feed_drops() {
        let (m, _, clock) = live();
        m.notified(clock, 5, Some(vec![1]));
        m.dropped();
        assert!(!m.is_live());
        assert_eq!(m.get(&[clock]).missing, vec![clock]);
        m.notified(clock, 6, Some(vec![2]));
        assert_eq!(
            m.get(&[clock]).missing,
            vec![clock],
            "not kept while dropped"
        );
    }
}
