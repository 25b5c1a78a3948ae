//! The market page of `gpu-market serve`: the queue book with each bid's score parts, the
//! machines and their GPUs, the running leases with what is paid and refundable, the reserve
//! price per GPU class now and over time, and a bid's `explain` on its own page.
//!
//! Server-rendered and complete without JavaScript. Every number comes from the CLI's own read
//! paths (`bid::book_rows`, `bid::bid_fields`, `bid::explain_fields`, `lease::lease_rows`,
//! `host::machine_rows`, `quote::quote_rows`, `market::market_fields`), at one cluster time per
//! page, so the page and `gpu-market bid list`, `lease list`, … cannot disagree. The forms
//! (`forms`) are the service's actions; `wallet.js` signs them with a Wallet Standard wallet.

mod console;
mod forms;
mod history;
mod html;
mod human;
mod plot;

use anyhow::Result;
use gpu_market::state::Market;
use serde_json::Value;
use solana_pubkey::Pubkey;

use self::html::{esc, fields_table, get, get_text, list_table, ListOf};
use self::plot::{clock, Plot, Series};
use super::actions::Action;
use crate::config::Config;
use crate::lease::LeaseFilter;
use crate::output::Fields;
use crate::{bid, host, lease, market, quote};

pub use self::console::wallet_page;

/// The page's script: the app side of the Wallet Standard and the forms' posting.
pub const WALLET_JS: &str = include_str!("wallet.js");
/// The page's browser code bundled with its libraries (`client/web`), served at `/web/NAME`
/// and imported by `wallet.js` when first needed: NAME, content type, text.
pub const WEB: [(&str, &str, &str); 3] = [
    (
        "seal.mjs",
        "text/javascript; charset=utf-8",
        include_str!("web/seal.mjs"),
    ),
    (
        "terminal.mjs",
        "text/javascript; charset=utf-8",
        include_str!("web/terminal.mjs"),
    ),
    (
        "terminal.css",
        "text/css; charset=utf-8",
        include_str!("web/terminal.css"),
    ),
];

/// Samples the market's reserve prices into the page's history now (`gpu-market serve` does at
/// each billing interval, so that the plot has no gaps while nobody watches); the interval to
/// wait before the next sample.
pub fn sample_history(config: &Config, market: &Pubkey) -> Result<std::time::Duration> {
    let now = config.cluster_time()?;
    let m: Market = config.fetch(market, "market")?;
    history::HISTORY.sample(market, &m, now)?;
    Ok(std::time::Duration::from_secs(
        m.params.billing_interval_secs.max(1) as u64,
    ))
}

/// The market page (a complete HTML document). `wallet_chain` is the Wallet Standard's name of
/// the cluster (`solana:localnet`, …) the wallet signs for.
pub fn market_page(config: &Config, market: &Pubkey, wallet_chain: &str) -> Result<String> {
    let now = config.cluster_time()?;
    let m: Market = config.fetch(market, "market")?;
    let decimals = config.mint_decimals(&m.payment_mint)?;
    let samples = history::HISTORY.sample(market, &m, now)?;
    let machines = host::machine_rows(config, market, None)?;
    let classes = crate::classes::in_use(&m, declared_classes(&machines));
    let body = [
        summary_section(config, market, &m, now)?,
        book_section(&bid::book_rows(config, market, None, now)?, now),
        leases_section(
            &lease::lease_rows(config, market, LeaseFilter::default(), now)?,
            now,
        ),
        machines_section(&machines, &m, now),
        reserve_section(
            &quote::quote_rows(config, market, &classes, now)?,
            &m,
            Plotted {
                classes: &classes,
                samples: &samples,
                decimals,
                now,
            },
        )?,
        wallet_section(),
    ]
    .concat();
    Ok(html::document(
        &format!("GPU market {market}"),
        wallet_chain,
        now,
        &body,
    ))
}

/// One bid's page (a complete HTML document): its record as `bid show` prints it and its
/// `bid explain`, with its top-up and cancel forms while it waits.
pub fn bid_page(
    config: &Config,
    market: &Pubkey,
    bid: &Pubkey,
    wallet_chain: &str,
) -> Result<String> {
    let b: gpu_market::state::Bid = config.fetch(bid, "bid")?;
    if b.market != *market {
        anyhow::bail!("bid {bid} is not in market {market}");
    }
    let m: Market = config.fetch(market, "market")?;
    let now = config.cluster_time()?;
    let shown = bid::bid_fields(config, bid, &b, &m)?;
    let explained = bid::explain_fields(config, bid)?;
    let key = bid.to_string();
    let summary = get_text(&explained, "summary");
    let actions = if get_text(&shown, "status") == "open" {
        format!(
            "<h2>Act on it</h2><div class=\"card\">{}{}</div>",
            forms::action_form(Action::TopUp, &[("bid", &key)], false),
            forms::action_form(Action::Cancel, &[("bid", &key)], false),
        )
    } else {
        String::new()
    };
    let body = format!(
        "<p><a href=\"/\">← the market</a></p><h2>Bid <code>{k}</code></h2>\
         <p class=\"summary\" data-field=\"summary\">{s}</p>\
         <section id=\"explain\" data-record=\"explain\" data-key=\"{k}\"><h2>Why it is not running (<code>bid explain</code>)</h2>{e}</section>\
         <section id=\"bid\" data-record=\"bid\" data-key=\"{k}\"><h2>The bid (<code>bid show</code>)</h2>{f}</section>{actions}",
        k = esc(&key),
        s = esc(&summary),
        e = fields_table(&explained, None, now),
        f = fields_table(&shown, None, now),
    );
    Ok(html::document(
        &format!("GPU market bid {bid}"),
        wallet_chain,
        now,
        &body,
    ))
}

/// The market's key, its state of the auction and its main rules.
fn summary_section(config: &Config, key: &Pubkey, m: &Market, now: i64) -> Result<String> {
    let fields = market::market_fields(config, key, m)?;
    Ok(format!(
        "<section id=\"market\" data-record=\"market\" data-key=\"{k}\"><h2>Market <code>{k}</code></h2>\
         <p class=\"note\">As of cluster time <time data-field=\"cluster_time\">{now}</time> ({clock} UTC).</p>{table}</section>",
        k = esc(&key.to_string()),
        clock = clock(now),
        table = fields_table(
            &fields,
            Some(&[
                "payment_mint",
                "billing_interval_secs",
                "base_price_per_gpu_hour",
                "demand_bps",
                "gpus_offered",
                "gpus_waiting",
                "total_staked",
                "total_escrow",
                "score_weights_bps",
            ]),
            now,
        ),
    ))
}

/// The queue book, best first: each bid's score parts (`bid list`'s columns), with its top-up
/// and cancel forms.
fn book_section(book: &bid::BookRows, now: i64) -> String {
    let link = |k: &str| format!("/bid/{k}");
    let of = ListOf {
        kind: "bid",
        key: "bid",
        link: Some(&link),
        actions: Some(("act", &forms::bid_actions)),
    };
    format!(
        "<section id=\"queue\"><h2>Queue book</h2><p class=\"note\">Best first. A score weighs the \
         bidder's stake, the urgency premium it paid and what it spends per hour (each part in \
         basis points of its bound); <code>aged_score</code> adds what waiting has earned; the \
         book ranks a bid as if placed three times its duration later (at most 144 h). A \
         bid's key opens its <code>bid explain</code>.</p>{}</section>",
        list_table(&of, &book.columns, &book.rows, now)
    )
}

/// The market's leases (`lease list`'s columns), with the end-lease form.
fn leases_section(rows: &[Fields], now: i64) -> String {
    let actions = |row: &Fields| {
        let key = get_text(row, "lease");
        forms::action_form(Action::EndLease, &[("lease", &key)], false)
    };
    let of = ListOf {
        kind: "lease",
        key: "lease",
        link: None,
        actions: Some(("act", &actions)),
    };
    format!(
        "<section id=\"leases\"><h2>Leases</h2><p class=\"note\"><code>paid</code>: paid to the \
         host for proven time; <code>refundable</code>: the escrow left after the time run but not \
         yet proven; <code>idle</code>: flagged by the market's idle rule.</p>{}</section>",
        list_table(&of, lease::LIST_COLUMNS, rows, now)
    )
}

/// The columns of a machine's GPU list.
const GPU_COLUMNS: &[&str] = &[
    "index",
    "uuid",
    "class",
    "topology_group",
    "memory_gib",
    "used_gib",
    "power_w",
    "core_lock_mhz",
    "mem_lock_mhz",
];

/// Each machine (`host list`'s record) with its GPUs, their classes by the names market `m`
/// gives them.
fn machines_section(machines: &[Fields], m: &Market, now: i64) -> String {
    let cards: String = machines
        .iter()
        .map(|mach| {
            let key = get_text(mach, "machine");
            let gpus: Vec<Fields> = get(mach, "gpus")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .enumerate()
                .map(|(i, g)| gpu_fields(&key, i, g, m))
                .collect();
            let of = ListOf {
                kind: "gpu",
                key: "gpu",
                link: None,
                actions: None,
            };
            format!(
                "<article class=\"card\" data-record=\"machine\" data-key=\"{k}\"><h3>Machine <code>{k}</code></h3>{}<h3>GPUs</h3>{}</article>",
                fields_table(
                    mach,
                    Some(&[
                        "status",
                        "owner",
                        "region",
                        "gpu_count",
                        "price_floor_per_gpu_hour",
                        "leases",
                        "last_heartbeat",
                    ]),
                    now,
                ),
                list_table(&of, GPU_COLUMNS, &gpus, now),
                k = esc(&key),
            )
        })
        .collect();
    let cards = if machines.is_empty() {
        "<p class=\"empty\">(none)</p>".to_string()
    } else {
        format!("<div class=\"grid machines\">{cards}</div>")
    };
    format!("<section id=\"machines\"><h2>Machines</h2>{cards}</section>")
}

/// GPU `index` of `machine` (`host list`'s GPU record) as a row keyed `<machine>/<index>`, its
/// class written by the name market `m` gives it.
fn gpu_fields(machine: &str, index: usize, gpu: &Value, m: &Market) -> Fields {
    let mut row: Fields = vec![
        ("gpu", Value::String(format!("{machine}/{index}"))),
        ("index", index.into()),
    ];
    row.extend(GPU_COLUMNS.iter().filter_map(|&c| {
        let v = gpu.get(c)?;
        match (c, v.as_u64().and_then(|n| u8::try_from(n).ok())) {
            ("class", Some(class)) => Some((c, Value::String(crate::classes::label(m, class)))),
            _ => Some((c, v.clone())),
        }
    }));
    row
}

/// The GPU classes the market's machines (`host list`'s records) declare their GPUs of.
fn declared_classes(machines: &[Fields]) -> Vec<u8> {
    machines
        .iter()
        .filter_map(|mach| get(mach, "gpus").and_then(Value::as_array))
        .flatten()
        .filter_map(|g| g["class"].as_u64())
        .filter_map(|c| u8::try_from(c).ok())
        .collect()
}

/// What the reserve plots draw: which classes, the history sampled, how amounts are written,
/// and the cluster time of the page.
struct Plotted<'a> {
    classes: &'a [u8],
    samples: &'a [history::Sample],
    decimals: u8,
    now: i64,
}

/// The reserve price per class now (`quote`'s columns but its by-hour list, which the second
/// plot draws) and two plots: the price as this service sampled it since it started (the chain
/// keeps no past demand, see `history`), and the price at each hour of today (UTC) with the
/// demand now, as `quote` prints it.
fn reserve_section(quotes: &[Fields], m: &Market, p: Plotted) -> Result<String> {
    let columns: Vec<&str> = quote::COLUMNS
        .iter()
        .copied()
        .filter(|c| *c != "by_hour_utc")
        .collect();
    let of = ListOf {
        kind: "reserve",
        key: "class",
        link: None,
        actions: None,
    };
    let y_label = |y: u64| gpu_market_core::amount::format(y, p.decimals);
    let (first, last) = (
        p.samples.first().map_or(p.now, |s| s.at),
        p.samples.last().map_or(p.now, |s| s.at),
    );
    let sampled = Plot {
        id: "reserve-history",
        title: "Reserve price per GPU-hour, as sampled by this service",
        series: series(m, p.classes, |c| {
            p.samples
                .iter()
                .map(|s| (s.at as f64, s.reserve[c as usize]))
                .collect()
        }),
        x: (first as f64, last.max(first + 1) as f64),
        x_ticks: vec![(first as f64, clock(first)), (last as f64, clock(last))],
        marker: None,
        y_label: &y_label,
    };
    let mut by_hour = Vec::with_capacity(p.classes.len());
    for &c in p.classes {
        // A step per hour: the seasonal factor holds for the whole hour.
        let steps: Vec<(f64, u64)> = quote::by_hour(m, c, p.now)?
            .into_iter()
            .enumerate()
            .flat_map(|(h, price)| [(h as f64, price), (h as f64 + 1.0, price)])
            .collect();
        by_hour.push(steps);
    }
    let mut hours = by_hour.into_iter();
    let today = Plot {
        id: "reserve-by-hour",
        title: "Reserve price per GPU-hour at each hour of today (UTC), with the demand now",
        series: series(m, p.classes, |_| hours.next().unwrap_or_default()),
        x: (0.0, 24.0),
        x_ticks: (0..=24)
            .step_by(6)
            .map(|h| (h as f64, format!("{h:02}:00")))
            .collect(),
        marker: Some((p.now.rem_euclid(86_400) as f64 / 3_600.0, "now".into())),
        y_label: &y_label,
    };
    Ok(format!(
        "<section id=\"reserve\"><h2>Reserve price</h2><p class=\"note\">What a queue bid must \
         offer per GPU-hour: the market's base price × (1 + demand) × (1 + the class's \
         capability) × the hour's seasonal factor.</p>{}<h3>Since this service started</h3>\
         <p class=\"note\">The chain keeps no past demand: these are the prices this service read \
         at each billing interval and each page it served ({n} samples).</p>{}<h3>Today by hour</h3>{}</section>",
        list_table(&of, &columns, quotes, p.now),
        sampled.render(),
        today.render(),
        n = p.samples.len(),
    ))
}

/// One series per class (of market `m`, by its name), its points from `points`.
fn series(
    m: &Market,
    classes: &[u8],
    mut points: impl FnMut(u8) -> Vec<(f64, u64)>,
) -> Vec<Series> {
    classes
        .iter()
        .map(|&c| Series {
            label: crate::classes::label(m, c),
            points: points(c),
        })
        .collect()
}

/// The connected wallet's own actions: stake, unstake, withdraw, place a bid.
fn wallet_section() -> String {
    format!(
        "<section id=\"act\"><h2>Your wallet</h2><div class=\"grid\">\
         <div class=\"card\"><h3>Stake</h3>{}{}{}</div>\
         <div class=\"card\"><h3>Place a bid</h3>{}</div></div></section>",
        forms::action_form(Action::Stake, &[], false),
        forms::action_form(Action::Unstake, &[], false),
        forms::action_form(Action::Withdraw, &[], false),
        forms::action_form(Action::Bid, &[], true),
    )
}
