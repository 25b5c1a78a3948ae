//! Two agent processes on two machines of one market, on a local solana-test-validator with the
//! Docker engine and the registry (`scripts/engine.sh start`) and simulated GPUs (SIMULATED GPU:
//! this machine has none): which machine takes a bid is the market's packing policy, which each
//! agent computes from the accounts alone, and a machine whose agent is stopped strands no bid
//! and, once silent past the market's silence window, is given none.

use gpu_market::instructions::PlaceBidArgs;
use gpu_market::pda;
use gpu_market::state::{Bid, Lease, Machine, MachineNetwork, MachineTerms, Market};
use gpu_market_sdk::placement::{MarketPlacement, Sealed};
use gpu_market_sdk::{PlaceBid, PlaceGangBid};
use gpu_market_tests::live::{LiveMarket, Wallet};
use solana_pubkey::Pubkey;
use solana_signer::Signer;

mod support;

use support::*;

/// A region label.
fn region(name: &str) -> [u8; 16] {
    let mut r = [0u8; 16];
    r[..name.len()].copy_from_slice(name.as_bytes());
    r
}

/// Machine B of another host: 2 GPUs × 24 GiB as A's, the same floor, its terms as `change`
/// makes them; returns it and its agent's key.
async fn machine_b(
    live: &LiveMarket,
    change: impl FnOnce(&mut MachineTerms),
) -> (Pubkey, solana_keypair::Keypair) {
    let host_b = live.client(10 * TOKEN, 10 * TOKEN).await.unwrap();
    let agent_b = live.cluster.wallet(10).await.unwrap();
    let (machine_b, _) = live
        .register_machine(&host_b.key, agent_b.pubkey(), |t| {
            t.gpus = gpus(2);
            t.price_floor_per_gpu_hour = TOKEN / 10;
            change(t);
        })
        .await
        .unwrap();
    (machine_b, agent_b)
}

/// Machine A (the market's) and machine B (another host's), each publishing a port for each
/// lease from a range of its own on this host's public address (the parts of a gang meet
/// through the engine's proxy), and letting its leases reach nothing (egress none, the
/// default); each with its agent started. Returns the address, B, and the agents (A's, B's)
/// with their folders.
async fn publishing_pair(
    live: &LiveMarket,
) -> (String, Pubkey, (Agent, Agent, [tempfile::TempDir; 2])) {
    let host = host_address().to_string();
    let network = |host: &str| MachineNetwork {
        host: host.into(),
        ports_per_lease: 1,
        ..MachineNetwork::default()
    };
    live.update_machine(|t| t.network = network(&host))
        .await
        .unwrap();
    let (machine_b, agent_b) = machine_b(live, |t| t.network = network(&host)).await;
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let first_port = 32_000 + (std::process::id() % 400) as u16 * 20;
    let config_a = Agent::write_config(live, dir_a.path(), 2);
    publishing(&config_a, 0, first_port, &host);
    let agent_a = Agent::start(&config_a);
    let config_b = Agent::write_config_for(live, dir_b.path(), 2, &agent_b, &machine_b);
    publishing(&config_b, 0, first_port + 10, &host);
    let agent_b = Agent::start(&config_b);
    (host, machine_b, (agent_a, agent_b, [dir_a, dir_b]))
}

/// `client` places a gang of `args` on two machines, its first port 29500 (the rendezvous).
async fn place_gang(live: &LiveMarket, client: &Wallet, mut args: PlaceBidArgs) -> Pubkey {
    args.ports = vec![29_500];
    let place = PlaceGangBid {
        place: PlaceBid {
            client: &client.key,
            market: live.market,
            book: live.queue_book,
            machine: live.machine,
            payment_mint: live.mint,
            client_tokens: client.tokens,
            nonce: live.next_nonce(),
            args,
            evict: None,
        },
        parts: 2,
    };
    live.cluster.run(&place).await.unwrap();
    place.place.bid()
}

/// The machine running the lease of `bid`, once there is one.
async fn machine_of(live: &LiveMarket, bid: &Pubkey) -> Option<Pubkey> {
    let lease = pda::lease(bid).0;
    let l: Lease = live.cluster.account(&lease).await.ok()?;
    Some(l.machine)
}

/// Waits for the lease of `bid` (up to 30 s, else `agent`'s log); its machine.
async fn leased_on(live: &LiveMarket, bid: Pubkey, what: &str, agent: &Agent) -> Pubkey {
    wait_for(
        what,
        30,
        agent,
        || async move { machine_of(live, &bid).await },
    )
    .await
}

/// `client` places a one-GPU queue bid for `gib` GiB, accepted in `regions` (none: any), of the
/// idler image: its leases' proofs measure an SM utilisation near 0, so the co-location model
/// lets two of them share a GPU. (Two of the worker image, each proven near 100 %, it keeps
/// apart: a bid that would complete a GPU beside one goes to an idle machine instead, from the
/// moment its neighbour's first proof lands, a moment this machine's load decides.)
async fn bid(live: &LiveMarket, client: &Wallet, gib: u16, regions: Vec<[u8; 16]>) -> Pubkey {
    let now = live.cluster.now().await.unwrap();
    let mut args = queue_bid(40 * INTERVAL, now);
    (args.image_ref, args.image_digest) = seeded_image("IDLER");
    args.gib_per_gpu = gib;
    args.regions = regions;
    live.place(client, args).await.unwrap()
}

/// Machine A (the market's, 2 GPUs × 24 GiB in eu-west) and machine B (another host's, the same
/// GPUs in us-east, cheaper electricity: of two idle machines B wins), each with its agent. A bid
/// that completes a GPU of A beside a co-tenant it gets along with goes to A, though B is idle
/// and cheaper; with A's agent stopped, B
/// leaves such a bid to A for the grace period (10 s) or until A's heartbeat is older than the
/// market's silence window, then takes it; once A is silent, the policy gives it nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_agents_follow_the_packing_policy_and_a_stopped_one_strands_no_bid() {
    let live = live_market(2).await;
    let (eu, us) = (region("eu-west"), region("us-east"));
    live.add_region(eu).await.unwrap();
    live.add_region(us).await.unwrap();
    live.update_machine(|t| t.region = eu).await.unwrap();
    let (machine_b, agent_b) = machine_b(&live, |t| {
        t.electricity_cost_per_kwh = TOKEN / 10;
        t.region = us;
    })
    .await;
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let agent_a = Agent::start(&Agent::write_config(&live, dir_a.path(), 2));
    let config_b = Agent::write_config_for(&live, dir_b.path(), 2, &agent_b, &machine_b);
    let agent_b = Agent::start(&config_b);
    let client = live.client(100 * TOKEN, 0).await.unwrap();

    // 16 of GPU 0's 24 GiB on A (only eu-west is accepted); then 8 GiB that any machine may
    // run completes that GPU: A takes it.
    let first = bid(&live, &client, 16, vec![eu]).await;
    assert_eq!(
        leased_on(&live, first, "the first lease", &agent_a).await,
        live.machine
    );
    let second = bid(&live, &client, 8, vec![]).await;
    assert_eq!(
        leased_on(&live, second, "the second lease", &agent_a).await,
        live.machine,
        "the policy's machine; B's log:\n{}",
        agent_b.log()
    );

    // The same on A's GPU 1, with A's agent stopped before the 8 GiB bid.
    let third = bid(&live, &client, 16, vec![eu]).await;
    assert_eq!(
        leased_on(&live, third, "the third lease", &agent_a).await,
        live.machine
    );
    let (status, log) = agent_a.terminate();
    assert!(status.success(), "A's agent stops cleanly; log:\n{log}");
    // A counts as alive, for the policy every agent computes, until its last heartbeat is
    // older than the market's silence window (`placement::alive`).
    let market: Market = live.cluster.account(&live.market).await.unwrap();
    let window = gpu_market_sdk::placement::alive_secs(&market);
    let a: Machine = live.cluster.account(&live.machine).await.unwrap();
    let alive_until = a.last_heartbeat + window;
    let fourth = bid(&live, &client, 8, vec![]).await;
    // The grace period is in chain time, as the agent counts it (wall time and the
    // validator's clock drift apart by a second or more): B first saw the bid no earlier than
    // its placement. B leaves the bid to A until the grace period ends or A stops counting as
    // alive, whichever comes first.
    let placed: Bid = live.cluster.account(&fourth).await.unwrap();
    let grace = i64::try_from(gpu_market_core::placement::GRACE_SECS).unwrap();
    let leave_until = (placed.placed_at + grace).min(alive_until + 1);
    // B leaves it to A at first: watched until half the grace period has passed on the
    // cluster's clock. The lease is read before the clock, so a reading clear of that end
    // (by a second, for the clock's steps) shows no lease however slowly this machine runs; a
    // later reading proves nothing and is not checked.
    let ahead = (placed.placed_at + grace / 2 - live.cluster.now().await.unwrap()).max(0) as u64;
    wait_for("half the grace period", ahead + 60, &agent_b, || async {
        let machine = machine_of(&live, &fourth).await;
        let now = live.cluster.now().await.unwrap();
        if now < leave_until - 1 {
            assert_eq!(
                machine,
                None,
                "B leaves it to A at first: placed at {}, A alive until {alive_until}, the cluster's clock reads {now}; B's log:\n{}\nA's log:\n{log}",
                placed.placed_at,
                agent_b.log()
            );
        }
        (now >= placed.placed_at + grace / 2).then_some(())
    })
    .await;
    assert_eq!(
        leased_on(&live, fourth, "the fourth lease", &agent_b).await,
        machine_b
    );
    let lease: Lease = live.cluster.account(&pda::lease(&fourth).0).await.unwrap();
    assert!(
        lease.started_at >= leave_until - 1,
        "taken once the grace period ended or A went silent: placed at {}, A alive until {alive_until}, started at {}",
        placed.placed_at,
        lease.started_at
    );

    // Once A's last heartbeat is older than the market's silence window, the policy every agent
    // computes leaves A out: it gives A no bid and no turn, so B need not wait for it. Read
    // from the cluster as the agents read it, each time: the proofs A sent as it stopped may
    // land after the read above, and they are A's heartbeat too.
    wait_for(
        "A silent past the window",
        2 * window as u64 + 60,
        &agent_b,
        || async {
            let a: Machine = live.cluster.account(&live.machine).await.unwrap();
            (live.cluster.now().await.unwrap() > a.last_heartbeat + window).then_some(())
        },
    )
    .await;
    let fifth = bid(&live, &client, 8, vec![]).await;
    let now = live.cluster.now().await.unwrap();
    let mut machines = Vec::new();
    for key in [live.machine, machine_b] {
        machines.push((key, live.cluster.account::<Machine>(&key).await.unwrap()));
    }
    assert!(!gpu_market_sdk::placement::alive(
        &market,
        &machines[0].1,
        now
    ));
    let mut policy = MarketPlacement::new(&market, now, machines, Vec::new(), &[]).unwrap();
    let b: Bid = live.cluster.account(&fifth).await.unwrap();
    let placed = policy.place(&b, Sealed::No).expect("B fits");
    assert_eq!(
        placed.machine, machine_b,
        "a silent machine is never chosen"
    );
    assert_eq!(policy.turn(&b, &placed, &live.machine, Sealed::No), None);
    assert_eq!(
        leased_on(&live, fifth, "the fifth lease", &agent_b).await,
        machine_b
    );
}

/// Failover (issue 34): agent A is killed with SIGKILL while it runs a queue lease. Once A has
/// been silent for the market's window, a keeper reclaims the lease (the instruction `gpu-market
/// keeper` sends): A's host is slashed, the bid goes back to the queue at its rank, and B's
/// agent runs it within two intervals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_agents_queue_lease_runs_again_on_the_other_machine() {
    let live = live_market(2).await;
    // B's electricity costs more: of the two idle machines, the policy gives the bid to A.
    let (machine_b, agent_b) = machine_b(&live, |t| t.electricity_cost_per_kwh = TOKEN).await;
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let config_a = Agent::write_config(&live, dir_a.path(), 2);
    let agent_a = Agent::start(&config_a);
    let agent_b = Agent::start(&Agent::write_config_for(
        &live,
        dir_b.path(),
        2,
        &agent_b,
        &machine_b,
    ));
    let client = live.client(100 * TOKEN, 0).await.unwrap();
    let job = bid(&live, &client, 8, vec![]).await;
    assert_eq!(
        leased_on(&live, job, "the lease on A", &agent_a).await,
        live.machine
    );
    let lease = pda::lease(&job).0;
    wait_for("A's first proof", 60, &agent_a, || async {
        let l: Lease = live.cluster.account(&lease).await.ok()?;
        (l.next_interval >= 1).then_some(())
    })
    .await;
    let killed_at = live.cluster.now().await.unwrap();
    let log_a = agent_a.kill9();
    // Nothing restarts A: the container it left would run on through the later tests.
    remove_containers_of(&config_a);

    // Silent for the window: the keeper reclaims.
    let l: Lease = wait_for("A silent for the window", 120, &agent_b, || async {
        let l: Lease = live.cluster.account(&lease).await.ok()?;
        let now = live.cluster.now().await.ok()?;
        l.reclaimable(now).then_some(l)
    })
    .await;
    let host_stake = || async {
        let key = pda::stake(&live.market, &live.host.key.pubkey()).0;
        live.cluster
            .account::<gpu_market::state::StakeAccount>(&key)
            .await
            .unwrap()
            .amount
    };
    let staked = host_stake().await;
    let keeper = live.cluster.wallet(1).await.unwrap();
    let market: Market = live.cluster.account(&live.market).await.unwrap();
    let machine_a: Machine = live.cluster.account(&live.machine).await.unwrap();
    let reclaim = gpu_market_sdk::CloseLease::of(
        &keeper,
        (lease, &l),
        &machine_a,
        &market,
        Some(client.tokens),
        true,
    );
    live.cluster.run(&reclaim).await.unwrap();
    let reclaimed_at = live.cluster.now().await.unwrap();
    assert!(host_stake().await < staked, "A's host is slashed");

    // B runs it, with the escrow A's lease had left.
    let on = wait_for("the lease on B", 60, &agent_b, || async {
        let again: Lease = live.cluster.account(&lease).await.ok()?;
        (again.machine == machine_b).then_some(again)
    })
    .await;
    assert_eq!(on.escrow, l.escrow, "A's log:\n{log_a}");
    assert!(
        on.started_at <= reclaimed_at + 2 * INTERVAL as i64,
        "B started it at {} (reclaimed at {reclaimed_at}, A killed at {killed_at}); B's log:\n{}",
        on.started_at,
        agent_b.log()
    );
    let b: Bid = live.cluster.account(&job).await.unwrap();
    assert_eq!(b.status, gpu_market::state::BidStatus::Running);
    println!(
        "failover: A killed at {killed_at}, silent from {}, reclaimed at {reclaimed_at}, running on B at {} ({} s after the kill)",
        l.silent_from(),
        on.started_at,
        on.started_at - killed_at
    );
}

/// EASY backfilling through the agent: with one GPU of machine A busy for ten intervals, a bid
/// for both GPUs cannot start; A's agent reserves A for it (the market's only machine can start
/// it soonest). A one-GPU bid that would run past that start is never allocated onto the idle
/// GPU, and the two-GPU bid starts when the first lease ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_reserves_for_a_big_bid_and_backfills_nothing_that_would_delay_it() {
    let live = live_market(2).await;
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(&Agent::write_config(&live, dir.path(), 2));
    let client = live.client(100 * TOKEN, 0).await.unwrap();
    let now = live.cluster.now().await.unwrap();
    let mut short = queue_bid(10 * INTERVAL, now);
    short.gib_per_gpu = 24;
    let busy = live.place(&client, short).await.unwrap();
    let busy_lease = pda::lease(&busy).0;
    leased_on(&live, busy, "the ten-interval lease", &agent).await;
    let big_client = live.client(100 * TOKEN, 0).await.unwrap();
    let mut big = queue_bid(40 * INTERVAL, now);
    (big.gpu_count, big.gib_per_gpu, big.urgency_premium) = (2, 24, TOKEN);
    let big = live.place(&big_client, big).await.unwrap();

    let machine: Machine = wait_for("the reservation", 30, &agent, || async {
        let m: Machine = live.cluster.account(&live.machine).await.ok()?;
        (m.reservation.bid == big).then_some(m)
    })
    .await;
    let ends: Lease = live.cluster.account(&busy_lease).await.unwrap();
    assert_eq!(
        machine.reservation.start,
        ends.stop(),
        "when the busy lease ends"
    );

    // A one-GPU bid for forty intervals fits the idle GPU but would run past the start.
    let now = live.cluster.now().await.unwrap();
    let mut long = queue_bid(40 * INTERVAL, now);
    long.gib_per_gpu = 24;
    let long = live.place(&client, long).await.unwrap();
    // By two intervals after the reservation's start, on the cluster's clock.
    let by = machine.reservation.start + 2 * INTERVAL as i64;
    let l: Lease = wait_for_chain("the reserved bid's lease", &live, by, &agent, || async {
        live.cluster.account(&pda::lease(&big).0).await.ok()
    })
    .await;
    assert_eq!(l.machine, live.machine);
    assert!(
        l.started_at <= machine.reservation.start + 2 * INTERVAL as i64,
        "started at {}, reserved from {}; agent log:\n{}",
        l.started_at,
        machine.reservation.start,
        agent.log()
    );
    assert!(
        machine_of(&live, &long).await.is_none(),
        "the long bid never ran before it"
    );
    let b: Bid = live.cluster.account(&long).await.unwrap();
    assert_eq!(b.status, gpu_market::state::BidStatus::Open);
}

/// A queue bid whose client seals its environment to machine A alone (as `bid place --env FILE
/// --seal-to A` does: the bid placed, then the copy stored in a second transaction). Machine B
/// is idle and has the cheaper electricity: the policy's machine for the bid unsealed. The
/// sealed bid goes to A, whose agent opens the environment and runs it; B, which cannot open it,
/// never takes it. (Before, B took it as the policy's machine, in the gap before the copy was
/// stored or after, and waited for a copy of its own that never came: the lease refused, the
/// client refunded, the bid never run.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sealed_bid_runs_on_the_machine_it_was_sealed_to_not_the_policys_first() {
    use gpu_market_sdk::envelope::Environment;
    use gpu_market_sdk::SealEnv;
    let live = live_market(2).await;
    let (machine_b, agent_b) = machine_b(&live, |t| t.electricity_cost_per_kwh = TOKEN / 10).await;
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let agent_a = Agent::start(&Agent::write_config(&live, dir_a.path(), 2));
    let config_b = Agent::write_config_for(&live, dir_b.path(), 2, &agent_b, &machine_b);
    let agent_b = Agent::start(&config_b);
    let client = live.client(100 * TOKEN, 0).await.unwrap();
    let env = Environment::new(b"SECRET=for-a\n", &client.key).unwrap();
    let now = live.cluster.now().await.unwrap();
    let args = PlaceBidArgs {
        env_hash: env.hash(),
        ..queue_bid(40 * INTERVAL, now)
    };

    let bid = live.place(&client, args).await.unwrap();
    // Unsealed, the policy would give it B.
    let market: Market = live.market_state().await.unwrap();
    let mut machines = Vec::new();
    for key in [live.machine, machine_b] {
        machines.push((key, live.cluster.account::<Machine>(&key).await.unwrap()));
    }
    let mut policy = MarketPlacement::new(&market, now, machines, Vec::new(), &[]).unwrap();
    let b: Bid = live.cluster.account(&bid).await.unwrap();
    assert_eq!(policy.place(&b, Sealed::No).unwrap().machine, machine_b);
    live.cluster
        .run(&SealEnv {
            client: &client.key,
            bid,
            recipient: live.agent.pubkey(),
            sealed: env.seal_to(&live.agent.pubkey()).unwrap(),
        })
        .await
        .unwrap();
    assert_eq!(
        leased_on(&live, bid, "the sealed bid's lease", &agent_a).await,
        live.machine,
        "B's log:\n{}",
        agent_b.log()
    );
    let lease = pda::lease(&bid).0;
    let docker = docker().await;
    let id = wait_for("its container", 60, &agent_a, || async {
        let running = containers_of(&docker, &lease).await;
        running.into_iter().find(|(_, up)| *up).map(|(id, _)| id)
    })
    .await;
    assert_eq!(
        env_value(&exec(&id, "env"), "SECRET").as_deref(),
        Some("for-a"),
        "the environment opened on A"
    );
}

/// The value of `name` in `env` (lines `NAME=value`, as `env` prints them).
fn env_value(env: &str, name: &str) -> Option<String> {
    env.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .map(str::to_string)
}

/// A gang of two parts (one GPU on each of two machines) with two agents: the agent the packing
/// policy gives the first part sends `allocate_gang`; both parts start at once, each container
/// told its node rank, the gang's size and the first part's machine's address. The parts meet
/// as torchrun's ranks do (the seeded `gang` image): the second greets the first at
/// `MASTER_ADDR:MASTER_PORT`, the first machine's published port, through both machines'
/// firewalls under egress `none`, and each logs what the other said. When the client ends one
/// part, the other part's agent stops its own at once, and the last part's settlement refunds
/// the gang once and closes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_agents_start_a_gang_bid_together_and_stop_it_together() {
    let live = live_market(2).await;
    let (host, _, (agent_a, agent_b, _dirs)) = publishing_pair(&live).await;
    let client = live.client(100 * TOKEN, 0).await.unwrap();
    let tokens0 = live.cluster.token_balance(&client.tokens).await.unwrap();
    let now = live.cluster.now().await.unwrap();
    let mut args = queue_bid(40 * INTERVAL, now);
    (args.image_ref, args.image_digest) = seeded_image("GANG");
    let gang = place_gang(&live, &client, args).await;

    let leases = [pda::gang_lease(&gang, 0).0, pda::gang_lease(&gang, 1).0];
    let parts: Vec<Lease> = wait_for("both parts", 60, &agent_a, || async {
        let mut parts = Vec::new();
        for l in &leases {
            parts.push(live.cluster.account::<Lease>(l).await.ok()?);
        }
        Some(parts)
    })
    .await;
    assert_eq!(parts[0].started_at, parts[1].started_at, "started together");
    assert_ne!(parts[0].machine, parts[1].machine, "on two machines");
    let first: Machine = live.cluster.account(&parts[0].machine).await.unwrap();
    // The first part's agent records where its container's port 29500 is published; the other
    // part starts once it has, told that port.
    let rendezvous = wait_for("the gang's rendezvous", 60, &agent_a, || async {
        let l: Lease = live.cluster.account(&leases[0]).await.ok()?;
        (l.rendezvous_port != 0).then_some(l.rendezvous_port)
    })
    .await;
    let docker = docker().await;
    let mut ids = Vec::new();
    for (part, lease) in leases.iter().enumerate() {
        let agent = if parts[part].machine == live.machine {
            &agent_a
        } else {
            &agent_b
        };
        let id = wait_for("the part's container", 60, agent, || async {
            let running = containers_of(&docker, lease).await;
            running.into_iter().find(|(_, up)| *up).map(|(id, _)| id)
        })
        .await;
        let env = exec(&id, "env");
        let get = |name: &str| env_value(&env, name);
        assert_eq!(get("NODE_RANK"), Some(part.to_string()), "{env}");
        assert_eq!(get("PET_NNODES").as_deref(), Some("2"));
        assert_eq!(get("WORLD_SIZE").as_deref(), Some("2"));
        assert_eq!(get("MASTER_ADDR"), Some(first.network.host.clone()));
        let port = match part {
            0 => {
                let published = docker
                    .inspect_container(&id, None)
                    .await
                    .unwrap()
                    .network_settings
                    .and_then(|n| n.ports)
                    .and_then(|p| p.get("29500/tcp").cloned().flatten())
                    .and_then(|b| b.first().and_then(|b| b.host_port.clone()));
                assert_eq!(published, Some(rendezvous.to_string()), "the port recorded");
                29_500
            }
            _ => rendezvous,
        };
        assert_eq!(get("MASTER_PORT"), Some(port.to_string()), "{env}");
        ids.push(id);
    }
    // Each part's network opens the other's machine; the second part's also the rendezvous
    // port the engine of this host publishes for the first (the parts share a host here).
    for (part, lease) in leases.iter().enumerate() {
        let network = docker
            .inspect_network(&format!("gm-{lease}"), None)
            .await
            .unwrap();
        let label = network.labels.unwrap_or_default()["io.gpu-market.egress"].clone();
        let want = match part {
            0 => format!("none;peers:{host}"),
            _ => format!("none;peers:{host};rendezvous:{host}:{rendezvous}"),
        };
        assert_eq!(label, want, "part {part}");
    }
    // The parts exchanged their greetings through the first machine's published port.
    let heard = |part: usize, what: &'static str| {
        let id = ids[part].clone();
        async move {
            let log = container_log(&id);
            log.lines().any(|l| l == what).then_some(())
        }
    };
    // On failure, what each side saw: the parts' logs, both agents' and the host's rules.
    let greeted = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        while heard(0, "rank 0 heard: hello from rank 1").await.is_none()
            || heard(1, "rank 1 heard: hello from rank 0").await.is_none()
        {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    })
    .await;
    let rules = |args: &[&str]| {
        let out = std::process::Command::new("iptables").args(args).output();
        out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    };
    assert!(
        greeted.is_ok(),
        "the parts did not greet each other within 60 s\nrank 0's log:\n{}\nrank 1's log:\n{}\nA's log:\n{}\nB's log:\n{}\nnat DOCKER:\n{}\n{}:\n{}",
        container_log(&ids[0]),
        container_log(&ids[1]),
        agent_a.log(),
        agent_b.log(),
        rules(&["-t", "nat", "-S", "DOCKER"]),
        gpu_market_agent::firewall::INPUT_CHAIN,
        rules(&["-S", gpu_market_agent::firewall::INPUT_CHAIN]),
    );

    // The client ends the first part; the second part's agent stops its own, and the gang is
    // refunded once, both leases and the bid closed.
    let market: Market = live.cluster.account(&live.market).await.unwrap();
    let end = gpu_market_sdk::CloseLease::of(
        &client.key,
        (leases[0], &parts[0]),
        &first,
        &market,
        Some(client.tokens),
        false,
    );
    live.cluster.run(&end).await.unwrap();
    wait_for("the gang settled", 120, &agent_b, || async {
        let gone = !account_exists(&live, &gang).await
            && !account_exists(&live, &leases[0]).await
            && !account_exists(&live, &leases[1]).await;
        gone.then_some(())
    })
    .await;
    let tokens = live.cluster.token_balance(&client.tokens).await.unwrap();
    let escrow = live.cluster.account::<Bid>(&gang).await.ok();
    assert!(escrow.is_none());
    assert!(
        tokens < tokens0 && tokens > tokens0 - parts[0].escrow - parts[1].escrow,
        "paid for some proven time and refunded the rest: {tokens0} → {tokens}; A's log:\n{}\nB's log:\n{}",
        agent_a.log(),
        agent_b.log()
    );
}

/// Gang reservations through the agents: one GPU-pair machine busy for ten intervals, a gang of
/// one GPU on each of two machines cannot start. The agents reserve both machines for it from
/// when the busy lease ends (`reserve_gang`, sent by the machine that frees first), a two-GPU
/// bid below it that would run past that start is never allocated onto the idle machine, and
/// the gang starts on both at its reservation. (Before, a gang held nothing: every bid that fit
/// one of its machines ran first, however long, and the gang waited until it expired.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_reserve_two_machines_for_a_gang_and_start_it_there_on_time() {
    let live = live_market(2).await;
    let (_, machine_b, (agent_a, agent_b, _dirs)) = publishing_pair(&live).await;

    // Both GPUs of one machine busy for ten intervals.
    let client = live.client(100 * TOKEN, 0).await.unwrap();
    let now = live.cluster.now().await.unwrap();
    let mut busy = queue_bid(10 * INTERVAL, now);
    (busy.gpu_count, busy.gib_per_gpu) = (2, 24);
    let busy = live.place(&client, busy).await.unwrap();
    let busy_on = leased_on(&live, busy, "the ten-interval lease", &agent_a).await;
    let idle = if busy_on == live.machine {
        machine_b
    } else {
        live.machine
    };

    let gang_client = live.client(100 * TOKEN, 0).await.unwrap();
    let now = live.cluster.now().await.unwrap();
    let mut args = queue_bid(40 * INTERVAL, now);
    (args.gib_per_gpu, args.urgency_premium) = (24, TOKEN);
    let gang = place_gang(&live, &gang_client, args).await;

    let (held_idle, held_busy): (Machine, Machine) =
        wait_for("the gang's reservation", 30, &agent_b, || async {
            let i: Machine = live.cluster.account(&idle).await.ok()?;
            let b: Machine = live.cluster.account(&busy_on).await.ok()?;
            (i.reservation.bid == gang && b.reservation.bid == gang).then_some((i, b))
        })
        .await;
    let ends: Lease = live.cluster.account(&pda::lease(&busy).0).await.unwrap();
    let start = held_busy.reservation.start;
    assert_eq!(start, ends.stop(), "when the busy lease ends");
    assert_eq!(
        held_idle.reservation.start, start,
        "both parts from the gang's start"
    );
    let b: Bid = live.cluster.account(&gang).await.unwrap();
    assert_eq!(b.reserved_on, idle, "sent by the machine that frees first");

    // A two-GPU bid for forty intervals fits the idle machine now but would run past the
    // start on its reserved GPU.
    let other = live.client(100 * TOKEN, 0).await.unwrap();
    let now = live.cluster.now().await.unwrap();
    let mut long = queue_bid(40 * INTERVAL, now);
    (long.gpu_count, long.gib_per_gpu) = (2, 24);
    let long = live.place(&other, long).await.unwrap();

    let leases = [pda::gang_lease(&gang, 0).0, pda::gang_lease(&gang, 1).0];
    let by = start + 2 * INTERVAL as i64;
    let parts: Vec<Lease> = wait_for_chain("both parts", &live, by, &agent_a, || async {
        let mut parts = Vec::new();
        for l in &leases {
            parts.push(live.cluster.account::<Lease>(l).await.ok()?);
        }
        Some(parts)
    })
    .await;
    let on: Vec<Pubkey> = parts.iter().map(|p| p.machine).collect();
    assert!(on.contains(&idle) && on.contains(&busy_on), "{on:?}");
    assert!(
        parts[0].started_at <= start + 2 * INTERVAL as i64,
        "started at {}, reserved from {start}; A's log:\n{}\nB's log:\n{}",
        parts[0].started_at,
        agent_a.log(),
        agent_b.log()
    );
    assert!(
        machine_of(&live, &long).await.is_none(),
        "the long bid never ran before it"
    );
}
