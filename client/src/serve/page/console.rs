//! A wallet's console (`/wallet/KEY`, linked from the page once a wallet connects): what that
//! key has in the market and what it can do about it. As a client, its waiting bids with
//! `bid explain`'s answer first (runs where, waits because …), its leases with their status and
//! the end-lease form; as a host, its machines with what they earned and not yet claimed, their
//! leases and heartbeat, and the pause, resume and retire forms. Every row comes from the CLI's
//! own read paths (`bid list`, `bid explain`, `lease list`, `host list`), and every form is an
//! action the connected wallet signs.

use anyhow::Result;
use gpu_market::state::Market;
use solana_pubkey::Pubkey;

use super::html::{self, esc, get_text, list_table, ListOf};
use super::{forms, human};
use crate::config::Config;
use crate::lease::LeaseFilter;
use crate::output::{text, Fields};
use crate::serve::actions::Action;
use crate::{bid, host, lease};

/// A wallet's bids that `bid explain` is asked about on one page, at most (each is a few reads).
const EXPLAINED: usize = 16;

/// The console of `key` in `market` (a complete HTML document).
pub fn wallet_page(
    config: &Config,
    market: &Pubkey,
    key: &Pubkey,
    wallet_chain: &str,
) -> Result<String> {
    let now = config.cluster_time()?;
    let m: Market = config.fetch(market, "market")?;
    let k = esc(&key.to_string());
    let body = format!(
        "<p><a href=\"/\">← the market</a></p><h2>Console of <code>{k}</code></h2>\
         <p class=\"note\">What this key has in the market; the forms ask the connected wallet \
         to sign, and only this key's wallet can.</p>{}{}{}",
        bids_section(config, market, key, now)?,
        leases_section(config, market, key, now)?,
        machines_section(config, market, key, &m, now)?,
    );
    Ok(html::document(
        &format!("GPU market console {key}"),
        wallet_chain,
        now,
        &body,
    ))
}

/// The key's bids waiting in the queue book, best first, each with `bid explain`'s answer.
fn bids_section(config: &Config, market: &Pubkey, key: &Pubkey, now: i64) -> Result<String> {
    let book = bid::book_rows(config, market, None, now)?;
    let mine = key.to_string();
    let mut rows: Vec<Fields> = book
        .rows
        .into_iter()
        .filter(|r| get_text(r, "client") == mine)
        .collect();
    for row in rows.iter_mut().take(EXPLAINED) {
        let answer = get_text(row, "bid")
            .parse()
            .ok()
            .and_then(|b: Pubkey| bid::explain_fields(config, &b).ok())
            .map_or_else(String::new, |e| get_text(&e, "summary"));
        row.insert(0, ("answer", text(answer)));
    }
    let link = |k: &str| format!("/bid/{k}");
    let of = ListOf {
        kind: "my-bid",
        key: "bid",
        link: Some(&link),
        actions: Some(("act", &forms::bid_actions)),
    };
    let columns = [
        "bid",
        "answer",
        "rank",
        "gpus",
        "gib_per_gpu",
        "price",
        "escrow",
    ];
    Ok(format!(
        "<section id=\"my-bids\"><h2>Your waiting bids</h2>{}</section>",
        list_table(&of, &columns, &rows, now)
    ))
}

/// The key's leases, as a client.
fn leases_section(config: &Config, market: &Pubkey, key: &Pubkey, now: i64) -> Result<String> {
    let only = LeaseFilter {
        client: Some(*key),
        ..LeaseFilter::default()
    };
    let rows = lease::lease_rows(config, market, only, now)?;
    let actions = |row: &Fields| {
        let lease = get_text(row, "lease");
        format!(
            "{}{}<div class=\"lease-output\" data-output=\"{l}\"></div>",
            forms::lease_forms(&lease),
            forms::action_form(Action::EndLease, &[("lease", &lease)], false),
            l = esc(&lease),
        )
    };
    let of = ListOf {
        kind: "my-lease",
        key: "lease",
        link: None,
        actions: Some(("act", &actions)),
    };
    let columns: Vec<&str> = lease::LIST_COLUMNS
        .iter()
        .copied()
        .filter(|c| *c != "client")
        .collect();
    Ok(format!(
        "<section id=\"my-leases\"><h2>Your leases</h2><p class=\"note\">The container's last \
         lines of output and its files come from the lease's agent, asked with a request the \
         wallet signs, as is where to connect to its published ports.</p>{}</section>",
        list_table(&of, &columns, &rows, now)
    ))
}

/// The key's machines, as a host: what each earned and not yet claimed, and its status forms.
fn machines_section(
    config: &Config,
    market: &Pubkey,
    key: &Pubkey,
    m: &Market,
    now: i64,
) -> Result<String> {
    let rows = host::machine_rows(config, market, Some(*key))?;
    let actions = |row: &Fields| {
        let machine = get_text(row, "machine");
        let forms: &[Action] = match get_text(row, "status").as_str() {
            "active" => &[Action::Pause, Action::Retire],
            "retired" => &[],
            _ => &[Action::Resume, Action::Retire],
        };
        forms
            .iter()
            .map(|a| forms::action_form(*a, &[("machine", &machine)], false))
            .collect()
    };
    let of = ListOf {
        kind: "my-machine",
        key: "machine",
        link: None,
        actions: Some(("act", &actions)),
    };
    let columns = [
        "machine",
        "status",
        "gpu_count",
        "leases",
        "unclaimed_pay",
        "price_floor_per_gpu_hour",
        "last_heartbeat",
    ];
    let unclaimed = human::label("unclaimed_pay");
    Ok(format!(
        "<section id=\"my-machines\"><h2>Your machines</h2><p class=\"note\">{unclaimed}: what the \
         machine's proofs earned that is not paid out yet (in {mint}); <code>gpu-market host \
         claim MACHINE</code> pays it.</p>{}</section>",
        list_table(&of, &columns, &rows, now),
        mint = esc(&m.payment_mint.to_string()),
    ))
}
