//! The websocket feed of the market program's accounts that concern one machine ([`watch`]):
//! every change wakes the reconcile loop, so that it acts at once instead of at its next poll,
//! and every notification's account data goes to the [`Mirror`] the chain client reads from
//! instead of asking the RPC node again.
//!
//! A websocket can die without closing: a node that stops sending, or a connection a middlebox
//! dropped, leaves the client waiting forever (the pubsub client pings but never checks for the
//! pong). So the watcher also follows the clock sysvar, which a live node changes several times
//! a second: a feed with no notification of any kind for [`WatchConfig::silence`] is presumed
//! dead, dropped (with the mirror) and subscribed anew, with backoff. Each notification and each
//! subscription the node confirms is reported to
//! [`Health::ws_alive`](crate::metrics::Health::ws_alive) for `/healthz`.

use std::collections::BTreeSet;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use anchor_lang::Discriminator;
use futures_util::stream::{self, BoxStream, Stream, StreamExt};
use gpu_market::state::{Bid, Lease, Machine};
use solana_account_decoder_client_types::{UiAccount, UiAccountEncoding};
use solana_commitment_config::CommitmentConfig;
use solana_pubkey::Pubkey;
use solana_pubsub_client::nonblocking::pubsub_client::PubsubClient;
use solana_rpc_client_api::config::{RpcAccountInfoConfig, RpcProgramAccountsConfig};
use solana_rpc_client_api::filter::{Memcmp, RpcFilterType};
use tokio::sync::Notify;

use super::mirror::Mirror;
use super::solana::{accounts_with, lease_filters, pubkey, MARKET_OFFSET};
use super::traffic::{json_len, Traffic};
use super::Key;
use crate::metrics::{unix_now, Metrics};
use crate::redact::{redact_urls, SecretUrl};

/// Offsets of the `Bid` fields the subscriptions filter on (after the 8-byte discriminator).
const BID_MARKET_OFFSET: usize = 8;
const BID_MACHINE_OFFSET: usize = 8 + 32 + 32;
/// The wait before subscribing again after a feed that delivered, and the most it grows to
/// (doubling) while attempts fail or deliver nothing.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// What to watch, where, and how long a silence means the feed is dead.
#[derive(Debug, Clone)]
pub struct WatchConfig {
    pub ws_url: SecretUrl,
    pub commitment: CommitmentConfig,
    pub market: Key,
    pub machine: Key,
    /// The market's queue book and the machine's spot book, followed account by account.
    pub books: Vec<Key>,
    /// The longest the feed may go without any notification (slot updates included) before it
    /// is dropped and subscribed anew; also the bound on connecting and on each subscription.
    pub silence: Duration,
}

/// A notification of the feed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// One of the watched accounts changed.
    Change,
    /// A machine or lease of the market changed (the packing policy's input): kept in the
    /// mirror; wakes nothing, since every other machine's proofs would wake this one's loop.
    Market,
    /// The cluster's clock moved (a new slot): the feed is alive.
    Slot,
    /// One subscription ended while the others go on: what it followed is no longer current.
    Lost,
}

/// Why [`follow`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// No notification for the silence bound.
    Silent,
    /// The node or the connection closed the feed, or one of its subscriptions.
    Closed,
    /// The feed was followed for [`RELIST`]: subscribed anew, so that whatever a notification
    /// could not say (an account closed, a notification lost) is read afresh.
    Relist,
}

/// How long one subscription of the feed is followed before it is made anew.
pub const RELIST: Duration = Duration::from_secs(600);

/// Passes each event of `events` to `on_event` until the feed or one of its subscriptions
/// closes, it stays silent for `silence`, or it has been followed for [`RELIST`]; returns why,
/// and how many events came.
pub async fn follow<S: Stream<Item = Event> + Unpin>(
    events: &mut S,
    silence: Duration,
    mut on_event: impl FnMut(Event),
) -> (End, u64) {
    let mut seen = 0;
    let relist = tokio::time::Instant::now() + RELIST;
    loop {
        let next = tokio::time::timeout(silence, events.next());
        let Ok(next) = tokio::time::timeout_at(relist, next).await else {
            return (End::Relist, seen);
        };
        match next {
            Ok(Some(Event::Lost)) => return (End::Closed, seen),
            Ok(Some(e)) => {
                seen += 1;
                on_event(e);
            }
            Ok(None) => return (End::Closed, seen),
            Err(_) => return (End::Silent, seen),
        }
    }
}

/// Watches the program's accounts of the configured machine, keeps them in `mirror` and wakes
/// `wake` on every change: its leases, the bids it could take, the machine, the market and the
/// books. Subscribes anew, with backoff (1 s doubling to 30 s while attempts deliver nothing),
/// whenever the feed fails or goes silent; meanwhile the chain client reads from the RPC node
/// and the reconcile loop's own poll is the fallback. Runs until dropped.
pub async fn watch(
    config: WatchConfig,
    wake: Arc<Notify>,
    mirror: Arc<Mirror>,
    metrics: Arc<Metrics>,
) {
    let mut backoff = FIRST_BACKOFF;
    let mut subscribed_before = false;
    loop {
        let fed = session(&config, &wake, &mirror, &metrics, subscribed_before).await;
        mirror.dropped();
        if let Some(fed) = fed {
            subscribed_before = true;
            if fed {
                backoff = FIRST_BACKOFF;
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// One connection: subscribes (`again`: not for the first time) and follows the feed until it
/// fails or goes silent. `None` when it could not subscribe; else whether any notification
/// came.
async fn session(
    c: &WatchConfig,
    wake: &Notify,
    mirror: &Arc<Mirror>,
    metrics: &Metrics,
    again: bool,
) -> Option<bool> {
    let url = &c.ws_url;
    let client = match tokio::time::timeout(c.silence, PubsubClient::new(url.expose())).await {
        Ok(Ok(client)) => client,
        Ok(Err(e)) => {
            let error = redact_urls(&e.to_string());
            tracing::warn!(%url, %error, "websocket connect failed");
            return None;
        }
        Err(_) => {
            tracing::warn!(%url, "websocket connect timed out");
            return None;
        }
    };
    let (market, machine) = (pubkey(c.market), pubkey(c.machine));
    let mut watched: BTreeSet<Pubkey> = c.books.iter().copied().map(pubkey).collect();
    watched.extend([market, machine, solana_sdk_ids::sysvar::clock::ID]);
    let subscribed = tokio::time::timeout(
        c.silence,
        subscribe_all(
            &client,
            c.commitment,
            &watched,
            &market,
            &machine,
            mirror,
            metrics.traffic(),
        ),
    )
    .await;
    let mut events = match subscribed {
        Ok(Ok(events)) => events,
        Ok(Err(e)) => {
            let error = redact_urls(&e);
            tracing::warn!(%url, %error, "websocket subscribe failed");
            return None;
        }
        Err(_) => {
            tracing::warn!(%url, "websocket subscribe timed out");
            return None;
        }
    };
    let mut followed = subscriptions(&market, &machine);
    followed.extend(market_subscriptions(&market));
    mirror.subscribed(machine, watched, followed, lease_filters(&machine));
    tracing::info!(%url, "websocket subscribed");
    metrics.health().ws_alive(unix_now());
    if again {
        metrics.ws_resubscribed();
    }
    // A change may have happened while (re)connecting.
    wake.notify_one();
    let (end, seen) = follow(&mut events, c.silence, |e| {
        metrics.health().ws_alive(unix_now());
        if e == Event::Change {
            wake.notify_one();
        }
    })
    .await;
    match end {
        End::Silent => tracing::warn!(
            silence_secs = c.silence.as_secs_f64(),
            "websocket feed silent; subscribing anew"
        ),
        End::Closed => tracing::warn!("websocket subscription ended; subscribing anew"),
        End::Relist => tracing::info!("websocket feed followed for its period; subscribing anew"),
    }
    Some(seen > 0)
}

/// The program-account subscriptions that concern one machine: its leases, the spot bids on
/// it, and the market's queue bids (machine field unset).
fn subscriptions(market: &Pubkey, machine: &Pubkey) -> Vec<Vec<RpcFilterType>> {
    let bid = || RpcFilterType::Memcmp(Memcmp::new_raw_bytes(0, Bid::DISCRIMINATOR.to_vec()));
    vec![
        lease_filters(machine),
        vec![
            bid(),
            RpcFilterType::Memcmp(Memcmp::new_raw_bytes(
                BID_MACHINE_OFFSET,
                machine.to_bytes().to_vec(),
            )),
        ],
        vec![
            bid(),
            RpcFilterType::Memcmp(Memcmp::new_raw_bytes(
                BID_MARKET_OFFSET,
                market.to_bytes().to_vec(),
            )),
            RpcFilterType::Memcmp(Memcmp::new_raw_bytes(BID_MACHINE_OFFSET, vec![0; 32])),
        ],
    ]
}

/// The program-account subscriptions of the packing policy's input: every machine and every
/// lease of the market. They wake nothing ([`Event::Market`]).
pub fn market_subscriptions(market: &Pubkey) -> [Vec<RpcFilterType>; 2] {
    [
        accounts_with::<Machine>(MARKET_OFFSET, market),
        accounts_with::<Lease>(MARKET_OFFSET, market),
    ]
}

/// Every subscription of one machine's feed, merged, each notification's account put in
/// `mirror`: its program accounts and the `watched` accounts ([`Event::Change`]; the clock's
/// [`Event::Slot`]).
async fn subscribe_all<'a>(
    client: &'a PubsubClient,
    commitment: CommitmentConfig,
    watched: &BTreeSet<Pubkey>,
    market: &Pubkey,
    machine: &Pubkey,
    mirror: &Arc<Mirror>,
    traffic: &Arc<Traffic>,
) -> Result<BoxStream<'a, Event>, String> {
    // Compressed: a machine account is mostly fixed tables, zero where its GPUs end, and
    // every machine of the market is notified at each of its heartbeats.
    let account_config = RpcAccountInfoConfig {
        encoding: Some(UiAccountEncoding::Base64Zstd),
        commitment: Some(commitment),
        ..Default::default()
    };
    let mut streams: Vec<BoxStream<'a, Event>> = Vec::new();
    let waking = subscriptions(market, machine)
        .into_iter()
        .map(|f| (f, Event::Change));
    let quiet = market_subscriptions(market)
        .into_iter()
        .map(|f| (f, Event::Market));
    for (filters, event) in waking.chain(quiet) {
        let (s, _unsubscribe) = client
            .program_subscribe(
                &gpu_market::ID,
                Some(RpcProgramAccountsConfig {
                    filters: Some(filters),
                    account_config: account_config.clone(),
                    with_context: None,
                    sort_results: None,
                }),
            )
            .await
            .map_err(|e| e.to_string())?;
        let (mirror, traffic) = (mirror.clone(), traffic.clone());
        streams.push(
            s.map(move |r| {
                traffic.websocket(json_len(&r));
                let key = Pubkey::from_str(&r.value.pubkey);
                if let (Ok(key), Some(data)) = (key, account_data(&r.value.account)) {
                    mirror.notified(key, r.context.slot, data);
                }
                event
            })
            .boxed(),
        );
    }
    for &key in watched {
        let (s, _unsubscribe) = client
            .account_subscribe(&key, Some(account_config.clone()))
            .await
            .map_err(|e| e.to_string())?;
        let (mirror, traffic) = (mirror.clone(), traffic.clone());
        let event = match key == solana_sdk_ids::sysvar::clock::ID {
            true => Event::Slot,
            false => Event::Change,
        };
        streams.push(
            s.map(move |r| {
                traffic.websocket(json_len(&r));
                if let Some(data) = account_data(&r.value) {
                    mirror.notified(key, r.context.slot, data);
                }
                event
            })
            .boxed(),
        );
    }
    Ok(merged(streams))
}

/// The subscriptions' streams as one, each ending in [`Event::Lost`]: a node may end one
/// subscription and keep the others (and the clock's slots) going, which would otherwise
/// look like a live feed.
fn merged<'a>(streams: Vec<BoxStream<'a, Event>>) -> BoxStream<'a, Event> {
    let lost = || stream::once(async { Event::Lost });
    stream::select_all(streams.into_iter().map(|s| s.chain(lost()).boxed())).boxed()
}

/// A notified account's data (`None` once it is closed: no lamports left); `None` when it
/// cannot be decoded.
fn account_data(account: &UiAccount) -> Option<Option<Vec<u8>>> {
    match account.lamports {
        0 => Some(None),
        _ => account.data.decode().map(Some),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use futures_util::SinkExt;
    use serde_json::{json, Value};
    use tokio::net::TcpListener;
    use tokio::sync::mpsc;
    use tokio_tungstenite::tungstenite::Message;

    use super::*;
    use crate::metrics::HealthLimits;

    fn channel_stream(rx: mpsc::UnboundedReceiver<Event>) -> impl Stream<Item = Event> + Unpin {
        Box::pin(stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|e| (e, rx))
        }))
    }

    #[tokio::test(start_paused = true)]
    async fn a_feed_silent_for_the_bound_is_given_up_and_changes_wake() {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut events = channel_stream(rx);
        let started = tokio::time::Instant::now();
        let feeder = tokio::spawn(async move {
            tx.send(Event::Change).unwrap();
            tokio::time::sleep(Duration::from_millis(900)).await;
            tx.send(Event::Slot).unwrap();
            tokio::time::sleep(Duration::from_millis(900)).await;
            tx.send(Event::Slot).unwrap();
            // Then silence, the sender kept open: a connection that died without closing.
            tokio::time::sleep(Duration::from_secs(3_600)).await;
            drop(tx);
        });
        let mut seen = Vec::new();
        let (end, count) = follow(&mut events, Duration::from_secs(1), |e| seen.push(e)).await;
        assert_eq!(end, End::Silent);
        assert_eq!(count, 3);
        assert_eq!(seen, vec![Event::Change, Event::Slot, Event::Slot]);
        // Each event restarted the bound: 0.9 + 0.9 + 1.
        assert_eq!(started.elapsed(), Duration::from_millis(2_800));
        feeder.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn one_subscription_that_ends_while_the_others_go_on_ends_the_feed() {
        let (clock, slots) = mpsc::unbounded_channel();
        let (program, changes) = mpsc::unbounded_channel();
        let mut events = merged(vec![
            channel_stream(slots).boxed(),
            channel_stream(changes).boxed(),
        ]);
        let ticker = tokio::spawn(async move {
            loop {
                if clock.send(Event::Slot).is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(400)).await;
            }
        });
        program.send(Event::Change).unwrap();
        tokio::time::sleep(Duration::from_secs(5)).await;
        // The node drops the program subscription; the clock's slots go on. Before, the merged
        // feed looked alive and its accounts stayed in the mirror, no longer followed.
        drop(program);
        let (end, count) = follow(&mut events, Duration::from_secs(1), |_| {}).await;
        assert_eq!(end, End::Closed);
        assert!(count >= 2, "{count}");
        ticker.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_live_feed_is_made_anew_after_its_period() {
        let (clock, slots) = mpsc::unbounded_channel();
        let ticker = tokio::spawn(async move {
            while clock.send(Event::Slot).is_ok() {
                tokio::time::sleep(Duration::from_millis(400)).await;
            }
        });
        let started = tokio::time::Instant::now();
        let mut events = merged(vec![channel_stream(slots).boxed()]);
        let (end, _) = follow(&mut events, Duration::from_secs(1), |_| {}).await;
        assert_eq!((end, started.elapsed()), (End::Relist, RELIST));
        ticker.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_closed_feed_ends_at_once() {
        let (tx, rx) = mpsc::unbounded_channel();
        tx.send(Event::Slot).unwrap();
        drop(tx);
        let (end, count) = follow(&mut channel_stream(rx), Duration::from_secs(1), |_| {}).await;
        assert_eq!((end, count), (End::Closed, 1));
    }

    /// How a fake node treats one connection.
    #[derive(Clone, Copy)]
    enum Node {
        /// Confirms every subscription, sends one slot and one account notification, then
        /// neither reads nor writes again with the connection left open.
        GoesSilent,
        /// Confirms every subscription and sends a slot notification every 100 ms.
        Live,
    }

    /// A websocket server speaking the Solana pubsub protocol, enough for [`watch`]: connection
    /// `i` behaves as `nodes[i]` (the last one for any after).
    async fn fake_node(listener: TcpListener, nodes: Vec<Node>, connections: Arc<AtomicUsize>) {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let i = connections.fetch_add(1, Ordering::SeqCst);
            let node = nodes[i.min(nodes.len() - 1)];
            tokio::spawn(async move {
                let mut ws = tokio_tungstenite::accept_async(tcp).await.unwrap();
                let clock = solana_sdk_ids::sysvar::clock::ID.to_string();
                let (mut clock_sid, mut account_sid) = (None, None);
                // The watcher subscribes 5 program feeds (3 of the machine's, 2 of the
                // market's machines and leases) and 3 accounts: the market, the machine and
                // the clock (the test names no books).
                for _ in 0..8 {
                    let Some(Ok(Message::Text(text))) = ws.next().await else {
                        return;
                    };
                    let request: Value = serde_json::from_str(&text).unwrap();
                    let id = request["id"].as_u64().unwrap();
                    if request["method"] == "accountSubscribe" {
                        match request["params"][0] == clock.as_str() {
                            true => clock_sid = Some(id),
                            false => account_sid = Some(id),
                        }
                    }
                    let reply = json!({"jsonrpc": "2.0", "result": id, "id": id});
                    ws.send(Message::text(reply.to_string())).await.unwrap();
                }
                let account = |sid: u64, slot: u64| {
                    let value = json!({
                        "context": {"slot": slot},
                        "value": {
                            "lamports": 1, "data": ["AQ==", "base64"],
                            "owner": "11111111111111111111111111111111",
                            "executable": false, "rentEpoch": 0, "space": 1,
                        },
                    });
                    let params = json!({"result": value, "subscription": sid});
                    Message::text(
                        json!({"jsonrpc": "2.0", "method": "accountNotification", "params": params})
                            .to_string(),
                    )
                };
                let slot = |n: u64| account(clock_sid.unwrap(), n);
                match node {
                    Node::GoesSilent => {
                        ws.send(slot(10)).await.unwrap();
                        ws.send(account(account_sid.unwrap(), 11)).await.unwrap();
                        // Hold the connection open, unread and unwritten.
                        std::future::pending::<()>().await;
                    }
                    Node::Live => {
                        for n in 20.. {
                            if ws.send(slot(n)).await.is_err() {
                                return;
                            }
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                }
            });
        }
    }

    #[tokio::test]
    async fn a_feed_that_goes_silent_is_subscribed_anew_and_reported_alive_again() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let ws_url = format!("ws://{}/?api-key=s3cret", listener.local_addr().unwrap());
        let connections = Arc::new(AtomicUsize::new(0));
        let node = tokio::spawn(fake_node(
            listener,
            vec![Node::GoesSilent, Node::Live],
            connections.clone(),
        ));
        let metrics = Arc::new(Metrics::new(HealthLimits {
            websocket_silence: Duration::from_secs(1),
            ..HealthLimits::default()
        }));
        let wake = Arc::new(Notify::new());
        let mirror = Arc::new(Mirror::new());
        let watcher = tokio::spawn(watch(
            WatchConfig {
                ws_url: SecretUrl::new(ws_url),
                commitment: CommitmentConfig::confirmed(),
                market: Key([1; 32]),
                machine: Key([2; 32]),
                books: Vec::new(),
                silence: Duration::from_millis(400),
            },
            wake.clone(),
            mirror.clone(),
            metrics.clone(),
        ));
        tokio::time::timeout(Duration::from_secs(5), wake.notified())
            .await
            .expect("the subscription wakes the loop");
        assert!(metrics.health().snapshot().ws_alive.is_some());
        // The first node's notifications land in the mirror: the machine account as notified.
        let machine = pubkey(Key([2; 32]));
        let kept = async {
            while mirror.get(&[machine]).accounts != vec![Some(Some(vec![1]))] {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(5), kept)
            .await
            .expect("the notified machine account is kept");
        // The first node goes silent; the watcher gives up on it after 0.4 s and, 1 s later,
        // subscribes to the second, which stays live.
        let resubscribed = async {
            while !metrics
                .render(unix_now())
                .contains("\ngpu_market_agent_websocket_resubscriptions_total 1\n")
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), resubscribed)
            .await
            .expect("the silent feed is replaced");
        assert_eq!(connections.load(Ordering::SeqCst), 2);
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        assert_eq!(
            connections.load(Ordering::SeqCst),
            2,
            "the live feed is kept"
        );
        metrics.health().engine_reachable(true);
        assert!(metrics.health().assess(unix_now()).websocket.ok);
        // Nothing of the silent feed's is served: the second node never sent the machine.
        assert!(mirror.is_live());
        assert_eq!(mirror.get(&[machine]).missing, vec![machine]);
        let clock = solana_sdk_ids::sysvar::clock::ID;
        assert!(mirror.get(&[clock]).missing.is_empty(), "the clock follows");
        watcher.abort();
        node.abort();
    }
}
