//! The market's machine choice from its accounts: every machine of a market, their running
//! leases and the queue book's open bids, handed to the packing policy of
//! `gpu_market_core::placement` ([`Placer`]). The host agent asks it which machine should take
//! each bid it could take; `gpu-market bid explain` tells a client which machine that is. Both
//! read the same accounts, so they give the same answer.

use gpu_market::state::{Bid, BidKind, BookLeaf, Freed, Lease, Machine, Market};
use gpu_market_core::fit::Offer;
use gpu_market_core::placement::{Demand, Placer, Seat};
use solana_pubkey::Pubkey;

/// A market's machines as the packing policy sees them at one moment.
pub struct MarketPlacement {
    keys: Vec<Pubkey>,
    machines: Vec<Machine>,
    /// Each machine's offer to queue bids.
    offers: Vec<Offer>,
    placer: Placer,
}

/// Where the policy gives a bid: the machine, and the GPUs it takes there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    pub machine: Pubkey,
    pub gpus: Vec<u8>,
}

impl MarketPlacement {
    /// The policy over `machines` of `market` at `now`, with their running `leases`; it learns
    /// the market's workload from those leases and `queue` (the queue book's entries; the
    /// expired ones are left out). A machine whose offer cannot be priced is an error.
    pub fn new(
        market: &Market,
        now: i64,
        machines: Vec<(Pubkey, Machine)>,
        leases: &[Lease],
        queue: &[BookLeaf],
    ) -> Result<Self, String> {
        let (keys, machines): (Vec<Pubkey>, Vec<Machine>) = machines.into_iter().unzip();
        let mut held: Vec<Vec<(u16, u16)>> = vec![Vec::new(); keys.len()];
        let mut workload: Vec<Demand> = Vec::with_capacity(leases.len() + queue.len());
        for l in leases {
            workload.push(Demand::running(l.gpu_count, l.gib_per_gpu, l.host()));
            if let Some(i) = keys.iter().position(|k| *k == l.machine) {
                let mask = l.gpus().iter().fold(0u16, |m, &g| m | 1 << g);
                held[i].push((mask, l.gib_per_gpu));
            }
        }
        workload.extend(
            queue
                .iter()
                .filter(|leaf| now < leaf.summary.deadline)
                .map(|leaf| Demand::from(&leaf.summary.need())),
        );
        let offers: Vec<Offer> = machines
            .iter()
            .zip(&keys)
            .map(|(m, k)| {
                m.offer(market, BidKind::Queue, now, &Freed::default())
                    .map_err(|e| format!("machine {k}'s offer: {e}"))
            })
            .collect::<Result<_, _>>()?;
        let seats: Vec<Seat> = keys
            .iter()
            .zip(&machines)
            .zip(offers.iter().zip(&held))
            .map(|((k, m), (offer, leases))| Seat {
                id: k.to_bytes(),
                electricity_cost_per_kwh: m.electricity_cost_per_kwh,
                offer,
                leases,
            })
            .collect();
        let placer = Placer::new(&seats, &workload);
        Ok(MarketPlacement {
            keys,
            machines,
            offers,
            placer,
        })
    }

    /// Where the policy gives queue bid `bid`: the machine whose fit rule accepts it and where
    /// it fragments the market least (ties: a machine caching its image, the cheaper
    /// electricity, the lowest address), and the GPUs there; `None` when no machine's fit rule
    /// accepts it, and for a spot bid, which waits in its machine's own book for that machine.
    pub fn place(&mut self, bid: &Bid) -> Option<Placed> {
        if bid.kind != BidKind::Queue {
            return None;
        }
        let overclock = bid.overclock_per_gpu();
        let need = bid.need(&overclock);
        let caching: Vec<usize> = self
            .machines
            .iter()
            .enumerate()
            .filter(|(_, m)| {
                m.cached_images[..m.cached_image_count as usize].contains(&bid.image_digest)
            })
            .map(|(i, _)| i)
            .collect();
        let chosen = self.placer.choose(&need, &self.offers, &caching)?;
        Some(Placed {
            machine: self.keys[chosen.machine],
            gpus: chosen.gpus,
        })
    }
}
