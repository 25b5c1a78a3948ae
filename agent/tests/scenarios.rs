//! One list of scenarios, run against the in-memory `FakeChain` (`fake::…`) and against the
//! agent's real `SolanaChain` over JSON-RPC to the program's SBF build in LiteSVM
//! (`program::…`), asserting the same outcomes: what each `Chain` call is refused or accepted,
//! the refusal's kind (`ChainError` variant and the operation that refused), and who ends a
//! lease when. A rule the fake plays differently from the program fails here, on one side:
//! the fake's rules are checked by this list, not only written down.
//!
//! The program side needs `target/deploy/gpu_market.so` (`scripts/build-sbf.sh`; the README's
//! test command builds it first).

mod market;
mod support;

use std::fmt::Debug;

use gpu_market_agent::chain::{
    proof_hash, BidView, Chain, ChainError, Key, LeaseView, GANG_PLACEMENTS,
};
use gpu_market_core::colocate::{InterferenceModel, Profile};
use gpu_market_core::fit::Host;
use gpu_market_core::lease::UsageProof;
use gpu_market_sdk::budget::{compute_unit_limit, MAX_LOADED_ACCOUNTS_DATA_SIZE};
use gpu_market_sdk::placement::RELEARN_SECS;
use gpu_market_tests::asked_budget;
use market::program::ProgramMarket;
use market::reconciler::{Agent, POLL};
use market::{
    BidSpec, FakeMarket, MarketUnderTest, ELECTRICITY_COST, IDLE_END_INTERVALS, INTERVAL,
    MACHINE_REGION, OTHER_REGION, TOKEN,
};

/// How many open bids a look at the books asks for.
const LIMIT: usize = 32;
const SECS: u64 = INTERVAL as u64;

/// `scenarios!(a, b, …)`: the tests `fake::a` and `program::a`, … each running the scenario
/// `a` on a fresh market of that kind, on a paused tokio clock.
macro_rules! scenarios {
    ($($scenario:ident),* $(,)?) => {
        /// The scenarios against the in-memory fake.
        mod fake {
            $(
                #[tokio::test(start_paused = true)]
                async fn $scenario() {
                    super::$scenario(&super::FakeMarket::start()).await;
                }
            )*
        }
        /// The scenarios against the program, through the agent's `SolanaChain`.
        mod program {
            $(
                #[tokio::test(start_paused = true)]
                async fn $scenario() {
                    super::$scenario(&super::ProgramMarket::start().await).await;
                }
            )*
        }
    };
}

scenarios!(
    a_bid_asking_for_a_port_the_machine_does_not_publish_is_passed_over,
    a_bid_reserving_more_cpu_or_memory_than_is_free_waits,
    a_bid_for_other_regions_is_passed_over,
    a_lease_is_proven_each_interval_and_ends_after_its_stop,
    a_proof_before_its_window_ends_is_refused,
    a_final_proof_before_its_window_ends_stops_the_lease_at_the_clock,
    a_skipped_interval_is_passed_over_and_never_proven_later,
    ending_a_lease_with_unproven_time_stops_it_and_settles_once_proven,
    a_bid_is_pruned_only_once_its_deadline_passed,
    a_lower_ranked_bid_waits_while_a_better_one_fits,
    a_better_spot_bid_preempts_a_spot_lease_at_its_next_boundary,
    a_queue_bid_preempts_a_spot_lease_at_once,
    the_reconciler_runs_a_lease_from_allocation_to_settlement,
    the_reconciler_preempts_a_running_spot_lease_for_a_queue_bid,
    a_lease_idle_for_the_idle_rules_intervals_stops_after_the_last,
    the_reconciler_settles_a_lease_the_idle_rule_stopped,
    a_client_that_never_seals_its_environment_cannot_get_the_host_slashed,
);

/// The bid as the books show it to the machine, if it is open and may run here.
async fn open_bid(m: &impl MarketUnderTest, bid: Key) -> Option<BidView> {
    let books = m.chain().best_open_bids(LIMIT).await.expect("the books");
    books.bids.into_iter().find(|b| b.key == bid)
}

/// Allocates `bid` on the GPUs the fit rule gives it; returns the lease.
async fn allocate(m: &impl MarketUnderTest, bid: Key) -> Key {
    let view = open_bid(m, bid).await.expect("the bid is open");
    let gpus = view.gpus.expect("the bid fits the machine now");
    m.chain().allocate(bid, &gpus).await.expect("allocate")
}

async fn lease(m: &impl MarketUnderTest, key: Key) -> LeaseView {
    let leases = m.chain().leases().await.expect("the leases");
    leases
        .into_iter()
        .find(|l| l.key == key)
        .expect("the lease is listed")
}

/// The proof of `interval` of `l`: every GPU used `utilisation_bps` of the whole interval (busy:
/// 9 000), below its power limit.
fn proof_using(
    l: &LeaseView,
    interval: u32,
    exit_code: Option<i32>,
    utilisation_bps: u16,
) -> UsageProof {
    let gpus = l.gpu_indices.len();
    UsageProof {
        interval,
        intervals: 1,
        gpu_seconds: SECS * gpus as u64,
        energy_j: 250 * SECS * gpus as u64,
        avg_utilisation_bps: utilisation_bps,
        peak_power_w: vec![250; gpus],
        exit_code,
        samples_hash: [7; 32],
        energy_saved_j: 0,
    }
}

/// Submits the proof of `interval` chained to the lease's last; once accepted, the lease shows
/// the new chain hash (the one `proof_hash` computes) and the next interval after it.
async fn prove(
    m: &impl MarketUnderTest,
    key: Key,
    interval: u32,
    exit_code: Option<i32>,
) -> Result<[u8; 32], ChainError> {
    prove_using(m, key, interval, exit_code, 9_000).await
}

/// [`prove`] with `utilisation_bps` of average GPU use ([`proof_using`]).
async fn prove_using(
    m: &impl MarketUnderTest,
    key: Key,
    interval: u32,
    exit_code: Option<i32>,
    utilisation_bps: u16,
) -> Result<[u8; 32], ChainError> {
    let l = lease(m, key).await;
    let p = proof_using(&l, interval, exit_code, utilisation_bps);
    m.chain().submit_usage(&[(key, p.clone())]).await?;
    let hash = proof_hash(&key, &p, &l.proof_hash);
    let after = lease(m, key).await;
    assert_eq!(
        (after.proof_hash, after.next_interval),
        (hash, interval + 1)
    );
    Ok(hash)
}

/// `got` is a refusal of `op` (not an outage, nor another operation's refusal).
#[track_caller]
fn assert_refused<T: Debug>(got: Result<T, ChainError>, op: &str) {
    match got {
        Err(ChainError::Rejected { op: o, .. }) if o == op => {}
        other => panic!("expected {op} to be refused, got {other:?}"),
    }
}

async fn closed(m: &impl MarketUnderTest, key: Key) -> bool {
    let got = m
        .chain()
        .closed_leases(&[key])
        .await
        .expect("closed_leases");
    assert!(got.is_empty() || got == [key], "{got:?}");
    !got.is_empty()
}

async fn free_gib(m: &impl MarketUnderTest) -> Vec<u16> {
    m.chain().machine().await.expect("the machine").free_gib
}

/// Allocated, proven interval by interval as each ends, and ended after its stop: the GPUs are
/// free again and `closed_leases` reports it settled.
async fn a_lease_is_proven_each_interval_and_ends_after_its_stop(m: &impl MarketUnderTest) {
    let chain = m.chain();
    let start = chain.now().await.unwrap();
    let bid = m.place_bid(&BidSpec::queue(1, 3)).await;
    let key = allocate(m, bid).await;
    let l = lease(m, key).await;
    assert_eq!(
        (l.bid, l.started_at, l.ends_at, l.stop_at, l.interval_secs),
        (bid, start, start + 3 * SECS as i64, None, INTERVAL)
    );
    assert_eq!((l.next_interval, l.proof_hash), (0, [0; 32]));
    assert!(open_bid(m, bid).await.is_none(), "the bid left its book");
    assert_eq!(free_gib(m).await.iter().sum::<u16>(), 48 - 8);
    for k in 0..3 {
        m.advance(SECS).await;
        prove(m, key, k, None)
            .await
            .expect("the proof of an ended interval");
    }
    // Nothing after the stop.
    m.advance(SECS).await;
    assert_refused(prove(m, key, 3, None).await, "submit_usage");
    assert!(!closed(m, key).await, "a running lease is not closed");
    assert_refused(chain.prune_bid(bid).await, "prune_bid");
    chain.heartbeat().await.expect("heartbeat");
    chain.end_lease(key).await.expect("end_lease");
    assert!(closed(m, key).await);
    assert!(chain.leases().await.unwrap().is_empty());
    assert_eq!(free_gib(m).await, vec![24, 24]);
    // The bid closed with its lease.
    assert_refused(chain.allocate(bid, &[0]).await, "read");
    assert_refused(chain.end_lease(key).await, "read");
}

/// A proof without an exit code waits for its interval's end.
async fn a_proof_before_its_window_ends_is_refused(m: &impl MarketUnderTest) {
    let bid = m.place_bid(&BidSpec::queue(1, 3)).await;
    let key = allocate(m, bid).await;
    m.advance(SECS / 2).await;
    assert_refused(prove(m, key, 0, None).await, "submit_usage");
    assert_eq!(lease(m, key).await.next_interval, 0);
    m.advance(SECS / 2).await;
    prove(m, key, 0, None).await.expect("the interval ended");
}

/// A final proof (the container exited) before its window ends is accepted with the window
/// clipped at the cluster clock; the lease stops there and may be ended at once.
async fn a_final_proof_before_its_window_ends_stops_the_lease_at_the_clock(
    m: &impl MarketUnderTest,
) {
    let chain = m.chain();
    let bid = m.place_bid(&BidSpec::queue(1, 3)).await;
    let key = allocate(m, bid).await;
    m.advance(20).await;
    let now = chain.now().await.unwrap();
    prove(m, key, 0, Some(0))
        .await
        .expect("a final proof before its window ends");
    let l = lease(m, key).await;
    assert_eq!((l.stop_at, l.stop()), (Some(now), now));
    assert_refused(prove(m, key, 1, None).await, "submit_usage");
    chain.end_lease(key).await.expect("end_lease");
    assert!(closed(m, key).await);
}

/// A proof may skip intervals (they are never paid); an interval passed over cannot be proven
/// afterwards.
async fn a_skipped_interval_is_passed_over_and_never_proven_later(m: &impl MarketUnderTest) {
    let bid = m.place_bid(&BidSpec::queue(1, 3)).await;
    let key = allocate(m, bid).await;
    m.advance(2 * SECS).await;
    prove(m, key, 1, None)
        .await
        .expect("a proof skipping interval 0");
    assert_refused(prove(m, key, 0, None).await, "submit_usage");
    m.advance(SECS).await;
    prove(m, key, 2, None).await.expect("the last interval");
    m.chain().end_lease(key).await.expect("end_lease");
    assert!(closed(m, key).await);
}

/// The agent is a party to its leases: ending one with time still unproven stops it at the
/// clock (it stays open), and a second end settles it once the proofs reach the stop.
async fn ending_a_lease_with_unproven_time_stops_it_and_settles_once_proven(
    m: &impl MarketUnderTest,
) {
    let chain = m.chain();
    let bid = m.place_bid(&BidSpec::queue(1, 3)).await;
    let key = allocate(m, bid).await;
    m.advance(SECS + SECS / 2).await;
    let now = chain.now().await.unwrap();
    chain.end_lease(key).await.expect("a party stops the lease");
    assert!(!closed(m, key).await, "unproven time: stopped, not settled");
    assert_eq!(lease(m, key).await.stop(), now);
    prove(m, key, 0, None).await.expect("interval 0");
    prove(m, key, 1, None)
        .await
        .expect("interval 1, up to the stop");
    assert_refused(prove(m, key, 2, None).await, "submit_usage");
    chain.end_lease(key).await.expect("end_lease");
    assert!(closed(m, key).await);
}

/// Pruning is refused before a bid's deadline; from the deadline the books list the bid as
/// expired and pruning removes it.
async fn a_bid_is_pruned_only_once_its_deadline_passed(m: &impl MarketUnderTest) {
    let chain = m.chain();
    let spec = BidSpec::queue(1, 1);
    let bid = m.place_bid(&spec).await;
    assert_refused(chain.prune_bid(bid).await, "prune_bid");
    assert!(open_bid(m, bid).await.is_some());
    m.advance(spec.wait_secs as u64 + SECS).await;
    let books = chain.best_open_bids(LIMIT).await.unwrap();
    assert_eq!(books.expired, vec![bid]);
    assert!(books.bids.iter().all(|b| b.key != bid));
    chain.prune_bid(bid).await.expect("prune_bid");
    let books = chain.best_open_bids(LIMIT).await.unwrap();
    assert!(books.expired.is_empty() && books.bids.is_empty());
    // Gone: the second prune finds no bid to read.
    assert_refused(chain.prune_bid(bid).await, "read");
}

/// Queue bids of equal rank run in placement order: the later one is refused while the earlier
/// one fits.
async fn a_lower_ranked_bid_waits_while_a_better_one_fits(m: &impl MarketUnderTest) {
    let first = m.place_bid(&BidSpec::queue(1, 2)).await;
    let second = m.place_bid(&BidSpec::queue(1, 2)).await;
    let books = m.chain().best_open_bids(LIMIT).await.unwrap();
    let order: Vec<Key> = books.bids.iter().map(|b| b.key).collect();
    assert_eq!(order, vec![first, second]);
    let gpus = books.bids[1].gpus.clone().expect("it fits");
    assert_refused(m.chain().allocate(second, &gpus).await, "allocate");
    allocate(m, first).await;
    allocate(m, second).await;
}

/// A machine that publishes no port is not offered a bid that asks for one, refuses its
/// allocation, and lets the plainer bid below it run (neither side drifts on the room rule).
async fn a_bid_asking_for_a_port_the_machine_does_not_publish_is_passed_over(
    m: &impl MarketUnderTest,
) {
    let serving = BidSpec {
        ports: vec![8080],
        ..BidSpec::queue(1, 2)
    };
    let serving = m.place_bid(&serving).await;
    let plain = m.place_bid(&BidSpec::queue(1, 2)).await;
    let books = m.chain().best_open_bids(LIMIT).await.unwrap();
    let order: Vec<Key> = books.bids.iter().map(|b| b.key).collect();
    assert_eq!(order, vec![plain]);
    assert_refused(m.chain().allocate(serving, &[0]).await, "allocate");
    allocate(m, plain).await;
}

/// CPU and memory are held by the leases that reserved them: a bid reserving more than is left
/// is not offered and its allocation is refused, one within what is left runs, and one reserving
/// more than the machine gives at all never fits.
async fn a_bid_reserving_more_cpu_or_memory_than_is_free_waits(m: &impl MarketUnderTest) {
    let reserving = |cpu_milli, memory_mib| BidSpec {
        host: Host {
            cpu_milli,
            memory_mib,
        },
        ..BidSpec::queue(1, 2)
    };
    let first = m.place_bid(&reserving(6_000, 4_096)).await;
    let more_cpu = m.place_bid(&reserving(4_000, 1_024)).await;
    let more_memory = m.place_bid(&reserving(1_000, 13_000)).await;
    let beyond = m.place_bid(&reserving(8_001, 0)).await;
    let small = m.place_bid(&reserving(2_000, 12_288)).await;
    let books = m.chain().best_open_bids(LIMIT).await.unwrap();
    let order: Vec<Key> = books.bids.iter().map(|b| b.key).collect();
    assert_eq!(order, vec![first, more_cpu, more_memory, small]);
    allocate(m, first).await;
    let books = m.chain().best_open_bids(LIMIT).await.unwrap();
    let order: Vec<Key> = books.bids.iter().map(|b| b.key).collect();
    assert_eq!(order, vec![small]);
    for bid in [more_cpu, more_memory, beyond] {
        assert_refused(m.chain().allocate(bid, &[1]).await, "allocate");
    }
    allocate(m, small).await;
}

/// A bid naming only other regions than the machine's is not offered and its allocation is
/// refused; one naming the machine's among others runs.
async fn a_bid_for_other_regions_is_passed_over(m: &impl MarketUnderTest) {
    let elsewhere = BidSpec {
        regions: vec![OTHER_REGION],
        ..BidSpec::queue(1, 2)
    };
    let elsewhere = m.place_bid(&elsewhere).await;
    let either = BidSpec {
        regions: vec![OTHER_REGION, MACHINE_REGION],
        ..BidSpec::queue(1, 2)
    };
    let either = m.place_bid(&either).await;
    let books = m.chain().best_open_bids(LIMIT).await.unwrap();
    let order: Vec<Key> = books.bids.iter().map(|b| b.key).collect();
    assert_eq!(order, vec![either]);
    assert_refused(m.chain().allocate(elsewhere, &[0]).await, "allocate");
    allocate(m, either).await;
}

/// A spot bid that pays the host more, and fits the GPUs of a running spot lease, stops it at
/// the lease's next interval boundary (a worse one may not); the lease is proven up to there
/// and settles, its bid back in the book behind the better one.
async fn a_better_spot_bid_preempts_a_spot_lease_at_its_next_boundary(m: &impl MarketUnderTest) {
    let chain = m.chain();
    let running = m.place_bid(&BidSpec::spot(2, 5, 10 * TOKEN)).await;
    let key = allocate(m, running).await;
    let started = lease(m, key).await.started_at;
    m.advance(SECS / 2).await;
    let worse = m.place_bid(&BidSpec::spot(2, 5, 5 * TOKEN)).await;
    let better = m.place_bid(&BidSpec::spot(2, 5, 20 * TOKEN)).await;
    let books = chain.best_open_bids(LIMIT).await.unwrap();
    let listed: Vec<(Key, Option<Vec<u8>>, Vec<Key>)> = books
        .bids
        .iter()
        .map(|b| (b.key, b.gpus.clone(), b.fits_if_ended.clone()))
        .collect();
    assert_eq!(
        listed,
        vec![(better, None, vec![key]), (worse, None, vec![key])],
        "the most profitable first, each fitting once the lease ends"
    );
    assert_refused(chain.preempt(key, worse).await, "preempt");
    chain.preempt(key, better).await.expect("preempt");
    assert_eq!(lease(m, key).await.stop_at, Some(started + SECS as i64));
    assert_refused(chain.preempt(key, better).await, "preempt");
    m.advance(SECS / 2).await;
    prove(m, key, 0, None)
        .await
        .expect("the interval up to the stop");
    assert_refused(prove(m, key, 1, None).await, "submit_usage");
    chain.end_lease(key).await.expect("end_lease");
    assert!(closed(m, key).await);
    let books = chain.best_open_bids(LIMIT).await.unwrap();
    let order: Vec<Key> = books.bids.iter().map(|b| b.key).collect();
    assert_eq!(
        order,
        vec![better, running, worse],
        "the preempted bid waits again"
    );
    allocate(m, better).await;
}

/// A queue bid outranks every spot lease: the books list a queue bid that fits only once a
/// running spot lease ends with that lease, and `preempt` stops the lease at once (not at its
/// next boundary); the queue bid runs once it settles.
async fn a_queue_bid_preempts_a_spot_lease_at_once(m: &impl MarketUnderTest) {
    let chain = m.chain();
    let spot = m.place_bid(&BidSpec::spot(2, 5, 10 * TOKEN)).await;
    let key = allocate(m, spot).await;
    m.advance(SECS + 10).await;
    let now = chain.now().await.unwrap();
    let queue = m.place_bid(&BidSpec::queue(1, 2)).await;
    let view = open_bid(m, queue).await.expect("the queue bid is listed");
    assert_eq!(
        (view.gpus, view.fits_if_ended),
        (None, vec![key]),
        "it fits once the spot lease ends"
    );
    chain.preempt(key, queue).await.expect("preempt");
    assert_eq!(lease(m, key).await.stop(), now);
    prove(m, key, 0, None).await.expect("interval 0");
    prove(m, key, 1, None)
        .await
        .expect("interval 1, up to the stop");
    chain.end_lease(key).await.expect("end_lease");
    assert!(closed(m, key).await);
    allocate(m, queue).await;
}

/// The agent's reconcile loop end to end: it allocates the bid, starts its container, proves
/// its intervals two at a time, and ends the lease after its stop; the lease settles, the GPUs
/// are free and nothing runs.
async fn the_reconciler_runs_a_lease_from_allocation_to_settlement(m: &impl MarketUnderTest) {
    let chain = m.chain();
    let bid = m.place_bid(&BidSpec::queue(1, 2)).await;
    let mut agent = Agent::start(m);
    agent.run_for(m, POLL).await;
    let leases = chain.leases().await.unwrap();
    assert_eq!(leases.len(), 1, "allocated");
    let l = leases[0].clone();
    assert_eq!(l.bid, bid);
    agent.run_for(m, POLL).await;
    assert_eq!(agent.running(), 1, "started");
    // The first window ends one interval after the start; its proof waits for the second
    // window (two intervals a proof at the recommended silence window), which ends at the
    // stop: one proof of both, then the lease settles.
    agent.run_for(m, SECS + POLL).await;
    assert_eq!(
        lease(m, l.key).await.next_interval,
        0,
        "interval 0 waits for 1"
    );
    agent.run_for(m, SECS + 2 * POLL).await;
    assert!(closed(m, l.key).await, "settled after its stop");
    assert!(chain.leases().await.unwrap().is_empty());
    assert_eq!(free_gib(m).await, vec![24, 24]);
    agent.run_for(m, 2 * POLL).await;
    assert_eq!(agent.running(), 0, "the container stopped");
    assert!(agent.reconciler.state().leases.is_empty(), "forgotten");
}

/// A queue bid preempts a running spot lease, sent by the agent: its reconcile loop runs a spot
/// lease on both GPUs; a queue bid that fits only once that lease ends is placed; the agent
/// sends `preempt`, which stops the lease at once; the lease is proven up to its stop and
/// settles, and the queue bid is allocated and its container runs.
async fn the_reconciler_preempts_a_running_spot_lease_for_a_queue_bid(m: &impl MarketUnderTest) {
    let chain = m.chain();
    let spot = m.place_bid(&BidSpec::spot(2, 5, 10 * TOKEN)).await;
    let mut agent = Agent::start(m);
    agent.run_for(m, 2 * POLL).await;
    let leases = chain.leases().await.unwrap();
    assert_eq!(leases.len(), 1, "the spot bid allocated");
    let spot_lease = leases[0].key;
    assert_eq!(leases[0].bid, spot);
    assert_eq!(agent.running(), 1, "started");
    agent.run_for(m, SECS).await;

    let queue = m.place_bid(&BidSpec::queue(1, 2)).await;
    agent.run_for(m, POLL).await;
    let now = chain.now().await.unwrap();
    let l = lease(m, spot_lease).await;
    assert_eq!(l.stop(), now, "preempted at once, not at its next boundary");
    assert!(l.stop() < l.ends_at);

    agent.run_for(m, 4 * POLL).await;
    assert!(closed(m, spot_lease).await, "the spot lease settled");
    let leases = chain.leases().await.unwrap();
    let bids: Vec<Key> = leases.iter().map(|l| l.bid).collect();
    assert_eq!(bids, vec![queue], "the queue bid allocated");
    let queue_lease = leases[0].key.to_string();
    agent.run_for(m, POLL).await;
    let running: Vec<String> = agent
        .runtime
        .containers()
        .into_values()
        .filter(|c| c.state == gpu_market_agent::runtime::ContainerState::Running)
        .map(|c| c.spec.labels[gpu_market_agent::runtime::LABEL_LEASE].clone())
        .collect();
    assert_eq!(
        running,
        vec![queue_lease],
        "only the queue bid's container runs"
    );
}

/// The market's idle rule: proofs under its idle threshold for [`IDLE_END_INTERVALS`] in a row
/// stop the lease at the end of the last of them (a busy proof in between starts the count
/// again); nothing after it is proven, and it settles.
async fn a_lease_idle_for_the_idle_rules_intervals_stops_after_the_last(m: &impl MarketUnderTest) {
    let chain = m.chain();
    let n = IDLE_END_INTERVALS as u32;
    let bid = m.place_bid(&BidSpec::queue(1, 2 * n + 2)).await;
    let key = allocate(m, bid).await;
    let started = lease(m, key).await.started_at;
    m.advance(SECS * (2 * n as u64 + 1)).await;
    let mut k = 0;
    for _ in 0..n - 1 {
        prove_using(m, key, k, None, 0)
            .await
            .expect("an idle interval");
        k += 1;
    }
    prove(m, key, k, None).await.expect("a busy interval");
    k += 1;
    for _ in 0..n {
        assert_eq!(lease(m, key).await.stop_at, None, "not ended yet");
        prove_using(m, key, k, None, 0)
            .await
            .expect("an idle interval");
        k += 1;
    }
    assert_eq!(lease(m, key).await.stop(), started + k as i64 * SECS as i64);
    assert_refused(prove_using(m, key, k, None, 0).await, "submit_usage");
    chain.end_lease(key).await.expect("end_lease");
    assert!(closed(m, key).await);
}

/// The agent under the idle rule: its lease's container idles, the chain stops the lease after
/// the rule's intervals, and the agent stops the container and settles the lease long before
/// its end.
async fn the_reconciler_settles_a_lease_the_idle_rule_stopped(m: &impl MarketUnderTest) {
    let chain = m.chain();
    let n = IDLE_END_INTERVALS as u64;
    m.place_bid(&BidSpec::queue(1, 3 * n as u32)).await;
    let mut agent = Agent::start(m);
    agent.run_for(m, 2 * POLL).await;
    let l = chain.leases().await.unwrap()[0].clone();
    assert_eq!(agent.running(), 1, "started");
    agent.run_for(m, n * SECS + 4 * POLL).await;
    assert!(closed(m, l.key).await, "stopped by the rule and settled");
    agent.run_for(m, 2 * POLL).await;
    assert_eq!(agent.running(), 0, "the container stopped");
}

/// A queue bid of `gpus` GPUs at a `watts` W power limit.
fn at(watts: u16, gpus: u8) -> BidSpec {
    BidSpec {
        power_limit_w: watts,
        ..BidSpec::queue(gpus, 2)
    }
}

/// Each of `chain`'s machine's two GPUs starts a tenant's lease at its own power limit (150 and
/// 160 W): the busy machine on which an attacker's entries cost most to turn away.
async fn tenants_at_their_own_limits(m: &ProgramMarket, chain: &dyn Chain) {
    for (gpu, watts) in [(0u8, 150), (1, 160)] {
        let held = m.place_bid(&at(watts, 1)).await;
        chain
            .allocate(held, &[gpu])
            .await
            .expect("a tenant on each GPU");
    }
}

/// The daemon's allocation below a book an attacker filled with the entries that cost
/// `allocate` most to turn away on a busy machine (each of its two GPUs runs a tenant's own power
/// limit; every entry asks two GPUs at one of those limits): judging 4,095 of them is more than
/// one transaction's 1.4M compute units, so the agent walks the book first (`walk_book`, in as
/// many transactions as it takes), and its `allocate` then judges only what the walk did not
/// cover. Before the walk, the agent could start nothing below such a book.
#[tokio::test(start_paused = true)]
async fn program_the_agent_walks_a_book_too_deep_for_one_allocation() {
    use anchor_lang::Discriminator;
    let m = ProgramMarket::start().await;
    let chain = m.chain();
    tenants_at_their_own_limits(&m, &*chain).await;
    let chosen = m.place_bid(&at(160, 1)).await;
    m.place_above(gpu_market::state::BOOK_CAPACITY - 1, &at(150, 2))
        .await;
    let lease = chain
        .allocate(chosen, &[1])
        .await
        .expect("allocate below the book");
    assert!(m.lease_of(chosen).await.is_some(), "{lease:?}");

    let walk = gpu_market::instruction::WalkBook::DISCRIMINATOR;
    let allocate = gpu_market::instruction::Allocate::DISCRIMINATOR;
    let sent = m.agent_transactions();
    let of = |d: &[u8]| -> Vec<u64> {
        sent.iter()
            .filter(|(tx, _)| {
                tx.message
                    .instructions()
                    .iter()
                    .any(|ix| ix.data.starts_with(d))
            })
            .map(|(_, used)| *used)
            .collect()
    };
    let (walks, allocations) = (of(walk), of(allocate));
    println!("walk_book transactions' units: {walks:?}; the three allocations': {allocations:?}");
    assert!(!walks.is_empty(), "the agent walked the book");
    assert!(
        walks.iter().chain(&allocations).all(|&u| u < 1_400_000),
        "every transaction within its units"
    );
}

/// A gang of two below a book an attacker filled with the entries that cost most to turn away
/// on both of its machines (each machine's two GPUs run tenants' own power limits; every entry
/// asks two GPUs at one of them). `allocate_gang` judges every entry above the gang against
/// both machines: 4,095 of them are more than a transaction's units, unless each machine has
/// walked the book (`walk_book`). Each agent lists the book as the daemon does at each look:
/// the agent of the part that sends `allocate_gang` records the gang's placement, and the other
/// part's agent walks its machine's book for it; the first then walks its own and starts the
/// gang on both. Before, the other part's machine never walked, and the gang could not start.
#[tokio::test(start_paused = true)]
async fn program_two_agents_walk_a_book_too_deep_for_their_gang() {
    let m = ProgramMarket::start().await;
    let b = m
        .add_machine_with(MACHINE_REGION, ELECTRICITY_COST, |t| {
            t.network.host = "10.0.0.2".into();
            t.network.ports_per_lease = 1;
        })
        .await;
    // Placed first: the machines publish their ports while no lease runs (a gang entry holds
    // no single bid back).
    let gang = m.place_gang(&at(160, 1), 2).await;
    for chain in [m.chain(), b.chain.clone()] {
        tenants_at_their_own_limits(&m, &*chain).await;
    }
    m.place_above(gpu_market::state::BOOK_CAPACITY - 1, &at(150, 2))
        .await;
    // Each agent's look at the books: only the first part's agent lists the gang.
    let (mut first, mut gpus) = (None, None);
    for chain in [m.chain(), b.chain.clone()] {
        let open = chain
            .best_open_bids(LIMIT)
            .await
            .expect("a look at the books");
        if let Some(view) = open.bids.iter().find(|v| v.key == gang) {
            (first, gpus) = (Some(chain.clone()), view.gpus.clone());
        }
    }
    let (first, gpus) = (
        first.expect("one agent sends allocate_gang"),
        gpus.expect("GPUs for its part"),
    );
    first
        .allocate(gang, &gpus)
        .await
        .expect("allocate_gang below the book");
    for chain in [m.chain(), b.chain.clone()] {
        let leases = chain.leases().await.expect("the machine's leases");
        assert!(
            leases.iter().any(|l| l.bid == gang),
            "a part of the gang runs on each machine: {leases:?}"
        );
    }
}

/// Two machines and their two agents on the program: which one takes a bid is the market's
/// packing policy, computed by each agent from the accounts alone. Machine B's electricity is
/// cheaper, so of two idle machines B wins; but a bid that completes a GPU of machine A goes to
/// A. With A's agent stopped, B leaves such a bid to A for the grace period, then takes it.
/// Every transaction the agent sends asks for the compute units and the account data it uses,
/// with the sdk's margin (`sdk::budget::sized`), not the runtime's default of 200,000 units
/// and 64 MiB: the leader reserves what a transaction asks, of its block and of each account
/// it writes (the market's among them), while it packs it (`gpu-market-bench chain`). Before,
/// `heartbeat`, `claim_pay` and `end_lease` asked for nothing and reserved 216,384 units each.
#[tokio::test(start_paused = true)]
async fn program_every_transaction_the_agent_sends_asks_for_the_budget_it_uses() {
    let m = ProgramMarket::start().await;
    the_reconciler_runs_a_lease_from_allocation_to_settlement(&m).await;
    let chain = m.chain();
    chain.heartbeat().await.expect("heartbeat");
    chain.claim_pay().await.expect("claim_pay");
    let sent = m.agent_transactions();
    // allocate, submit_usage, end_lease, heartbeat, claim_pay at least.
    assert!(sent.len() >= 5, "{} transactions", sent.len());
    for (tx, used) in &sent {
        let asked = asked_budget(tx);
        let units = asked.units.expect("a compute-unit limit") as u64;
        // The simulation ran without the limit instructions: a few hundred units apart.
        assert!(
            units >= *used && units <= compute_unit_limit(used + 300) as u64,
            "asked {units} units for {used}"
        );
        let loaded = asked.loaded_bytes.expect("a loaded-accounts limit");
        assert!(
            loaded < MAX_LOADED_ACCOUNTS_DATA_SIZE / 8,
            "asked {loaded} bytes of account data"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn program_two_agents_follow_the_packing_policy_and_a_silent_machine_strands_no_bid() {
    let m = ProgramMarket::start().await;
    let b = m.add_machine(OTHER_REGION, ELECTRICITY_COST / 2).await;
    let (mut agent_a, mut agent_b) = (Agent::start(&m), Agent::on(b.chain.clone()));
    let only_a = |gib| BidSpec {
        gib_per_gpu: gib,
        regions: vec![MACHINE_REGION],
        ..BidSpec::queue(1, 20)
    };
    let anywhere = |gib| BidSpec {
        gib_per_gpu: gib,
        ..BidSpec::queue(1, 20)
    };
    // 16 of GPU 0's 24 GiB on machine A (only A's region is accepted).
    let first = m.place_bid(&only_a(16)).await;
    tick_both(&m, &mut agent_a, &mut agent_b).await;
    assert_eq!(m.machine_of_lease(first).await, Some(m.machine()));
    // 8 GiB completes that GPU: A, though B is idle and cheaper.
    let second = m.place_bid(&anywhere(8)).await;
    tick_both(&m, &mut agent_a, &mut agent_b).await;
    assert_eq!(m.machine_of_lease(second).await, Some(m.machine()));
    // A's GPU 1 gets 16 GiB; then A's agent stops, and 8 GiB would complete GPU 1.
    let third = m.place_bid(&only_a(16)).await;
    tick_both(&m, &mut agent_a, &mut agent_b).await;
    assert_eq!(m.machine_of_lease(third).await, Some(m.machine()));
    let fourth = m.place_bid(&anywhere(8)).await;
    let grace = gpu_market_core::placement::GRACE_SECS;
    agent_b.run_for(&m, grace - POLL).await;
    assert_eq!(
        m.machine_of_lease(fourth).await,
        None,
        "B leaves it to A at first"
    );
    agent_b.run_for(&m, 2 * POLL).await;
    assert_eq!(m.machine_of_lease(fourth).await, Some(b.machine));
}

/// Gangs that no set of machines can start in time (here: gangs of two machines in a market of
/// one) are walked past at every look at the books, so that the entries below them may be
/// reserved. Each look read every such gang's bid account again: a book of them cost every
/// agent a request per gang per tick. Now a waiting gang is read once: twenty gangs cost a look
/// what one does.
#[tokio::test(start_paused = true)]
async fn program_a_book_of_gangs_no_machines_can_start_costs_no_request_each_per_look() {
    let m = ProgramMarket::start().await;
    let chain = m.chain();
    let per_look = || async {
        chain
            .best_open_bids(LIMIT)
            .await
            .expect("a look at the books");
        let before = chain.requests_sent();
        chain
            .best_open_bids(LIMIT)
            .await
            .expect("a look at the books");
        chain.requests_sent() - before
    };
    m.place_gang(&BidSpec::queue(1, 20), 2).await;
    let one = per_look().await;
    for _ in 1..20 {
        m.place_gang(&BidSpec::queue(1, 20), 2).await;
    }
    let twenty = per_look().await;
    assert_eq!(
        twenty, one,
        "requests per look: {one} with one gang, {twenty} with twenty"
    );
}

/// An attacker's gangs that fit this machine but that no set of machines can start (gangs of
/// two machines in a market of one), each of its own shape, ranked above a single bid: a look
/// asks the packing policy to place [`GANG_PLACEMENTS`] of them and the single bid, lists the
/// single bid, and says how many gangs it left for a later look. Before, a look asked about
/// every gang (21 placements here), and each new shape built an index the view kept: at
/// 10,000 machines 8 ms and 0.7 MiB a gang (`gpu-market-bench policy`).
#[tokio::test(start_paused = true)]
async fn program_a_look_asks_the_policy_to_place_a_bounded_number_of_gangs() {
    let m = ProgramMarket::start().await;
    let (chain, _feed) = m.chain_with_feed();
    for gib in 1..=20 {
        let spec = BidSpec {
            gib_per_gpu: gib,
            ..BidSpec::queue(1, 20)
        };
        m.place_gang(&spec, 2).await;
    }
    let single = m.place_bid(&BidSpec::queue(1, 20)).await;
    let before = chain.placements_asked();
    let open = chain
        .best_open_bids(LIMIT)
        .await
        .expect("a look at the books");
    assert_eq!(
        chain.placements_asked() - before,
        GANG_PLACEMENTS as u64 + 1,
        "the policy placed the budget's gangs and the single bid"
    );
    assert_eq!(open.gangs_left, 20 - GANG_PLACEMENTS);
    assert!(
        open.bids.iter().any(|b| b.key == single),
        "the single bid below the gangs is listed: {:?}",
        open.bids
    );
}

/// Issue 33, part 4: the packing policy's input from the feed. Machine A's agent chain reads
/// the market's machines and leases from its mirror, which a feed keeps current ([`TestFeed`]:
/// every change notified, a closing never, as the node's program subscriptions do). Machine B's
/// 16-GiB lease ends and its account closes: A's mirror still lists it, since nothing said it
/// closed; but B's machine account then counts no lease, so A's next look at the books scans
/// B's leases again, and the closed one is listed no more.
#[tokio::test(start_paused = true)]
async fn program_the_policy_reads_the_market_from_the_feed_and_a_closed_lease_is_not_listed() {
    let m = ProgramMarket::start().await;
    let b = m.add_machine(OTHER_REGION, ELECTRICITY_COST / 2).await;
    let (a_chain, mut feed) = m.chain_with_feed();
    let mut agent_b = Agent::on(b.chain.clone());
    let leases = &gpu_market_agent::chain::watch::market_subscriptions(&m.market())[1];
    let first = m
        .place_bid(&BidSpec {
            gib_per_gpu: 16,
            regions: vec![OTHER_REGION],
            ..BidSpec::queue(1, 2)
        })
        .await;
    agent_b.run_for(&m, POLL).await;
    assert_eq!(m.machine_of_lease(first).await, Some(b.machine));
    // A bid only A's region fits: A's look at the books asks the policy, which reads the
    // market (scanned once, then from the mirror). A's agent does not run: it stays unallocated
    // until it expires.
    let only_a = BidSpec {
        regions: vec![MACHINE_REGION],
        ..BidSpec::queue(1, 20)
    };
    m.place_bid(&only_a).await;
    feed.notify().await;
    assert!(feed.mirror.listing(leases).is_none(), "not scanned yet");
    a_chain
        .best_open_bids(8)
        .await
        .expect("A's look at the books");
    assert_eq!(feed.mirror.listing(leases).map(|l| l.len()), Some(1));
    // B's lease runs its two intervals and settles: its account closes.
    let mut waited = 0;
    while m.lease_of(first).await.is_some() {
        assert!(waited < 5 * SECS, "B's lease never closed");
        agent_b.run_for(&m, POLL).await;
        feed.notify().await;
        waited += POLL;
    }
    assert_eq!(
        feed.mirror.listing(leases).map(|l| l.len()),
        Some(1),
        "no notification says the lease closed"
    );
    // The first of A's bids has expired by now: another.
    m.place_bid(&only_a).await;
    feed.notify().await;
    a_chain
        .best_open_bids(8)
        .await
        .expect("A's look at the books");
    assert_eq!(
        feed.mirror.listing(leases).map(|l| l.len()),
        Some(0),
        "B counts no lease: its leases were scanned again"
    );
}

/// Issue 33, part 4: the policy's view is kept from one look at the books to the next and
/// moved by what the feed notified, not built again. A's first look builds it: bid X fits both
/// machines, and the policy gives it to B (idle, cheaper). B's agent then takes bid Y, which
/// ranks above X and fills B; A's kept view learns it from B's account as notified, and its
/// next look takes X itself. One view built in all.
#[tokio::test(start_paused = true)]
async fn program_the_policy_view_is_kept_between_looks_and_follows_the_feed() {
    let m = ProgramMarket::start().await;
    let b = m.add_machine(OTHER_REGION, ELECTRICITY_COST / 2).await;
    let (a_chain, mut feed) = m.chain_with_feed();
    let mut agent_b = Agent::on(b.chain.clone());
    let fills_b = m
        .place_bid(&BidSpec {
            gib_per_gpu: 24,
            regions: vec![OTHER_REGION],
            price: 2 * crate::support::PRICE,
            ..BidSpec::queue(2, 20)
        })
        .await;
    let x = m.place_bid(&BidSpec::queue(1, 20)).await;
    feed.notify().await;
    let look = || async {
        let open = a_chain
            .best_open_bids(8)
            .await
            .expect("A's look at the books");
        open.bids
            .into_iter()
            .find(|v| v.key == x)
            .expect("X fits A")
    };
    let first = look().await;
    assert_eq!(
        first.elsewhere.map(|e| e.machine),
        Some(Key(b.machine.to_bytes()))
    );
    assert_eq!(a_chain.views_built(), 1);
    agent_b.run_for(&m, POLL).await;
    assert_eq!(m.machine_of_lease(fills_b).await, Some(b.machine));
    assert_eq!(m.machine_of_lease(x).await, None);
    feed.notify().await;
    let second = look().await;
    assert_eq!(second.elsewhere, None, "B is full: A takes X");
    assert!(second.gpus.is_some());
    assert_eq!(a_chain.views_built(), 1, "the view was kept");
}

/// A kept view learns the workload again as the chain's clock turns a minute, and a machine's
/// change that arrives then reaches the policy as any other. Here B (pricier) has a full GPU 0
/// and, seen as the minute turns, 16 GiB on GPU 1: an 8 GiB bid that completes B's GPU 1 is
/// B's, though A is idle and cheaper. (Before, the learning set B's GPUs' sharing pods but not
/// what B had free, and A's agent took the bid at once: the agents' packing test failed so in
/// CI, three times of three at a minute's turn.)
#[tokio::test(start_paused = true)]
async fn program_a_machines_change_as_the_minute_turns_reaches_the_kept_view() {
    let m = ProgramMarket::start().await;
    let b = m.add_machine(OTHER_REGION, ELECTRICITY_COST * 2).await;
    let (a_chain, mut feed) = m.chain_with_feed();
    let mut agent_b = Agent::on(b.chain.clone());
    let on = |regions, gib| BidSpec {
        gib_per_gpu: gib,
        regions,
        ..BidSpec::queue(1, 20)
    };
    let full = m.place_bid(&on(vec![OTHER_REGION], 24)).await;
    agent_b.run_for(&m, POLL).await;
    assert_eq!(m.machine_of_lease(full).await, Some(b.machine));
    // A's view is built (a bid only A fits) and kept.
    m.place_bid(&on(vec![MACHINE_REGION], 8)).await;
    feed.notify().await;
    let look = || async {
        a_chain
            .best_open_bids(8)
            .await
            .expect("A's look at the books")
    };
    look().await;
    let second = m.place_bid(&on(vec![OTHER_REGION], 16)).await;
    agent_b.run_for(&m, POLL).await;
    assert_eq!(m.machine_of_lease(second).await, Some(b.machine));
    feed.notify().await;
    let x = m.place_bid(&on(Vec::new(), 8)).await;
    // The chain's clock turns a minute before A's next look: the view learns again.
    m.advance(RELEARN_SECS as u64).await;
    let seen = look()
        .await
        .bids
        .into_iter()
        .find(|v| v.key == x)
        .expect("X fits A");
    assert_eq!(
        seen.elsewhere.map(|e| e.machine),
        Some(Key(b.machine.to_bytes())),
        "the policy's machine is B, whose GPU 1 it completes"
    );
    assert_eq!(a_chain.views_built(), 1, "kept, not built again");
}

/// A spot bid waits in its machine's own book, which no other machine may take from: the
/// packing policy does not send it elsewhere, though an idle machine with cheaper electricity
/// (which would win a tie) is in the market.
#[tokio::test(start_paused = true)]
async fn program_a_spot_bid_runs_on_its_books_machine_without_waiting() {
    let m = ProgramMarket::start().await;
    m.add_machine(OTHER_REGION, ELECTRICITY_COST / 2).await;
    let mut agent = Agent::start(&m);
    let spot = m.place_bid(&BidSpec::spot(1, 5, 10 * TOKEN)).await;
    agent.run_for(&m, POLL).await;
    assert_eq!(m.machine_of_lease(spot).await, Some(m.machine()));
}

/// Smart batching through the agents. Machine A's lease of image `light` holds half of a GPU
/// and keeps it 20 % busy; the cheaper machine B's lease of image `busy` holds half of a GPU and
/// keeps it 95 % busy; their proofs say so. Each step below would go otherwise without the
/// co-location model, which predicts that two `busy` leases clash and a `busy` and a `light`
/// one get along:
/// - a second `busy` bid for B only takes B's other GPU, not the rest of the first one's;
/// - a third `busy` bid, for any machine, would complete a GPU of B (the cheaper), but B's agent
///   leaves it to A, whose agent takes it beside the `light` lease at once;
/// - a bid of an image no lease has measured clashes with nothing: it completes a GPU of B.
#[tokio::test(start_paused = true)]
async fn program_a_bid_shares_a_gpu_with_a_tenant_it_gets_along_with() {
    let m = ProgramMarket::start().await;
    let b = m.add_machine(OTHER_REGION, ELECTRICITY_COST / 2).await;
    let (mut agent_a, mut agent_b) = (Agent::start(&m), Agent::on(b.chain.clone()));
    let (light, busy, unmeasured) = ([1u8; 32], [2u8; 32], [3u8; 32]);
    let half = |image_digest, regions| BidSpec {
        gib_per_gpu: 12,
        image_digest,
        regions,
        ..BidSpec::queue(1, 40)
    };
    let on_a = m.place_bid(&half(light, vec![MACHINE_REGION])).await;
    let on_b = m.place_bid(&half(busy, vec![OTHER_REGION])).await;
    let proven = prove_loads(&m, &mut agent_a, &mut agent_b, &[on_a, on_b]).await;
    // What the agents measured: two `busy` leases clash, a `busy` and a `light` one do not.
    let model = InterferenceModel::MARKET;
    assert!(
        !model.get_along(&proven[1], &proven[1]) && model.get_along(&proven[1], &proven[0]),
        "{proven:?}"
    );

    let second = m.place_bid(&half(busy, vec![OTHER_REGION])).await;
    prove_loads(&m, &mut agent_a, &mut agent_b, &[second]).await;
    let (first, second) = (
        m.lease_of(on_b).await.expect("the first busy lease"),
        m.lease_of(second).await.expect("the second busy lease"),
    );
    assert_eq!(second.machine, b.machine);
    assert_ne!(second.gpus(), first.gpus(), "not beside the first");

    let third = m.place_bid(&half(busy, vec![])).await;
    tick_both(&m, &mut agent_a, &mut agent_b).await;
    let (beside, third) = (
        m.lease_of(on_a).await.expect("the light lease"),
        m.lease_of(third).await.expect("the third busy lease"),
    );
    assert_eq!(third.machine, m.machine(), "left to A");
    assert_eq!(third.gpus(), beside.gpus(), "beside the light lease");

    let new = m.place_bid(&half(unmeasured, vec![])).await;
    tick_both(&m, &mut agent_a, &mut agent_b).await;
    assert_eq!(m.machine_of_lease(new).await, Some(b.machine));
}

/// Runs both agents until every lease of `bids` has proven an interval wholly at its load
/// (SIMULATED GPU: the load follows the container's CPU, of 2 CPUs per GPU; A's containers use
/// 20 %, B's 95 %); their profiles, in order.
async fn prove_loads(
    m: &ProgramMarket,
    a: &mut Agent,
    b: &mut Agent,
    bids: &[Key],
) -> Vec<Profile> {
    tick_both(m, a, b).await;
    for (agent, millicpus) in [(&*a, 400), (&*b, 1_900)] {
        for id in agent.runtime.containers().into_keys() {
            agent.runtime.set_cpu_rate(&id, millicpus);
        }
    }
    let mut proven = Vec::new();
    for _ in 0..3 * INTERVAL / POLL as u32 {
        tick_both(m, a, b).await;
        let mut leases = Vec::new();
        for &bid in bids {
            leases.push(m.lease_of(bid).await);
        }
        proven = leases
            .into_iter()
            .flatten()
            .filter(|l| l.next_interval >= 2)
            .filter_map(|l| l.profile())
            .collect();
        if proven.len() == bids.len() {
            return proven;
        }
    }
    panic!("the leases prove their loads: {proven:?}");
}

/// Two polls of both agents, the clocks moving on; machine B's agent looks first each time (so
/// that where both race, B wins).
async fn tick_both(m: &ProgramMarket, a: &mut Agent, b: &mut Agent) {
    for _ in 0..2 {
        m.advance(POLL).await;
        b.tick().await;
        a.tick().await;
    }
}

/// A client bids with an environment and never seals it (to reclaim its escrow and slash the
/// host for a silence it caused): the agent, at its default budgets, proves the lease's windows
/// (empty) while it waits, and ends the lease, with its reason, one interval before the client
/// could call the host silent. At no tick is the lease reclaimable by the program's rule.
async fn a_client_that_never_seals_its_environment_cannot_get_the_host_slashed(
    m: &impl MarketUnderTest,
) {
    let chain = m.chain();
    let mut spec = BidSpec::queue(1, 10);
    spec.env_hash = [9; 32];
    let bid = m.place_bid(&spec).await;
    let mut agent = Agent::start(m);
    // A bid sealed to nobody is left a grace period first (its client may be storing the
    // copies): the fake, which runs no packing policy, takes it at once.
    agent
        .run_for(m, gpu_market_core::placement::GRACE_SECS + POLL)
        .await;
    let leases = chain.leases().await.unwrap();
    let l = leases
        .iter()
        .find(|l| l.bid == bid)
        .expect("allocated")
        .clone();
    for _ in 0..4 * SECS / POLL {
        agent.run_for(m, POLL).await;
        assert!(!m.reclaimable(l.key).await, "the host slashable");
    }
    assert!(closed(m, l.key).await, "ended, its client refunded");
    assert_eq!(agent.running(), 0, "nothing ran");
    assert_eq!(free_gib(m).await, vec![24, 24]);
}
