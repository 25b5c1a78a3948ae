//! `gpu-market bid prune BID` and `bid prune --all --market MARKET`: anyone removes expired
//! bids (and `bid prune BID` a spot bid of a retired machine); each escrow goes back to the token account it came from while that lives, else to its
//! client's stake to claim.

use anyhow::{anyhow, bail, Result};
use gpu_market::pda;
use gpu_market::state::{Bid, BidKind, BidStatus, Market};
use gpu_market_sdk::book::read_book;
use gpu_market_sdk::{ClientInstruction, PruneBid};
use serde_json::Value;
use solana_pubkey::Pubkey;
use solana_signer::Signer;
use solana_transaction::Transaction;

use super::{book_of, refund_accounts};
use crate::config::{Config, Sendable, Signing};
use crate::output::{print_list, print_record, text, Fields};
use crate::parse;

/// The `prune_bid` of an open bid `key`: its escrow back to the token account it came from,
/// `refund_to` (see [`refund_accounts`]), or, gone, to its client's stake to claim.
fn prune_of<'a>(
    caller: Signing<'a>,
    (key, b): (Pubkey, &Bid),
    refund_to: Option<Pubkey>,
    m: &Market,
    book: Pubkey,
) -> PruneBid<'a> {
    PruneBid {
        caller,
        market: b.market,
        bid: key,
        client: b.client,
        book,
        payment_mint: m.payment_mint,
        client_tokens: refund_to,
        machine: (b.kind == BidKind::Spot).then_some(b.machine),
    }
}

/// Where a refund went, for the output: the token account, or the client's stake.
fn refund_to_text(refund_to: Option<Pubkey>) -> Value {
    match refund_to {
        Some(account) => text(account),
        None => text("stake (the client claims it with `gpu-market stake claim`)"),
    }
}

pub(super) fn prune(config: &Config, key: &Pubkey) -> Result<()> {
    let caller = config.signer()?;
    let b: Bid = config.fetch(key, "bid")?;
    if b.status == BidStatus::Running {
        bail!(
            "bid {key} is running as lease {}: it ends with its lease",
            pda::lease(key).0
        );
    }
    let m: Market = config.fetch(&b.market, "market")?;
    let book = book_of(config, &b, &m)?;
    let refund_to = refund_accounts(config, [&b], &m)?[0];
    let prune = prune_of(caller.key(), (*key, &b), refund_to, &m, book);
    let signature = config.send_all(&caller, &[&prune])?;
    print_record(
        config.output,
        &[
            ("bid", text(key)),
            ("client", text(b.client)),
            (
                "refund",
                parse::tokens(b.escrow, config.mint_decimals(&m.payment_mint)?),
            ),
            ("refund_to", refund_to_text(refund_to)),
            ("signature", text(signature)),
        ],
    );
    Ok(())
}

/// The most bytes a transaction may take on the wire (`solana_packet::PACKET_DATA_SIZE`).
const PACKET_DATA_SIZE: usize = 1232;

/// Prunes every expired bid of the market's queue book, packing as many `prune_bid` as a
/// transaction holds. A transaction refused (another keeper may have pruned one of its bids
/// first) is retried bid by bid, and each bid's own outcome is listed.
pub(super) fn prune_all(config: &Config, market: &Pubkey) -> Result<()> {
    let caller = config.signer()?;
    let m: Market = config.fetch(market, "market")?;
    let decimals = config.mint_decimals(&m.payment_mint)?;
    let book = m.queue_book;
    let entries = read_book(&config.account_data(&book, "book")?)
        .ok_or_else(|| anyhow!("market {market} has no queue book open"))?;
    let now = config.cluster_time()?;
    let keys: Vec<Pubkey> = entries
        .entries
        .iter()
        .filter(|l| l.summary.expired(now))
        .map(|l| l.bid)
        .collect();
    let bids = config.fetch_many::<Bid>(&keys)?;
    let expired: Vec<(Pubkey, Bid)> = keys
        .into_iter()
        .zip(bids)
        .filter_map(|(k, b)| b.map(|b| (k, b)))
        .collect();
    let refund_to: Vec<Option<Pubkey>> =
        refund_accounts(config, expired.iter().map(|(_, b)| b), &m)?;
    let expired: Vec<(Pubkey, Bid, Option<Pubkey>)> = expired
        .into_iter()
        .zip(refund_to)
        .map(|((k, b), to)| (k, b, to))
        .collect();
    let prune =
        |(k, b, to): &(Pubkey, Bid, Option<Pubkey>)| prune_of(caller.key(), (*k, b), *to, &m, book);

    // Batches that fit one transaction each.
    let fits = |batch: &[(Pubkey, Bid, Option<Pubkey>)]| {
        let ixs: Vec<_> = batch.iter().map(|e| prune(e).instruction()).collect();
        let message = Transaction::new_with_payer(&ixs, Some(&caller.pubkey())).message;
        1 + 64 * message.header.num_required_signatures as usize + message.serialize().len()
            <= PACKET_DATA_SIZE
    };
    let mut batches: Vec<&[(Pubkey, Bid, Option<Pubkey>)]> = Vec::new();
    let mut start = 0;
    while start < expired.len() {
        let mut end = start + 1;
        while end < expired.len() && fits(&expired[start..=end]) {
            end += 1;
        }
        batches.push(&expired[start..end]);
        start = end;
    }

    let row = |(key, b, to): &(Pubkey, Bid, Option<Pubkey>), outcome: Result<String>| -> Fields {
        let mut row: Fields = vec![
            ("bid", text(key)),
            ("client", text(b.client)),
            ("refund", parse::tokens(b.escrow, decimals)),
            ("refund_to", refund_to_text(*to)),
        ];
        match outcome {
            Ok(signature) => row.push(("signature", text(signature))),
            Err(e) => row.push(("error", text(format!("{e:#}")))),
        }
        row
    };
    let mut rows = Vec::new();
    for batch in batches {
        let prunes: Vec<PruneBid> = batch.iter().map(prune).collect();
        let sendable: Vec<&dyn Sendable> = prunes.iter().map(|p| p as &dyn Sendable).collect();
        match config.send_all(&caller, &sendable) {
            Ok(signature) => rows.extend(batch.iter().map(|e| row(e, Ok(signature.clone())))),
            Err(_) if batch.len() > 1 => {
                for (e, p) in batch.iter().zip(&prunes) {
                    rows.push(row(e, config.send_all(&caller, &[p])));
                }
            }
            Err(e) => rows.push(row(&batch[0], Err(e))),
        }
    }
    print_list(
        config.output,
        &["bid", "client", "refund", "refund_to", "signature", "error"],
        &rows,
    );
    Ok(())
}
