//! The agent binary against the real parts: the program on a local solana-test-validator, the
//! Docker engine and the registry on 127.0.0.1:5000 (`scripts/engine.sh start`), and the
//! simulated GPU backend (SIMULATED GPU: this machine has none). A client's bid is allocated by
//! the agent, its image pulled and run with a GPU device request, its usage proven each billing
//! interval and paid to the host; a kill -9 in the middle loses and doubles nothing.

use bollard::query_parameters::InspectContainerOptions;
use gpu_market::events::UsageProven;
use gpu_market::pda;
use gpu_market::state::{Bid, Lease, Machine};
use gpu_market_tests::live::{LiveMarket, Wallet};
use solana_pubkey::Pubkey;

mod support;

use support::*;

/// What a lease's proofs paid and the balances moved.
struct Settled {
    proofs: Vec<UsageProven>,
    host_delta: u64,
    treasury_delta: u64,
    client_delta: u64,
}

/// A market with a 2-GPU machine, its agent running, and one client's queue bid for one GPU
/// over `intervals` billing intervals, with the balances it may move read before.
struct Scenario {
    live: LiveMarket,
    client: Wallet,
    config: std::path::PathBuf,
    _dir: tempfile::TempDir,
    docker: bollard::Docker,
    lease: Pubkey,
    escrow: u64,
    /// Host, treasury and client token balances after the bid was placed.
    before: [u64; 3],
}

impl Scenario {
    async fn start(intervals: u32) -> (Scenario, Agent) {
        let live = live_market(2).await;
        let client = live.client(10 * TOKEN, 0).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let config = Agent::write_config(&live, dir.path(), 2);
        let agent = Agent::start(&config);
        let now = live.cluster.now().await.unwrap();
        let bid = live
            .place(&client, queue_bid(1, intervals * INTERVAL, now))
            .await
            .unwrap();
        let escrow = live.cluster.account::<Bid>(&bid).await.unwrap().escrow;
        let before = Self::balances(&live, &client).await;
        let scenario = Scenario {
            live,
            client,
            config,
            _dir: dir,
            docker: docker().await,
            lease: pda::lease(&bid).0,
            escrow,
            before,
        };
        (scenario, agent)
    }

    async fn balances(live: &LiveMarket, client: &Wallet) -> [u64; 3] {
        let c = &live.cluster;
        [
            c.token_balance(&live.host.tokens).await.unwrap(),
            c.token_balance(&live.treasury).await.unwrap(),
            c.token_balance(&client.tokens).await.unwrap(),
        ]
    }

    /// Waits until the lease is settled and closed and its container removed.
    async fn wait_settled(&self, agent: &Agent, secs: u64) {
        wait_for("the lease settled and closed", secs, agent, || async {
            (!account_exists(&self.live, &self.lease).await).then_some(())
        })
        .await;
        wait_for("the container removed", 20, agent, || async {
            containers_of(&self.docker, &self.lease)
                .await
                .is_empty()
                .then_some(())
        })
        .await;
    }

    /// What the lease's proofs paid, checked against the token balances they moved.
    async fn settle_and_check(&self) -> Settled {
        let proofs = self.live.usage_proofs(&self.lease).await.unwrap();
        let after = Self::balances(&self.live, &self.client).await;
        let [host_delta, treasury_delta, client_delta] =
            [0, 1, 2].map(|i| after[i] - self.before[i]);
        let to_host: u64 = proofs.iter().map(|p| p.paid_to_host).sum();
        let fees: u64 = proofs.iter().map(|p| p.fee).sum();
        assert_eq!(
            host_delta, to_host,
            "the host receives exactly what the proofs pay"
        );
        assert_eq!(treasury_delta, fees, "the treasury receives the fees");
        assert_eq!(
            client_delta,
            self.escrow - to_host - fees,
            "the client gets back the escrow the proofs did not spend"
        );
        let intervals: Vec<u32> = proofs.iter().map(|p| p.interval).collect();
        let expected: Vec<u32> = (0..intervals.len() as u32).collect();
        assert_eq!(
            intervals, expected,
            "one proof per interval, none missing, none twice"
        );
        Settled {
            proofs,
            host_delta,
            treasury_delta,
            client_delta,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bid_is_allocated_run_on_the_engine_proven_and_paid() {
    let (s, agent) = Scenario::start(3).await;
    let (live, docker, lease, escrow) = (&s.live, &s.docker, s.lease, s.escrow);

    // The agent allocates the bid and runs its image with exactly the lease's GPU.
    let l: Lease = wait_for("the lease", 30, &agent, || async {
        live.cluster.account::<Lease>(&lease).await.ok()
    })
    .await;
    assert_eq!(l.gpu_count, 1);
    assert_eq!(l.power_limits_w[0], 300);
    let id = wait_for("the lease's container running", 60, &agent, || async {
        containers_of(docker, &lease)
            .await
            .into_iter()
            .find(|(_, running)| *running)
            .map(|(id, _)| id)
    })
    .await;
    let inspect = docker
        .inspect_container(&id, None::<InspectContainerOptions>)
        .await
        .unwrap();
    let host_config = inspect.host_config.unwrap();
    let requests = host_config.device_requests.unwrap();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].driver.as_deref(), Some("nvidia"));
    assert_eq!(
        requests[0].device_ids.as_deref(),
        Some(&[l.gpus[0].to_string()][..]),
        "the device request names exactly the leased GPU"
    );
    let image = inspect.config.unwrap().image.unwrap();
    assert!(
        image.ends_with(&engine_env("GPU_MARKET_WORKER_DIGEST")),
        "pulled by digest: {image}"
    );

    // Proofs each interval; at the end the lease is settled and closed, the container gone.
    s.wait_settled(&agent, 60).await;
    let settled = s.settle_and_check().await;
    assert!(
        settled.proofs.len() >= 3,
        "a 3-interval lease is proven in at least 3 proofs: {}",
        settled.proofs.len()
    );
    assert!(settled.host_delta > 0 && settled.treasury_delta > 0);
    assert!(settled.client_delta < escrow);
    let machine: Machine = live.cluster.account(&live.machine).await.unwrap();
    assert_eq!(machine.leases, 0);
    assert_eq!(machine.missed_intervals, 0, "no interval went unproven");
    assert_eq!(machine.violations, 0);

    let (status, log) = agent.terminate();
    assert!(status.success(), "SIGTERM drains cleanly; log:\n{log}");
    assert!(
        log.contains("websocket subscribed"),
        "the agent watched the program's accounts over the websocket; log:\n{log}"
    );
    println!(
        "lease {lease}: {} proofs, host +{}, treasury +{}, client refund {} of escrow {escrow}",
        settled.proofs.len(),
        settled.host_delta,
        settled.treasury_delta,
        settled.client_delta
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_and_restart_lose_and_double_nothing() {
    let (s, agent) = Scenario::start(5).await;
    let (live, docker, lease) = (&s.live, &s.docker, s.lease);

    // Kill the agent right after its first proof landed, container still running.
    wait_for("the first proof", 60, &agent, || async {
        live.cluster
            .account::<Lease>(&lease)
            .await
            .ok()
            .filter(|l| l.next_interval >= 1)
    })
    .await;
    let before: Vec<(String, bool)> = containers_of(docker, &lease).await;
    assert_eq!(
        before.len(),
        1,
        "one container for the lease: {before:?}; agent log:\n{}",
        agent.log()
    );
    let first_log = agent.kill9();

    // Restart from the same state file: the container is adopted, not started twice.
    let agent = Agent::start(&s.config);
    s.wait_settled(&agent, 90).await;
    let log = agent.log();
    assert!(
        !log.contains("lease started"),
        "the restarted agent adopted the running container instead of starting another:\n{log}"
    );
    let settled = s.settle_and_check().await;
    assert!(
        settled.proofs.len() >= 5,
        "every interval of the 5-interval lease proven: {} proofs\nfirst run:\n{first_log}\nsecond run:\n{log}",
        settled.proofs.len()
    );
    let machine: Machine = live.cluster.account(&live.machine).await.unwrap();
    assert_eq!(machine.missed_intervals, 0, "no interval lost to the kill");
    assert_eq!(machine.leases, 0);
    let (status, log) = agent.terminate();
    assert!(status.success(), "SIGTERM drains cleanly; log:\n{log}");
}
