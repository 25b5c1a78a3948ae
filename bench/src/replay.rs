//! `gpu-market-bench replay`: the FGD protocol on the openb trace (see fgd.rs) played through the
//! market's own code instead of a placement policy of the bench: each pod becomes a program
//! `Bid`, each node a program `Machine` account, `Machine::offer` and `Bid::fit` (the one fit
//! rule `allocate` checks) say where it fits and which GPUs it gets there, and
//! `Machine::take` holds them, as `allocate` does. Which machine takes a bid is today's market
//! rule: every agent whose machine fits the bid races to allocate it, so a random one of them
//! wins. Beside it, the bench's policies on the same arrivals.
//!
//! GPU memory stands for the trace's GPU milli: the replay's GPUs declare 1,000 GiB, so a bid
//! for 500 GiB a GPU is a pod asking half a GPU. The trace's 1,088 pods without a GPU keep their
//! CPU and memory demand (the protocol's), placed by the same fit rule with no GPU, though
//! `place_bid` refuses such a bid.

use std::collections::VecDeque;
use std::path::Path;
use std::time::Instant;

use gpu_market::state::{
    Bid, BidData, BidKind, Freed, GpuSpec, GpuTable, Machine, MachineData, MachineNetwork,
    MachineStatus, Market, MarketParams, OverclockTerms, MAX_GPUS,
};
use gpu_market_core::fit::{Need, Offer};
use gpu_market_core::placement::{
    counted, Affinity, Chosen, Demand, ModelId, ModelSet, Node, Placer, Pod, Seat, SplitMix64,
    Tenant,
};

use crate::fgd::{self, POINTS};
use crate::trace;

/// GiB a replay GPU declares: one per GPU milli of the trace.
const GPU_GIB: u16 = 1_000;
/// The clock of the replay (the bids never expire).
pub(crate) const NOW: i64 = 1_700_000_000;
/// A price over any reserve: the replay is about placement, not prices.
const PRICE: u64 = 1 << 40;
/// Agents racing for each bid: seeds of the winner's draw; also the resampled orders.
const SEEDS: u64 = 4;
/// How many bids behind the chain the agents' view is, in the late-view replays.
const LAGS: [usize; 3] = [0, 8, 64];

/// A market with the recommended parameters, as `init_market` opens it.
pub(crate) fn market() -> Market {
    Market::opening(MarketParams::recommended(60, 250, 3_600))
}

/// The machine account of a trace node: its GPUs of the node's model (the class), 1,000 GiB
/// each, one topology group, and the node's CPU and memory for its leases.
pub(crate) fn machine(node: &Node) -> Machine {
    let mut gpus = [GpuSpec::default(); MAX_GPUS];
    for (i, g) in gpus.iter_mut().enumerate().take(node.num_gpus() as usize) {
        *g = GpuSpec {
            uuid: [i as u8 + 1; 16],
            class: node.model().0,
            topology_group: 0,
            memory_gib: GPU_GIB,
            power_w: [100, 400],
            ..GpuSpec::default()
        };
    }
    Machine {
        data: MachineData {
            gpu_count: node.num_gpus(),
            gpus: GpuTable(gpus),
            last_heartbeat: NOW,
            cpu_milli: node.cpu_capacity(),
            memory_mib: node.memory_capacity(),
            ..MachineData::default()
        },
        status: MachineStatus::Active,
        network: MachineNetwork::default(),
        fault: None,
    }
}

/// The GPU classes a pod accepts: the models of its `gpu_spec` (a machine's class is its
/// model's id, [`machine`]), or every class when it names none.
fn accepted_classes(spec: ModelSet) -> u8 {
    (0..8u8)
        .filter(|&c| spec.allows(ModelId(c)))
        .fold(0, |m, c| m | 1 << c)
}

/// The queue bid of a pod: its GPUs with the pod's milli as GiB each, the classes of its GPU
/// models, its CPU and memory, 300 W.
pub(crate) fn bid(pod: &Pod) -> Bid {
    Bid::queue(
        BidData {
            gpu_count: pod.num_gpu(),
            gib_per_gpu: pod.gpu_milli(),
            accepted_classes: accepted_classes(pod.gpu_spec()),
            price: PRICE,
            max_duration_secs: 3_600,
            min_duration_secs: 3_600,
            deadline: i64::MAX,
            cpu_milli: pod.cpu_milli(),
            memory_mib: pod.memory_mib(),
            placed_at: NOW,
            ..BidData::default()
        },
        OverclockTerms {
            power_limit_w: 300,
            ..OverclockTerms::default()
        },
    )
}

/// How a replay chooses the machine of each bid.
#[derive(Debug, Clone, Copy)]
enum Rule {
    /// The market's packing policy ([`Placer`]) as the agents run it: learnt afresh for each
    /// bid from the machines, leases and bids the agents see, which is the chain as it was
    /// `lag` bids ago. The chosen machine's `allocate` lands on the chain as it is: where the
    /// GPUs it chose no longer fit there, the program refuses it, and the agents decide again
    /// on the chain as it is now.
    Policy { lag: usize },
    /// A random machine of those the fit rule accepts: the agents racing for a bid (today's
    /// market, and the market after the grace period), drawn with this seed.
    Race(u64),
}

/// The machines' offers and running leases (GPUs and GiB on each; the trace measures no
/// utilisation, so no profile, and the co-location model has nothing to weigh).
#[derive(Clone)]
struct State {
    offers: Vec<Offer>,
    leases: Vec<Vec<Tenant>>,
}

impl State {
    /// The machines as the placer sees them: ids in node order, no electricity cost.
    fn seats(&self) -> Vec<Seat<'_>> {
        self.offers
            .iter()
            .zip(&self.leases)
            .enumerate()
            .map(|(i, (offer, leases))| {
                let mut id = [0u8; 32];
                id[..8].copy_from_slice(&(i as u64).to_be_bytes());
                Seat {
                    id,
                    electricity_cost_per_kwh: 0,
                    offer,
                    leases,
                }
            })
            .collect()
    }
}

/// A change on its way to the agents: the bid from which on they see it, the machine, and its
/// new offer and leases.
type Change = (usize, usize, Offer, Vec<Tenant>);

struct Replayed {
    market: Market,
    machines: Vec<Machine>,
    /// The chain now.
    now: State,
    /// What the agents see, when they see the chain late, and the changes on their way to them.
    seen: Option<(State, VecDeque<Change>)>,
    /// Every bid placed so far, as the market's workload: running leases and open bids (a bid
    /// that fits nowhere stays in the book: the replay's bids never expire).
    workload: Vec<Demand>,
    /// `allocate`s the program refused because the chain had moved since the agents' view.
    refused: usize,
}

impl Replayed {
    fn open(nodes: &[Node], lagging: bool) -> Result<Replayed, String> {
        let market = market();
        let machines: Vec<Machine> = nodes.iter().map(machine).collect();
        let offers = machines
            .iter()
            .map(|m| offer(m, &market))
            .collect::<Result<_, _>>()?;
        let now = State {
            offers,
            leases: vec![Vec::new(); machines.len()],
        };
        Ok(Replayed {
            market,
            machines,
            seen: lagging.then(|| (now.clone(), VecDeque::new())),
            now,
            workload: Vec::new(),
            refused: 0,
        })
    }

    /// The machine and GPUs `rule` gives `need`, if any.
    fn choose(&mut self, need: &Need, rule: Rule, rng: &mut SplitMix64) -> Option<Chosen> {
        match rule {
            Rule::Policy { lag } => {
                let bids = self.workload.len();
                let seen = match &mut self.seen {
                    Some((seen, on_the_way)) => {
                        while on_the_way.front().is_some_and(|c| c.0 + lag <= bids) {
                            let (_, i, offer, leases) = on_the_way.pop_front()?;
                            (seen.offers[i], seen.leases[i]) = (offer, leases);
                        }
                        &*seen
                    }
                    None => &self.now,
                };
                let chosen = Placer::new(&seen.seats(), &counted(&self.workload)).choose(
                    need,
                    &seen.offers,
                    Affinity::default(),
                );
                let lands = |c: &Chosen| self.now.offers[c.machine].check_choice(need, &c.gpus);
                match chosen {
                    Some(c) if lands(&c).is_err() => {
                        self.refused += 1;
                        Placer::new(&self.now.seats(), &counted(&self.workload)).choose(
                            need,
                            &self.now.offers,
                            Affinity::default(),
                        )
                    }
                    chosen => chosen,
                }
            }
            Rule::Race(_) => {
                let offers = &self.now.offers;
                let fitting: Vec<usize> = (0..offers.len())
                    .filter(|&i| offers[i].fit(need).is_ok())
                    .collect();
                if fitting.is_empty() {
                    return None;
                }
                let machine = fitting[rng.below(fitting.len() as u64) as usize];
                let choice = offers[machine].fit(need).ok()?;
                Some(Chosen {
                    machine,
                    gpus: choice.gpus().to_vec(),
                })
            }
        }
    }

    /// Places `bid` by `rule` on the GPUs it chooses; returns whether it was placed.
    fn place(&mut self, bid: Bid, rule: Rule, rng: &mut SplitMix64) -> Result<bool, String> {
        let overclock = bid.overclock_per_gpu();
        let need = bid.need(&overclock);
        let Some(Chosen { machine: i, gpus }) = self.choose(&need, rule, rng) else {
            self.workload.push(Demand::from(&need));
            return Ok(false);
        };
        // What `allocate` checks before it takes the GPUs.
        self.now.offers[i]
            .check_choice(&need, &gpus)
            .map_err(|e| format!("{e:?}"))?;
        let m = &mut self.machines[i];
        m.take(&gpus, bid.gib_per_gpu, bid.host(), false, |g| {
            bid.terms_of(g)
        })
        .map_err(|e| e.to_string())?;
        self.now.offers[i] = offer(m, &self.market)?;
        self.now.leases[i].push(Tenant {
            gpus: gpus.iter().fold(0u16, |m, &g| m | 1 << g),
            gib_per_gpu: bid.gib_per_gpu,
            profile: None,
        });
        if let Some((_, on_the_way)) = &mut self.seen {
            let (offer, leases) = (self.now.offers[i].clone(), self.now.leases[i].clone());
            on_the_way.push_back((self.workload.len(), i, offer, leases));
        }
        self.workload
            .push(Demand::running(bid.gpu_count, bid.gib_per_gpu, bid.host()));
        Ok(true)
    }
}

fn offer(m: &Machine, market: &Market) -> Result<Offer, String> {
    m.offer(market, BidKind::Queue, NOW, &Freed::default())
        .map_err(|e| e.to_string())
}

/// GPU milli of `nodes` in all.
fn capacity(nodes: &[Node]) -> u64 {
    nodes.iter().map(|n| n.num_gpus() as u64 * 1_000).sum()
}

/// What one replay gives: the allocation curve, the bids placed, the allocations refused, and
/// the wall time.
type Outcome = (Vec<Option<f64>>, usize, usize, f64);

/// The allocation curve of `rule` on `arrivals`, and what else [`Outcome`] says.
fn replay(nodes: &[Node], arrivals: &[Pod], rule: Rule) -> Result<Outcome, String> {
    let lagging = matches!(rule, Rule::Policy { lag } if lag > 0);
    let mut market = Replayed::open(nodes, lagging)?;
    let total = capacity(nodes);
    let mut rng = SplitMix64::new(match rule {
        Rule::Race(seed) => seed,
        Rule::Policy { .. } => 0,
    });
    let (mut arrived, mut allocated, mut placed) = (0u64, 0u64, 0);
    let mut records = Vec::with_capacity(arrivals.len());
    let start = Instant::now();
    for pod in arrivals {
        arrived += pod.total_gpu_milli() as u64;
        if market.place(bid(pod), rule, &mut rng)? {
            allocated += pod.total_gpu_milli() as u64;
            placed += 1;
        }
        records.push((arrived, allocated));
    }
    Ok((
        fgd::curve(&records, total),
        placed,
        market.refused,
        start.elapsed().as_secs_f64(),
    ))
}

pub fn main(traces: &Path) -> Result<(), String> {
    let trace = trace::load(traces)?;
    println!(
        "openb through the market's code: {} machines, {} arrivals (the FGD protocol's)\n",
        trace.nodes.len(),
        trace.arrivals.len()
    );
    print!("| GPU allocation % at arrived |");
    for x in POINTS {
        print!(" {x}% |");
    }
    println!(" placed | refused | wall time |");
    print!("|---|");
    for _ in POINTS {
        print!("---:|");
    }
    println!("---:|---:|---:|");
    let row = |name: &str, (curve, placed, refused, wall_s): Outcome| {
        print!("| {name} |");
        for v in curve {
            match v {
                Some(v) => print!(" {v:.2} |"),
                None => print!(" - |"),
            }
        }
        println!(" {placed} | {refused} | {wall_s:.1} s |");
    };
    let nodes = &trace.nodes;
    for lag in LAGS {
        row(
            &format!("market policy, agents {lag} bids behind"),
            replay(nodes, &trace.arrivals, Rule::Policy { lag })?,
        );
    }
    for seed in 1..=SEEDS {
        row(
            &format!("fit rule alone (agents race), seed {seed}"),
            replay(nodes, &trace.arrivals, Rule::Race(seed))?,
        );
    }
    for (name, curve) in fgd::policy_curves(&trace)? {
        row(&format!("bench policy {name}"), (curve, 0, 0, 0.0));
    }
    // Other workloads: the original pods shuffled and resampled to 130 % (fgd.rs's orders).
    for order in 1..=SEEDS {
        let arrivals = fgd::resampled_arrivals(&trace.original, capacity(nodes), order);
        row(
            &format!("market policy, resampled order {order}"),
            replay(nodes, &arrivals, Rule::Policy { lag: 0 })?,
        );
        row(
            &format!("fit rule alone, resampled order {order}"),
            replay(nodes, &arrivals, Rule::Race(order))?,
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pod that names GPU models (the trace's `gpu_spec`) is a bid for those models' classes
    /// alone: the fit rule turns it away from a machine of another model. Before, every replay
    /// bid accepted every class, and such pods were packed as if they named none.
    #[test]
    fn a_pod_naming_gpu_models_fits_only_machines_of_those_models() {
        let v100 = ModelId(1);
        let only = ModelSet::ANY.with(v100).unwrap();
        let pod = Pod::new(1_000, 1_024, 1, 500, only).unwrap();
        let any = Pod::new(1_000, 1_024, 1, 500, ModelSet::ANY).unwrap();
        assert_eq!(bid(&pod).accepted_classes, 0b10);
        assert_eq!(bid(&any).accepted_classes, u8::MAX);
        let m = market();
        let fits = |model: ModelId, pod: &Pod| {
            let node = Node::new(8_000, 65_536, model, 2, 2).unwrap();
            let offer = machine(&node)
                .offer(&m, BidKind::Queue, NOW, &Freed::default())
                .unwrap();
            bid(pod).fit(&offer).is_ok()
        };
        assert!(fits(v100, &pod));
        assert!(!fits(ModelId(0), &pod));
        assert!(fits(ModelId(0), &any));
    }
}
