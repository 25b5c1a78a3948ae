//! `gpu-market-bench chain`: one market on a cluster's published limits. The program's
//! instructions are run on its SBF build in LiteSVM and priced by the leader's cost model
//! ([`measure`]); a market of 10,000 8-GPU machines, fully leased with the jobs of the Philly
//! and openb traces, is turned into compute units per slot for the block and for each
//! market-wide account ([`load`]). It reports the busiest account's share of its per-block
//! limit, the largest market that keeps 2× headroom on it, and what an attacker pays to fill
//! the queue book's share of every block.

mod load;
mod measure;

use std::path::Path;

use gpu_market_sdk::budget::LAMPORTS_PER_SIGNATURE;
use gpu_market_sdk::WALK_ENTRIES;
use solana_cost_model::block_cost_limits::{MAX_BLOCK_UNITS, MAX_WRITABLE_ACCOUNT_UNITS};
use solana_transaction::sanitized::MAX_TX_ACCOUNT_LOCKS;

use gpu_market_sdk::instructions::TRANSACTION_SIZE_LIMIT;
use load::{Market, Mix, Trace, Units, SLOT_SECS};
use measure::{Costs, Shared};

/// The market of the issue: 10,000 machines of 8 GPUs at the recommended parameters (60 s
/// intervals, proofs of two intervals, pay claimed hourly).
const MARKET: Market = Market {
    machines: 10_000,
    interval_secs: 60.0,
    span: 2.0,
    claim_secs: 3_600.0,
};

pub fn main(traces: &Path) -> Result<(), String> {
    let costs = measure::measure()?;
    instructions(&costs);
    let traces = [Trace::philly(traces)?, Trace::openb(traces)?];
    println!(
        "\nOne market of {} machines × 8 GPUs, fully leased, {:.0} ms slots; the per-account limit is {} units a block (MAX_WRITABLE_ACCOUNT_UNITS), the block's {} (MAX_BLOCK_UNITS). Units reserved: what the leader holds while it packs a transaction (its compute-unit limit); charged: what the block keeps once it ran.\n",
        MARKET.machines,
        SLOT_SECS * 1_000.0,
        MAX_WRITABLE_ACCOUNT_UNITS,
        MAX_BLOCK_UNITS
    );
    println!("| trace (jobs left out) | book | bids/s | leases per round | busiest account | its mean units a slot, charged | its busiest slot, reserved / charged | share of its limit, reserved / charged | market's share of a block, mean / busiest slot (charged) | largest market with 2× headroom, reserved / charged |");
    println!("|---|---|---:|---:|---|---:|---:|---:|---:|---:|");
    for t in &traces {
        for (mix, book) in [
            (Mix::Honest, "waiting bids"),
            (Mix::FullBook, "kept full by an attacker"),
        ] {
            let reserved = load::simulate(t, MARKET, &costs, &mix, Units::Reserved);
            let charged = load::simulate(t, MARKET, &costs, &mix, Units::Charged);
            let i = busiest(&reserved);
            let share = |l: &load::Load| l.busiest[i] / MAX_WRITABLE_ACCOUNT_UNITS as f64;
            let largest = |l: &load::Load| MARKET.machines as f64 * 0.5 / share(l);
            println!(
                "| {} ({}) | {book} | {:.2} | {} | {} | {:.0} | {:.0} / {:.0} | {:.1} % / {:.1} % | {:.2} % / {:.2} % | {:.0} / {:.0} machines |",
                t.name,
                t.left_out,
                charged.jobs_per_sec,
                charged.round_leases,
                Shared::ALL[i].name(),
                charged.mean[i],
                reserved.busiest[i],
                charged.busiest[i],
                100.0 * share(&reserved),
                100.0 * share(&charged),
                100.0 * charged.block_mean / MAX_BLOCK_UNITS as f64,
                100.0 * charged.block_busiest / MAX_BLOCK_UNITS as f64,
                largest(&reserved),
                largest(&charged),
            );
        }
    }
    flood(&costs);
    Ok(())
}

/// The market-wide account of `l`'s busiest slot.
fn busiest(l: &load::Load) -> usize {
    (0..Shared::ALL.len())
        .max_by(|&a, &b| l.busiest[a].total_cmp(&l.busiest[b]))
        .unwrap_or(0)
}

/// The measured transactions.
fn instructions(costs: &Costs) {
    println!("Transactions as sent (SBF build in LiteSVM; costs from solana-cost-model with every feature on):\n");
    println!("| transaction | units used | units reserved | units charged | bytes (of {TRANSACTION_SIZE_LIMIT}) | accounts (of {MAX_TX_ACCOUNT_LOCKS}) | accounts written | market-wide accounts written |");
    println!("|---|---:|---:|---:|---:|---:|---:|---|");
    let walks = costs.walk_deep.len();
    let mut labels: Vec<String> = [
        "place_bid",
        "allocate",
        "submit_usage, 1 lease × 2 intervals",
        "submit_usage, 2 leases × 2 intervals",
        "submit_usage, 4 leases × 2 intervals",
        "submit_usage, 8 leases × 2 intervals",
        "heartbeat",
        "claim_pay",
        "end_lease",
        "cancel_bid",
        "place_bid, 4,095 entries above",
    ]
    .map(String::from)
    .to_vec();
    labels.extend((1..=walks).map(|k| {
        format!("walk_book {k} of {walks} over 4,095 of the costliest entries ({WALK_ENTRIES} a transaction)")
    }));
    labels.push(
        "allocate below those 4,095 entries, walked (without the walk: over 1.4M, fails)".into(),
    );
    labels.push("place_bid into a full book (evicts the worst)".into());
    for (label, s) in labels.iter().zip(costs.all()) {
        let shared: Vec<&str> = s.shared.iter().map(|a| a.name()).collect();
        println!(
            "| {label} | {} | {} | {} | {} | {} | {} | {} |",
            s.units,
            s.reserved,
            s.charged,
            s.bytes,
            s.locks,
            s.writes,
            if shared.is_empty() {
                "none".to_string()
            } else {
                shared.join(", ")
            }
        );
    }
}

/// What an attacker pays in signature fees to take the queue book's whole per-block limit with
/// bids it places and cancels (escrow and rent come back): the price of stalling the market's
/// placements and allocations without outbidding their priority fees.
fn flood(costs: &Costs) {
    let half = MAX_WRITABLE_ACCOUNT_UNITS as f64 / 2.0;
    let per_sec = |units: u64| half / units as f64 / SLOT_SECS;
    println!(
        "\nWithin half its per-block limit the market account takes {:.0} bids a second placed and allocated, or {:.0} placed into a full book and allocated below its 4,095 entries once walked (units reserved; the walks write the machine alone).",
        per_sec(costs.place_bid.reserved + costs.allocate.reserved),
        per_sec(costs.place_evicting.reserved + costs.allocate_deep.reserved),
    );
    println!(
        "\nKeeping the queue book full costs the attacker its holding charge (core::settlement::holding_charge): each of its 4,095 entries pays its own price, at least the reserve, for the GPUs it asks while the book is full: {} GPUs, as much as renting them.",
        costs.attacker_gpus
    );
    let pair = costs.place_bid.reserved + costs.cancel_bid.reserved;
    let pairs_per_slot = MAX_WRITABLE_ACCOUNT_UNITS as f64 / pair as f64;
    let slots_per_hour = 3_600.0 / SLOT_SECS;
    let lamports = pairs_per_slot * 2.0 * LAMPORTS_PER_SIGNATURE as f64 * slots_per_hour;
    println!(
        "\nFilling the queue book's per-block limit with place_bid + cancel_bid pairs ({pair} units reserved a pair): {pairs_per_slot:.0} pairs a slot, {:.1} SOL of signature fees an hour, before the priority fees that honest transactions outbid it with.",
        lamports / 1e9
    );
}
