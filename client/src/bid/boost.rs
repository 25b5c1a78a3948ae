//! `gpu-market bid boost BID --premium AMOUNT`: the client of a waiting queue bid pays more
//! urgency premium (burnt, as at placement) and the bid ranks again as if placed then with it.

use anyhow::{bail, Result};
use gpu_market::state::{Bid, BidKind, BidStatus, Market};
use gpu_market_sdk::book::read_book;
use gpu_market_sdk::{BoostBid, ClientInstruction};
use solana_pubkey::Pubkey;

use super::{check_balance, own};
use crate::config::Config;
use crate::output::{print_record, text};
use crate::parse;

/// The bid's place in the queue book (1: first), if it waits there.
fn rank(config: &Config, m: &Market, bid: &Pubkey) -> Result<Option<u64>> {
    let book = read_book(&config.account_data(&m.queue_book, "book")?);
    Ok(book.and_then(|b| {
        b.entries
            .iter()
            .position(|l| l.bid == *bid)
            .map(|i| i as u64 + 1)
    }))
}

pub(super) fn boost(
    config: &Config,
    bid: &Pubkey,
    premium: &str,
    tokens: Option<Pubkey>,
) -> Result<()> {
    let signer = config.signer()?;
    let client = signer.key();
    let b: Bid = config.fetch(bid, "bid")?;
    let m: Market = config.fetch(&b.market, "market")?;
    let decimals = config.mint_decimals(&m.payment_mint)?;
    let premium = parse::positive_amount(premium, decimals, "premium")?;
    own(&b, bid, &client.pubkey())?;
    if b.kind != BidKind::Queue {
        bail!("bid {bid} is a spot bid: its machine's book ranks it by the host's profit, which a premium does not change");
    }
    if b.status != BidStatus::Open {
        bail!("bid {bid} runs already: a premium ranks a waiting bid");
    }
    let (client_tokens, balance) =
        config.token_account(&client.pubkey(), &m.payment_mint, tokens)?;
    check_balance(premium, balance, decimals, &client_tokens, "the premium")?;
    let before = rank(config, &m, bid)?;
    let ix = BoostBid {
        client,
        market: b.market,
        bid: *bid,
        book: m.queue_book,
        payment_mint: m.payment_mint,
        client_tokens,
        premium,
    }
    .instruction();
    let signature = config.send(client, &[ix], &[])?;
    let after: Bid = config.fetch(bid, "bid")?;
    let place = |r: Option<u64>| r.map_or(serde_json::Value::Null, Into::into);
    print_record(
        config.output,
        &[
            ("bid", text(bid)),
            ("premium_paid", parse::tokens(premium, decimals)),
            (
                "urgency_premium",
                parse::tokens(after.urgency_premium, decimals),
            ),
            ("score", after.score.into()),
            ("rank_before", place(before)),
            ("rank", place(rank(config, &m, bid)?)),
            ("signature", text(signature)),
        ],
    );
    Ok(())
}
