//! `gpu-market-bench policy [--traces DIR]`: the packing policy's own CPU time as an agent and
//! `gpu-market bid explain` spend it, at the market sizes of issue 33. It runs
//! `sdk::placement::MarketPlacement`, the code both run, over openb's 1,213 machines and over
//! 10,000 (openb's nodes repeated), about two thirds of their GPU memory leased (the trace's
//! pods, first fit, as `Machine::take` holds them at `allocate`) and a queue book of 4,096 of
//! its further pods: the time to build the policy's view of the market (once per change of the
//! machines, the leases or the book: what the agent recomputes) and to place one bid on it
//! (for each bid that fits the agent's machine), and a bid sealed to 100 machines as an agent
//! without a copy computes it (the holders' placement and its own turn after theirs); and the
//! memory it takes: the accounts' data an agent's mirror holds, and this process's resident
//! growth with them decoded and the view built.

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use anchor_lang::Space;
use gpu_market::state::{Bid, BookLeaf, Freed, Lease, LeaseRules, Machine, Market};
use gpu_market_core::fit::Offer;
use gpu_market_sdk::placement::{Changes, MarketPlacement, Sealed, RELEARN_SECS};
use solana_pubkey::Pubkey;

use crate::replay::{self, NOW};
use crate::throughput::status_kib;
use crate::trace;

/// Market sizes measured: openb's own, and the issue's.
const SIZES: [usize; 2] = [1_213, 10_000];
/// The share of the machines' GPU memory leased before measuring.
const LEASED: f64 = 2.0 / 3.0;
/// Entries of the queue book (its capacity).
const QUEUE: usize = 4_096;
/// Bids placed on the built view, each timed.
const PLACED: usize = 1_000;
/// Builds of the view timed (the median is reported).
const BUILDS: usize = 5;
/// An attacker's one-off bids asked about once each (single bids, then 2-part gangs).
const ONE_OFF_ASKED: usize = 300;
/// The machines a sealed bid's environment is sealed to, and the sealed bids placed.
const SEALED_TO: usize = 100;
const SEALED_PLACED: usize = 200;

/// A key for the `i`-th account of kind `tag`.
fn key(tag: u8, i: usize) -> Pubkey {
    let mut k = [0u8; 32];
    k[0] = tag;
    k[1..9].copy_from_slice(&(i as u64).to_le_bytes());
    Pubkey::new_from_array(k)
}

/// The lease `allocate` writes for `bid` on `machine`'s `gpus` (`Lease::of_bid`), its client
/// and image the `i`-th of the replay's.
fn lease(market: &Market, machine: Pubkey, bid: &Bid, i: usize, gpus: &[u8]) -> Lease {
    Lease {
        client: key(3, i),
        image_digest: [(i % 64) as u8; 32],
        escrow: 0,
        ..Lease::of_bid(
            (key(0, 0), machine, key(2, i)),
            bid,
            (gpus, bid.host()),
            (NOW, NOW + bid.max_duration_secs as i64),
            LeaseRules::of(&market.params),
            255,
        )
    }
}

/// A leased market: its machines, their leases, and the pods left as bids.
struct Leased {
    machines: Vec<(Pubkey, Machine)>,
    leases: Vec<Lease>,
    left: Vec<Bid>,
}

/// A market of `n` machines (openb's nodes in turn) leased to [`LEASED`] of its GPU memory by
/// the trace's pods, first fit from a moving start; the pods left, as bids.
fn leased(
    market: &Market,
    nodes: &[gpu_market_core::placement::Node],
    pods: &[gpu_market_core::placement::Pod],
    n: usize,
) -> Result<Leased, String> {
    let mut machines: Vec<(Pubkey, Machine)> = (0..n)
        .map(|i| (key(1, i), replay::machine(&nodes[i % nodes.len()])))
        .collect();
    let offer = |m: &Machine| -> Result<Offer, String> {
        m.offer(
            market,
            gpu_market::state::BidKind::Queue,
            NOW,
            &Freed::default(),
        )
        .map_err(|e| e.to_string())
    };
    let mut offers: Vec<Offer> = machines
        .iter()
        .map(|(_, m)| offer(m))
        .collect::<Result<_, _>>()?;
    let capacity: f64 = machines
        .iter()
        .map(|(_, m)| m.gpus().iter().map(|g| g.memory_gib as f64).sum::<f64>())
        .sum();
    let (mut held, mut leases, mut left) = (0.0, Vec::new(), Vec::new());
    let mut start = 0;
    for (i, pod) in pods.iter().cycle().enumerate() {
        let bid = replay::bid(pod);
        if held >= LEASED * capacity || i >= 20 * pods.len() {
            left.push(bid);
            if left.len() >= QUEUE + PLACED {
                break;
            }
            continue;
        }
        // First fit from where the last one landed: the market's machines fill in turn.
        let found = (0..n)
            .map(|d| (start + d) % n)
            .find_map(|j| bid.fit(&offers[j]).ok().map(|c| (j, c.gpus().to_vec())));
        let Some((j, gpus)) = found else { continue };
        let (k, m) = &mut machines[j];
        m.take(&gpus, bid.gib_per_gpu, bid.host(), false, |g| {
            bid.terms_of(g)
        })
        .map_err(|e| e.to_string())?;
        offers[j] = offer(m)?;
        held += (gpus.len() * bid.gib_per_gpu as usize) as f64;
        leases.push(lease(market, *k, &bid, leases.len(), &gpus));
        start = j;
    }
    Ok(Leased {
        machines,
        leases,
        left,
    })
}

/// How many looks at the books [`kept_looks`] times: a second apart, all within one
/// `RELEARN_SECS` period of the view's build.
const LOOKS: usize = 30;
/// Machines whose accounts change in a second of a market of 10,000 (each proves its leases
/// every two 60 s intervals and heartbeats between), and leases that end in it (46,000 leases
/// of two hours on average).
const CHANGED_PER_SECOND: usize = 100;
const ENDED_PER_SECOND: usize = 6;

/// The kept view ([`MarketPlacement::update`]) at a look a second for [`LOOKS`] seconds: each
/// look brings a second's changes ([`CHANGED_PER_SECOND`] machines heard from, each with its
/// leases proven again, and [`ENDED_PER_SECOND`] of them with one lease fewer), then places one
/// bid. Milliseconds of each update, and of each look (update and placement).
fn kept_looks(
    market: &Market,
    view: &mut MarketPlacement,
    machines: &[(Pubkey, Machine)],
    leases: &[Lease],
    bids: &[Bid],
    queue: &[BookLeaf],
) -> Result<Looks, String> {
    let mut on: HashMap<Pubkey, Vec<Lease>> = HashMap::new();
    for l in leases {
        on.entry(l.machine).or_default().push(l.clone());
    }
    let (mut updates, mut looks) = (Vec::new(), Vec::new());
    for (j, bid) in bids.iter().take(LOOKS).enumerate() {
        let now = NOW + 1 + j as i64;
        let mut changes = Changes::default();
        for c in 0..CHANGED_PER_SECOND {
            let (k, m) = &machines[(j * CHANGED_PER_SECOND + c) % machines.len()];
            let mut m = m.clone();
            m.last_heartbeat = now;
            let mut proven: Vec<Lease> = on.get(k).cloned().unwrap_or_default();
            for (i, l) in proven.iter_mut().enumerate() {
                l.proof_hash = [1 + (j % 200) as u8; 32];
                l.utilisation_bps = ((i * 997 + j * 31) % 10_000) as u16;
            }
            match (c < ENDED_PER_SECOND).then(|| proven.pop()).flatten() {
                Some(ended) => {
                    m.release(ended.gpus(), ended.gib_per_gpu, ended.host(), false)
                        .map_err(|e| e.to_string())?;
                    m.leases = m.leases.saturating_sub(1);
                    changes.machine_leases.push((*k, proven));
                }
                None => changes.leases.extend(proven),
            }
            changes.machines.push((*k, m));
        }
        let t = Instant::now();
        view.update(market, now, changes, queue)?;
        let updated = t.elapsed().as_secs_f64() * 1e3;
        let ((), placed) = timed(|| {
            view.place(bid, Sealed::No);
        });
        updates.push(updated);
        looks.push(updated + placed);
    }
    updates.sort_by(f64::total_cmp);
    looks.sort_by(f64::total_cmp);
    // The next minute of the chain's clock: the workload learned again.
    let next = (NOW / RELEARN_SECS + 1) * RELEARN_SECS;
    let t = Instant::now();
    view.update(market, next, Changes::default(), queue)?;
    let relearned = t.elapsed().as_secs_f64() * 1e3;
    // That look's bid: every request shape's index is built again after learning.
    let ((), placed) = timed(|| {
        if let Some(bid) = bids.get(LOOKS) {
            view.place(bid, Sealed::No);
        }
    });
    Ok(Looks {
        updates,
        looks,
        relearned,
        relearned_look: relearned + placed,
    })
}

/// What [`kept_looks`] measured, in milliseconds: each update, each look, the update that
/// learned the workload again and the look it fell on (that update, then one bid).
struct Looks {
    updates: Vec<f64>,
    looks: Vec<f64>,
    relearned: f64,
    relearned_look: f64,
}

/// Milliseconds of `f`.
fn timed<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let t = Instant::now();
    let out = f();
    (out, t.elapsed().as_secs_f64() * 1e3)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

pub fn main(traces: &Path) -> Result<(), String> {
    let trace = trace::load(traces)?;
    let market = replay::market();
    println!("The packing policy (`sdk::placement::MarketPlacement`) over openb's machines, {:.0} % of their GPU memory leased, a queue book of {QUEUE} bids (the trace's next, or an attacker's one-off shapes); one core, release build:\n", LEASED * 100.0);
    println!("| machines | queue | leases | build the view (median of {BUILDS}) | place one bid: mean | p50 | p99 | most | bids placed of {PLACED} | a bid sealed to {SEALED_TO} machines, placed and a non-holder's turn: mean | most | kept view, a second's changes: p50 | most | a look (changes, then one bid): mean | p99 | most | the workload learned again (each minute) | the look it falls on | accounts' data | resident memory |");
    println!(
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    let mut asked = Vec::new();
    for n in SIZES {
        let resident_before = status_kib("VmRSS:");
        let leased = leased(&market, &trace.nodes, &trace.arrivals, n)?;
        let (queued, placing) = leased.left.split_at(QUEUE.min(leased.left.len()));
        let one_off = one_off_bids(queued.first().ok_or("no bid left to queue")?);
        for (label, queued) in [("trace", queued), ("one-off shapes", &one_off[..])] {
            let queue: Vec<BookLeaf> = queued
                .iter()
                .enumerate()
                .map(|(i, b)| BookLeaf {
                    bid: key(4, i),
                    book_key: 0,
                    seq: i as u64,
                    summary: b.summary(0),
                })
                .collect();
            let row = Row {
                market: &market,
                leased: &leased,
                queue: &queue,
                placing,
            };
            let cells = row.measure()?;
            let resident = status_kib("VmRSS:").zip(resident_before).map_or(
                "?".to_string(),
                |(after, before)| {
                    format!("{:.1} MiB", after.saturating_sub(before) as f64 / 1024.0)
                },
            );
            println!("| {n} | {label} | {cells} | {resident} |");
            if label == "one-off shapes" {
                asked.extend(row.one_off_asked(n)?);
            }
        }
    }
    println!("\nAn attacker's one-off shapes asked about once each ({ONE_OFF_ASKED} single bids, then {ONE_OFF_ASKED} gangs of 2 machines), on a view built with the one-off queue; each new request shape builds an index the view keeps, at most `MAX_SHAPE_INDEXES` ({}):\n", gpu_market_core::placement::MAX_SHAPE_INDEXES);
    println!("| machines | bids | asked: mean | all | shape indexes held |");
    println!("|---:|---|---:|---:|---:|");
    for line in asked {
        println!("{line}");
    }
    Ok(())
}

/// An attacker's queue: [`QUEUE`] one-GPU bids of `template`, each of its own shape (a GiB
/// from 1 to 63 and its own CPU request), so that no two are alike: the long tail that would
/// make every shape typical and the packing plan as large as the book allows.
fn one_off_bids(template: &Bid) -> Vec<Bid> {
    (0..QUEUE)
        .map(|i| {
            let mut bid = template.clone();
            bid.gpu_count = 1;
            bid.gib_per_gpu = 1 + (i % 63) as u16;
            bid.cpu_milli = 100 + i as u32;
            bid
        })
        .collect()
}

/// One row of the table: a market, its queue book and the bids to place.
struct Row<'a> {
    market: &'a Market,
    leased: &'a Leased,
    queue: &'a [BookLeaf],
    placing: &'a [Bid],
}

impl Row<'_> {
    /// The rows of the one-off table at `n` machines: [`ONE_OFF_ASKED`] of the queue's bids
    /// placed, then as many more as gangs of 2, on a view built afresh.
    fn one_off_asked(&self, n: usize) -> Result<Vec<String>, String> {
        let (machines, leases) = (self.leased.machines.clone(), self.leased.leases.clone());
        let mut view = MarketPlacement::new(self.market, NOW, machines, leases, self.queue)?;
        let template = self.placing.first().ok_or("no bid to place")?;
        let one_off = one_off_bids(template);
        let mut rows = Vec::new();
        for (label, parts, skip) in [("single", 1, 0), ("gang of 2", 2, ONE_OFF_ASKED)] {
            let mut total = 0.0;
            for bid in one_off.iter().skip(skip).take(ONE_OFF_ASKED) {
                let mut bid = bid.clone();
                bid.data.parts = parts;
                let ((), ms) = timed(|| match parts {
                    1 => drop(view.place(&bid, Sealed::No)),
                    _ => drop(view.place_gang(&bid, Sealed::No)),
                });
                total += ms;
            }
            rows.push(format!(
                "| {n} | {label} | {:.2} ms | {total:.0} ms | {} |",
                total / ONE_OFF_ASKED as f64,
                view.shapes_indexed()
            ));
        }
        Ok(rows)
    }

    /// The row's cells from the leases to the accounts' data, in the table's order.
    fn measure(&self) -> Result<String, String> {
        let Row {
            market,
            leased,
            queue,
            placing,
        } = *self;
        let (machines, leases) = (&leased.machines, &leased.leases);
        let mut builds = Vec::new();
        let mut view = None;
        for _ in 0..BUILDS {
            // The agent decodes the accounts into the vector it hands over: not timed here.
            let (owned, leases) = (machines.clone(), leases.clone());
            let (v, ms) = timed(|| MarketPlacement::new(market, NOW, owned, leases, queue));
            builds.push(ms);
            view = Some(v?);
        }
        builds.sort_by(f64::total_cmp);
        let mut view = view.ok_or("no build")?;
        let mut times = Vec::new();
        let mut placed = 0;
        for bid in placing.iter().take(PLACED) {
            let (p, ms) = timed(|| view.place(bid, Sealed::No));
            placed += p.is_some() as usize;
            times.push(ms);
        }
        times.sort_by(f64::total_cmp);
        let mean = times.iter().sum::<f64>() / times.len().max(1) as f64;
        let sealed_times = sealed(&mut view, machines, placing)?;
        let Looks {
            updates,
            looks,
            relearned,
            relearned_look,
        } = kept_looks(market, &mut view, machines, leases, placing, queue)?;
        let sealed_mean = sealed_times.iter().sum::<f64>() / sealed_times.len().max(1) as f64;
        // What the agent's mirror holds of the market (the accounts' bytes, as the node serves
        // them), and what this process holds with the decoded accounts, the queue and the view.
        let data = machines.len() * (8 + Machine::INIT_SPACE)
            + leases.len() * (8 + Lease::INIT_SPACE)
            + QUEUE * std::mem::size_of::<BookLeaf>();
        Ok(format!(
            "{} | {:.1} ms | {mean:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms | {placed} | {sealed_mean:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms | {relearned:.1} ms | {relearned_look:.1} ms | {:.1} MiB",
            leases.len(),
            percentile(&builds, 0.5),
            percentile(&times, 0.5),
            percentile(&times, 0.99),
            times.last().copied().unwrap_or(0.0),
            sealed_times.last().copied().unwrap_or(0.0),
            percentile(&updates, 0.5),
            updates.last().copied().unwrap_or(0.0),
            looks.iter().sum::<f64>() / looks.len().max(1) as f64,
            percentile(&looks, 0.99),
            looks.last().copied().unwrap_or(0.0),
            data as f64 / (1 << 20) as f64,
        ))
    }
}

/// Milliseconds of each sealed bid, as an agent without a copy computes it: where the
/// holders' turn goes, and its own turn after theirs; sorted.
fn sealed(
    view: &mut MarketPlacement,
    machines: &[(Pubkey, Machine)],
    placing: &[Bid],
) -> Result<Vec<f64>, String> {
    let holders: Vec<Pubkey> = machines
        .iter()
        .step_by((machines.len() / SEALED_TO).max(1))
        .take(SEALED_TO)
        .map(|(k, _)| *k)
        .collect();
    let outsider = machines
        .iter()
        .map(|(k, _)| *k)
        .find(|k| !holders.contains(k))
        .ok_or("every machine holds a copy")?;
    let mut sealed_times = Vec::new();
    for bid in placing.iter().take(SEALED_PLACED) {
        let ((), ms) = timed(|| {
            let sealed = Sealed::To(&holders);
            if let Some(p) = view.place(bid, sealed) {
                view.turn(bid, &p, &outsider, sealed);
            }
        });
        sealed_times.push(ms);
    }
    sealed_times.sort_by(f64::total_cmp);
    Ok(sealed_times)
}
