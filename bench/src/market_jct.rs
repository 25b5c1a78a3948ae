//! The Philly replay through the program's own functions (`gpu-market-bench jct`'s second
//! table): the cluster's V100s as 8-GPU `Machine` accounts (two topology groups of four), each
//! job a queue `Bid` of whole GPUs ranked by the key `place_bid` stores (`Market::rank_key`),
//! started by the fit rule `allocate` checks under each machine's reservation
//! (`Machine::offers`, `Offers::for_run`, `Bid::fit`, `MachineData::take`,
//! `Reservation::lease_started`), its GPUs freed as `end_lease` frees them
//! (`MachineData::release`, `Reservation::lease_ended`), reserved as `reserve` reserves
//! (`Machine::reservation_for`) on the machine that starts it soonest, and dropped at its latest
//! start (`Bid::expired`). Clients set deadlines as patient clients would: the longest wait the
//! market allows (`Market::max_wait_secs`, 5 h with the recommended parameters) after
//! arrival, plus the run.
//!
//! A job of more GPUs than a machine has (16 and 32 GPUs) is a gang bid of 8 GPUs on each of 2
//! or 4 machines: it starts on that many machines at once (each part by the same fit rule), and
//! is reserved as `reserve_gang` reserves it (`Machine::gang_reservations`) on the machines
//! that start a part soonest (`placement::gang_start`, as the agents choose them).

use std::collections::BTreeMap;
use std::time::Instant;

use gpu_market::state::{
    Bid, BidData, BidKind, Freed, GpuSpec, GpuTable, Lease, LeaseRules, Machine, MachineData,
    MachineNetwork, MachineStatus, Market, MarketParams, Offers, OverclockTerms, Reservation,
    MAX_GANG_PARTS, MAX_GPUS,
};
use gpu_market_core::fit::Choice;
use gpu_market_sdk::placement::gang_start;
use solana_pubkey::Pubkey;

use crate::philly::Workload;

/// GPUs of one machine (a DGX-1's eight V100s, two NVLink groups of four).
const MACHINE_GPUS: u32 = 8;
const V100_GIB: u16 = 16;
/// A price over any reserve: the replay is about order, not prices.
const PRICE: u64 = 1 << 40;
/// Seconds from the unix epoch of the trace's time 0.
const EPOCH: i64 = 1_700_000_000;

/// How the replay ranks and starts bids.
#[derive(Clone, Copy)]
pub enum Order {
    /// By arrival, the first bid that fits no machine blocking the rest (no reservation).
    Fifo,
    /// By arrival, with reservations: at most `reservations` machines hold the best waiting
    /// bids (`usize::MAX`: one per machine, as the program allows).
    FifoReserving { reservations: usize },
    /// By the program's book key, with reservations as above.
    Program { reservations: usize },
}

impl Order {
    pub fn name(&self) -> String {
        let held = |n: usize| match n {
            usize::MAX => "a reservation per machine".to_string(),
            1 => "one reservation".to_string(),
            n => format!("{n} reservations"),
        };
        match self {
            Order::Fifo => "FIFO (8-GPU machines)".into(),
            Order::FifoReserving { reservations } => {
                format!("FIFO, {}", held(*reservations))
            }
            Order::Program { reservations } => {
                format!("**the market** (book key, {})", held(*reservations))
            }
        }
    }
}

/// What the replay of one order gives: each job's finish in seconds from the trace's start
/// (`None`: never ran: its latest start passed, or it is not servable).
pub struct Played {
    pub name: String,
    pub finish: Vec<Option<f64>>,
    pub wall_s: f64,
}

/// Whether job `j` can be a bid: one machine's GPUs, or a gang's of at most
/// [`MAX_GANG_PARTS`] machines.
pub fn servable(w: &Workload, j: usize) -> bool {
    w.jobs[j].gpus <= MACHINE_GPUS * MAX_GANG_PARTS as u32
}

/// The machines (parts) job `j` runs on at once, and its GPUs on each.
fn parts(gpus: u32) -> (u8, u8) {
    let parts = gpus.div_ceil(MACHINE_GPUS);
    (parts as u8, gpus.div_ceil(parts) as u8)
}

fn machines(gpus: u32) -> Vec<Machine> {
    (0..gpus.div_ceil(MACHINE_GPUS))
        .map(|m| {
            let n = MACHINE_GPUS.min(gpus - m * MACHINE_GPUS) as usize;
            let mut table = [GpuSpec::default(); MAX_GPUS];
            for (i, g) in table.iter_mut().enumerate().take(n) {
                *g = GpuSpec {
                    uuid: [i as u8 + 1; 16],
                    class: 0,
                    topology_group: i as u8 / 4,
                    memory_gib: V100_GIB,
                    power_w: [100, 300],
                    ..GpuSpec::default()
                };
            }
            Machine {
                data: MachineData {
                    gpu_count: n as u8,
                    gpus: GpuTable(table),
                    last_heartbeat: EPOCH,
                    ..MachineData::default()
                },
                status: MachineStatus::Active,
                network: MachineNetwork::default(),
                fault: None,
            }
        })
        .collect()
}

/// The address standing for job `j`'s bid account.
fn key(j: usize) -> Pubkey {
    let mut k = [0u8; 32];
    k[..8].copy_from_slice(&(j as u64 + 1).to_le_bytes());
    Pubkey::new_from_array(k)
}

/// The address standing for machine `m`'s account.
fn machine_key(m: usize) -> Pubkey {
    let mut k = [0u8; 32];
    k[8..16].copy_from_slice(&(m as u64 + 1).to_le_bytes());
    Pubkey::new_from_array(k)
}

/// Job `j`'s queue bid, placed at `at` with `base` score, ranked by `order`.
fn bid(market: &Market, w: &Workload, j: usize, at: i64, base: u64, order: Order) -> Bid {
    let job = &w.jobs[j];
    // A bid runs one billing interval at least.
    let secs = (job.work.ceil() as u32).max(market.params.billing_interval_secs);
    let latest_start = at + market.max_wait_secs() as i64;
    let book_key = match order {
        Order::Program { .. } => market.rank_key(base, at, secs),
        Order::Fifo | Order::FifoReserving { .. } => 0,
    };
    let (parts, gpu_count) = parts(job.gpus);
    Bid::queue(
        BidData {
            gpu_count,
            parts,
            gib_per_gpu: V100_GIB,
            accepted_classes: 1,
            price: PRICE,
            max_duration_secs: secs,
            min_duration_secs: secs,
            deadline: latest_start + secs as i64,
            placed_at: at,
            book_key,
            seq: j as u64,
            ..BidData::default()
        },
        OverclockTerms {
            power_limit_w: 300,
            ..OverclockTerms::default()
        },
    )
}

/// Whole GPUs of `m` no lease holds: a cheap bound before the fit rule.
fn idle_gpus(m: &Machine) -> u32 {
    (0..m.gpu_count as usize)
        .filter(|&g| m.used_gib[g] == 0)
        .count() as u32
}

/// The replay's book: (rank key, job) in book order, and each waiting job's bid.
type Book = BTreeMap<(std::cmp::Reverse<u64>, usize), Bid>;

struct Replay<'a> {
    w: &'a Workload,
    market: Market,
    machines: Vec<Machine>,
    /// Per machine, its running leases with their job.
    running: Vec<Vec<(usize, Lease)>>,
    /// The book: (rank key, job) in book order, and each waiting job's bid.
    book: Book,
    order: Order,
    finish: Vec<Option<f64>>,
}

impl Replay<'_> {
    /// Frees every lease ended by `now` as `end_lease` does.
    fn end_leases(&mut self, now: i64) {
        for (m, leases) in self.running.iter_mut().enumerate() {
            let machine = &mut self.machines[m];
            leases.retain(|(j, l)| {
                if l.ends_at > now {
                    return true;
                }
                machine
                    .release(l.gpus(), l.gib_per_gpu, l.host(), false)
                    .expect("a lease frees what it took");
                machine
                    .reservation
                    .lease_ended(l.ends_at, l.host())
                    .expect("a reservation's count");
                self.finish[*j] = Some((l.ends_at - EPOCH) as f64);
                false
            });
        }
    }

    /// Starts what the program lets start at `now`, best first: each bid on the first machine
    /// whose offer to its run fits it, a gang on the first machines that each fit a part (as an
    /// agent's `allocate` or `allocate_gang` would be accepted: no better entry fits those
    /// machines, as each better one was tried first).
    fn allocate(&mut self, now: i64) {
        let mut idle: Vec<u32> = self.machines.iter().map(idle_gpus).collect();
        // Each machine's offers, built when first asked and again after each start there.
        let mut offers: Vec<Option<Offers>> = self.machines.iter().map(|_| None).collect();
        let mut started = Vec::new();
        // Out of `self` while it is walked: starting a bid changes the machines.
        let book = std::mem::take(&mut self.book);
        for (&(rank, j), b) in &book {
            let mut fit: Vec<(usize, Choice)> = Vec::new();
            for m in 0..self.machines.len() {
                if fit.len() == b.parts as usize {
                    break;
                }
                if idle[m] < b.gpu_count as u32 {
                    continue;
                }
                let machine = &self.machines[m];
                let offered = offers[m].get_or_insert_with(|| {
                    machine
                        .offers(&self.market, BidKind::Queue, now, &Freed::default())
                        .expect("an offer")
                });
                if let Ok(choice) = b.fit(offered.for_run(&key(j), b.runs_until(now))) {
                    fit.push((m, choice));
                }
            }
            if fit.len() == b.parts as usize {
                for (part, (m, choice)) in fit.into_iter().enumerate() {
                    self.start(m, (j, b, part as u8), &choice, now);
                    idle[m] = idle_gpus(&self.machines[m]);
                    offers[m] = None;
                }
                started.push((rank, j));
            } else if matches!(self.order, Order::Fifo) {
                break;
            }
        }
        self.book = book;
        for k in started {
            self.book.remove(&k);
        }
    }

    /// Starts part `part` of job `j`'s bid `b` on machine `m`'s GPUs `choice` at `now`, as
    /// `allocate` (or `allocate_gang`) does there.
    fn start(&mut self, m: usize, (j, b, part): (usize, &Bid, u8), choice: &Choice, now: i64) {
        let grace = self.market.silence_window_secs();
        let machine = &mut self.machines[m];
        let host = machine.lease_host(b.host(), b.gpu_count, b.gib_per_gpu);
        let ends_at = now + b.max_duration_secs as i64;
        let mut l = Lease::of_bid(
            (Pubkey::default(), machine_key(m), key(j)),
            b,
            (choice.gpus(), host),
            (now, ends_at),
            LeaseRules::of(&self.market.params),
            0,
        );
        (l.part, l.parts) = (part, b.parts);
        machine
            .take(choice.gpus(), b.gib_per_gpu, host, false, |i| b.terms_of(i))
            .expect("the fit rule's choice");
        machine
            .reservation
            .lease_started(&key(j), (l.ends_at, host), now, grace)
            .expect("a reservation's count");
        self.running[m].push((j, l));
    }

    /// Reserves as the agents do: the best waiting bids no machine holds, each on the machine
    /// without a reservation that starts it soonest, up to the order's number of reservations.
    fn reserve(&mut self, now: i64) {
        let most = match self.order {
            Order::Fifo => return,
            Order::FifoReserving { reservations } | Order::Program { reservations } => reservations,
        };
        let grace = self.market.silence_window_secs();
        // A reservation whose bid started elsewhere or left holds nothing: its machine's agent
        // clears it (`unreserve`).
        let waiting: std::collections::HashSet<Pubkey> =
            self.book.keys().map(|&(_, j)| key(j)).collect();
        for m in &mut self.machines {
            if m.reservation.is_set() && !waiting.contains(&m.reservation.bid) {
                m.reservation = Reservation::default();
            }
        }
        let mut held: Vec<Pubkey> = Vec::new();
        for m in &self.machines {
            if m.reservation.binds(now, grace) && !held.contains(&m.reservation.bid) {
                held.push(m.reservation.bid);
            }
        }
        // Out of `self` while it is walked: reserving changes the machines.
        let book = std::mem::take(&mut self.book);
        self.reserve_walk(&book, held, most, now);
        self.book = book;
    }

    /// [`Replay::reserve`]'s walk of the `book`, best first, with the bids `held` now, up to
    /// `most` of them.
    fn reserve_walk(&mut self, book: &Book, mut held: Vec<Pubkey>, most: usize, now: i64) {
        let grace = self.market.silence_window_secs();
        for (&(_, j), b) in book {
            if held.len() >= most {
                return;
            }
            if held.contains(&key(j)) {
                continue;
            }
            if b.is_gang() {
                // A gang holds no other bid back: one that cannot be reserved in time leaves
                // the next entry its turn.
                if self.reserve_gang(j, b, now) {
                    held.push(key(j));
                }
                continue;
            }
            let mut soonest: Option<(usize, Reservation)> = None;
            for (m, machine) in self.machines.iter().enumerate() {
                if machine.reservation.binds(now, grace) {
                    continue;
                }
                let leases: Vec<Lease> = self.running[m].iter().map(|(_, l)| l.clone()).collect();
                let r = machine
                    .reservation_for(&self.market, (key(j), b), now, &leases)
                    .expect("a reservation's count");
                if let Some(r) = r.filter(|r| r.start > now) {
                    if soonest.as_ref().is_none_or(|(_, s)| r.start < s.start) {
                        soonest = Some((m, r));
                    }
                }
            }
            // The best unheld bid cannot be reserved anywhere in time: the program refuses any
            // below it that these machines could run.
            let Some((m, r)) = soonest else {
                return;
            };
            self.machines[m].reservation = r;
            held.push(key(j));
        }
    }

    /// Reserves gang bid `b` of job `j` as the agents do: on the machines no reservation holds
    /// that can start a part soonest (`placement::gang_start`), each from the gang's start
    /// (`Machine::gang_reservations`, what `reserve_gang` writes). Whether it did: not where it
    /// cannot start in time, or could start now.
    fn reserve_gang(&mut self, j: usize, b: &Bid, now: i64) -> bool {
        let grace = self.market.silence_window_secs();
        let open: Vec<(Pubkey, Machine)> = self
            .machines
            .iter()
            .enumerate()
            .filter(|(_, m)| !m.reservation.binds(now, grace))
            .map(|(m, machine)| (machine_key(m), machine.clone()))
            .collect();
        let leases: Vec<Lease> = self
            .running
            .iter()
            .flatten()
            .map(|(_, l)| l.clone())
            .collect();
        let Some((start, on)) = gang_start(&self.market, b, now, &open, &leases) else {
            return false;
        };
        if start <= now {
            return false;
        }
        let at: Vec<usize> = on
            .iter()
            .map(|k| {
                (0..self.machines.len())
                    .find(|&m| machine_key(m) == *k)
                    .expect("a machine")
            })
            .collect();
        let running: Vec<Vec<Lease>> = at
            .iter()
            .map(|&m| self.running[m].iter().map(|(_, l)| l.clone()).collect())
            .collect();
        let parts: Vec<(&Machine, &[Lease])> = at
            .iter()
            .zip(&running)
            .map(|(&m, l)| (&self.machines[m], &l[..]))
            .collect();
        let (_, reservations) = Machine::gang_reservations(&self.market, (key(j), b), now, &parts)
            .expect("a reservation's count")
            .expect("every part starts in time (gang_start)");
        for (m, r) in at.into_iter().zip(reservations) {
            self.machines[m].reservation = r;
        }
        true
    }
}

/// Replays the servable jobs of `w` (stake tier of each virtual cluster `tier`, base score
/// `base(job)`) in `order`, in a market opened with `params`.
pub fn play(
    w: &Workload,
    params: MarketParams,
    base: impl Fn(usize) -> u64,
    order: Order,
) -> Played {
    let start = Instant::now();
    let n = w.jobs.len();
    let mut r = Replay {
        w,
        machines: machines(w.gpus),
        running: vec![Vec::new(); w.gpus.div_ceil(MACHINE_GPUS) as usize],
        book: BTreeMap::new(),
        market: Market::opening(params),
        order,
        finish: vec![None; n],
    };
    let arrivals: Vec<usize> = (0..n).filter(|&j| servable(w, j)).collect();
    let at = |j: usize| EPOCH + w.jobs[j].arrival.ceil() as i64;
    let mut next = 0;
    loop {
        let next_arrival = arrivals.get(next).map(|&j| at(j));
        let next_end = r.running.iter().flatten().map(|(_, l)| l.ends_at).min();
        let next_expiry = r.book.values().map(|b| b.latest_start() + 1).min();
        let Some(now) = [next_arrival, next_end, next_expiry]
            .into_iter()
            .flatten()
            .min()
        else {
            break;
        };
        r.end_leases(now);
        while let Some(&j) = arrivals.get(next).filter(|&&j| at(j) <= now) {
            let b = bid(&r.market, r.w, j, now, base(j), order);
            r.book.insert((std::cmp::Reverse(b.book_key), j), b);
            next += 1;
        }
        // Expired bids leave the book (anyone may prune them); they never run.
        r.book.retain(|_, b| !b.expired(now));
        r.allocate(now);
        r.reserve(now);
    }
    Played {
        name: order.name(),
        finish: r.finish,
        wall_s: start.elapsed().as_secs_f64(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::philly::Job;

    fn recommended() -> MarketParams {
        crate::replay::market().params
    }

    /// One 8-GPU machine: a 6-GPU hour from 0, an 8-GPU hour from 10 s, a 2-GPU three hours from
    /// 20 s and a 2-GPU half hour from 30 s.
    fn workload() -> Workload {
        let job = |gpus, arrival, work| Job {
            vc: 0,
            gpus,
            arrival,
            work,
        };
        Workload {
            vcs: vec!["vc".into()],
            jobs: vec![
                job(6, 0.0, 3_600.0),
                job(8, 10.0, 3_600.0),
                job(2, 20.0, 10_800.0),
                job(2, 30.0, 1_800.0),
            ],
            gpus: 8,
            derived: 0,
        }
    }

    /// With a reservation the 8-GPU job starts when the 6-GPU one ends, the half hour backfills
    /// beside it, and the three hours, which would delay it, waits; strict FIFO holds the half
    /// hour behind the 8-GPU job.
    #[test]
    fn the_big_job_starts_at_its_reservation_and_only_what_ends_by_then_backfills() {
        let w = workload();
        let finish = |order| play(&w, recommended(), |_| 0, order).finish;
        let reserving = finish(Order::Program { reservations: 1 });
        assert_eq!(
            reserving,
            vec![
                Some(3_600.0),
                Some(7_200.0),
                Some(7_200.0 + 10_800.0),
                Some(30.0 + 1_800.0)
            ]
        );
        let fifo = finish(Order::Fifo);
        assert_eq!(fifo[1], Some(7_200.0));
        assert_eq!(fifo[3], Some(7_200.0 + 1_800.0), "behind the 8-GPU job");
    }

    /// Two 8-GPU machines and a 16-GPU job, a gang of both: reserved on both from when the
    /// 6-GPU hour on the first ends, it starts then; the half hour backfills on the idle second
    /// machine, and the three hours, which would delay it on either, waits for it to end.
    #[test]
    fn a_gang_starts_at_its_reservation_on_both_machines_and_only_what_ends_by_then_backfills() {
        let mut w = workload();
        w.gpus = 16;
        w.jobs[1].gpus = 16;
        let finish = |order| play(&w, recommended(), |_| 0, order).finish;
        assert_eq!(
            finish(Order::Program { reservations: 1 }),
            vec![
                Some(3_600.0),
                Some(7_200.0),
                Some(7_200.0 + 10_800.0),
                Some(30.0 + 1_800.0)
            ]
        );
    }
}
