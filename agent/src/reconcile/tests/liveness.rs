//! The agent's first rule under random faults: whatever the registry, the engine, the RPC node,
//! the GPUs and the clients do, no lease is ever reclaimable while the agent runs (`run_for`
//! checks after every tick), every lease ends, and nothing is billed that did not run.
//!
//! Each case is a random schedule, one event a tick, on a machine of 8 GPUs at the agent's
//! default budgets: bids (some with an environment sealed late or never, some on an image the
//! registry stalls or does not have), short RPC outages, books that cannot be read, the engine
//! down or hanging on create, slow pulls, GPUs that cannot be read, containers that exit.

use proptest::prelude::*;

use super::*;

/// A stalled image (the registry never finishes it) and one it does not have.
const STALLED: &str = "127.0.0.1:5000/gpu-market/stalled:v1";
const MISSING: &str = "127.0.0.1:5000/gpu-market/missing:v1";

#[derive(Debug, Clone, Copy)]
enum Env {
    None,
    Sealed,
    /// Sealed this many ticks after the bid is placed.
    Late(u8),
    /// Never sealed.
    Never,
}

#[derive(Debug, Clone, Copy)]
enum Image {
    Fine,
    Stalled,
    Missing,
}

#[derive(Debug, Clone)]
enum Event {
    Bid {
        gpus: u8,
        intervals: u32,
        env: Env,
        image: Image,
    },
    /// The cluster unreachable for this many ticks (at most 3: 15 s, well inside a silence
    /// window; a longer outage is the host's own silence).
    ChainOutage(u8),
    BooksUnreadable(u8),
    EngineDown(u8),
    HangCreates(u8),
    /// Every pull takes this many seconds from now on.
    PullDelay(u16),
    GpuReadsFail {
        gpu: u8,
        ticks: u8,
    },
    /// The `nth` running container (modulo their number) exits with `code`.
    Exit {
        nth: u8,
        code: i64,
    },
    Idle,
}

fn event() -> impl Strategy<Value = Event> {
    let env = prop_oneof![
        4 => Just(Env::None),
        2 => Just(Env::Sealed),
        1 => (1u8..40).prop_map(Env::Late),
        1 => Just(Env::Never),
    ];
    let image = prop_oneof![
        6 => Just(Image::Fine),
        1 => Just(Image::Stalled),
        1 => Just(Image::Missing),
    ];
    prop_oneof![
        8 => (1u8..=2, 1u32..=4, env, image).prop_map(|(gpus, intervals, env, image)| {
            Event::Bid { gpus, intervals, env, image }
        }),
        1 => (1u8..=3).prop_map(Event::ChainOutage),
        1 => (1u8..=30).prop_map(Event::BooksUnreadable),
        1 => (1u8..=12).prop_map(Event::EngineDown),
        1 => (1u8..=20).prop_map(Event::HangCreates),
        1 => (0u16..=120).prop_map(Event::PullDelay),
        1 => (0u8..8, 1u8..=30).prop_map(|(gpu, ticks)| Event::GpuReadsFail { gpu, ticks }),
        1 => (0u8..8, 0i64..3).prop_map(|(nth, code)| Event::Exit { nth, code }),
        3 => Just(Event::Idle),
    ]
}

/// Faults that last a number of ticks: the tick each ends at.
#[derive(Default)]
struct Lasting {
    outage: usize,
    books: usize,
    engine: usize,
    hang: usize,
    gpu_reads: [usize; 8],
}

/// Runs `events` one a tick, then lets everything end; returns how many leases there were.
async fn run(events: Vec<Event>) -> usize {
    let h = Harness::new(&[0; 8]);
    h.runtime.stall_pulls(STALLED);
    h.runtime.refuse_pulls(MISSING);
    let mut r = h.reconciler();
    // The agent has read the cluster's clock once before anything fails.
    h.run_for(&mut r, POLL).await;
    let mut lasting = Lasting::default();
    // Environments to seal later: (tick, bid, sealed copy).
    let mut late: Vec<(usize, Key, Vec<u8>)> = Vec::new();
    // Bids whose lease can never run a container: nothing may be billed for them.
    let mut never_run: Vec<Key> = Vec::new();
    let mut bids = 0u8;
    use solana_signer::Signer;
    for (tick, e) in events.into_iter().enumerate() {
        match e {
            Event::Bid {
                gpus,
                intervals,
                env,
                image,
            } => {
                bids += 1;
                let mut b = bid(bids, BidKind::Queue, gpus, 1_000, power(250));
                b.gib_per_gpu = 40;
                b.max_duration_secs = intervals * INTERVAL;
                b.latest_start = h.chain.clock() + 600;
                b.deadline = b.latest_start + b.max_duration_secs as i64;
                b.image_ref = match image {
                    Image::Fine => b.image_ref,
                    Image::Stalled => STALLED.into(),
                    Image::Missing => MISSING.into(),
                };
                match env {
                    Env::None => {}
                    Env::Sealed => b.env_hash = h.seal_env(b.key, "A=1\n"),
                    Env::Late(after) => {
                        let env = gpu_market_sdk::envelope::Environment::new(
                            b"A=1\n",
                            &solana_keypair::Keypair::new(),
                        )
                        .unwrap();
                        b.env_hash = env.hash();
                        let sealed = env.seal_to(&h.env_key.pubkey()).expect("a curve point");
                        late.push((tick + after as usize, b.key, sealed));
                    }
                    Env::Never => b.env_hash = [9; 32],
                }
                if matches!(env, Env::Never) || !matches!(image, Image::Fine) {
                    never_run.push(b.key);
                }
                h.chain.place_bid(b);
            }
            Event::ChainOutage(n) => lasting.outage = lasting.outage.max(tick + n as usize),
            Event::BooksUnreadable(n) => lasting.books = lasting.books.max(tick + n as usize),
            Event::EngineDown(n) => lasting.engine = lasting.engine.max(tick + n as usize),
            Event::HangCreates(n) => lasting.hang = lasting.hang.max(tick + n as usize),
            Event::PullDelay(secs) => h.runtime.delay_pulls(Duration::from_secs(secs as u64)),
            Event::GpuReadsFail { gpu, ticks } => {
                let until = &mut lasting.gpu_reads[gpu as usize];
                *until = (*until).max(tick + ticks as usize);
            }
            Event::Exit { nth, code } => {
                let running = h.running();
                if !running.is_empty() {
                    let (id, _) = &running[nth as usize % running.len()];
                    h.runtime.exit(id, code);
                }
            }
            Event::Idle => {}
        }
        for (_, bid, sealed) in late.iter().filter(|(at, _, _)| *at == tick) {
            h.chain.store_sealed_env(*bid, sealed.clone());
        }
        h.chain.set_outage(tick < lasting.outage);
        h.chain.set_books_unreadable(tick < lasting.books);
        h.runtime.set_engine_down(tick < lasting.engine);
        h.runtime.hang_creates(tick < lasting.hang);
        for (gpu, until) in lasting.gpu_reads.iter().enumerate() {
            h.gpus.fail_reads(gpu as u32, tick < *until).unwrap();
        }
        h.run_for(&mut r, POLL).await;
    }
    // Everything heals; every bid runs or expires, every lease ends.
    for (_, bid, sealed) in late {
        h.chain.store_sealed_env(bid, sealed);
    }
    h.chain.set_outage(false);
    h.chain.set_books_unreadable(false);
    h.runtime.set_engine_down(false);
    h.runtime.hang_creates(false);
    h.runtime.delay_pulls(Duration::ZERO);
    for gpu in 0..8 {
        h.gpus.fail_reads(gpu, false).unwrap();
    }
    // Bids wait at most 10 minutes and run at most 4 intervals.
    for _ in 0..6 {
        h.run_for(&mut r, 300).await;
        if h.chain.leases().await.unwrap().is_empty() && r.state().leases.is_empty() {
            break;
        }
    }
    assert!(
        h.chain.leases().await.unwrap().is_empty(),
        "every lease ended"
    );
    assert!(r.state().leases.is_empty(), "and forgotten");
    assert!(h.chain.reclaimed().is_empty());
    for bid in never_run {
        let lease = h.chain.lease_key(bid);
        let billed: u64 = h
            .chain
            .accepted()
            .iter()
            .filter(|a| a.lease == lease)
            .map(|a| a.proof.gpu_seconds)
            .sum();
        assert_eq!(
            billed, 0,
            "bid {bid}: billed though its container never ran"
        );
    }
    h.chain.ended().len()
}

proptest! {
    // Six cases of 60 to 100 events (about 25 leases each, ~40 s) by default;
    // `PROPTEST_CASES` runs more (an explicit `cases` would override the variable).
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(6),
        ..ProptestConfig::default()
    })]

    #[test]
    fn no_lease_is_ever_reclaimable_whatever_fails(
        events in proptest::collection::vec(event(), 60..100)
    ) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        let leases = rt.block_on(run(events));
        eprintln!("{leases} leases");
        prop_assert!(leases > 0);
    }
}
