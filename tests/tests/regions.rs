//! Regions: a bid may name the regions whose machines may run it. The fit rule refuses other
//! machines; a book entry keeps a 32-bit filter of the names, so a bid above that does not
//! accept the machine's region never keeps a plainer bid waiting, and the rare entry whose
//! filter cannot tell is shown by its bid account. On the SBF build in LiteSVM.

mod lease_fixture;
mod program_test;

use gpu_market::errors::MarketError;
use gpu_market::instructions::PlaceBidArgs;
use gpu_market::state::{Bid, Lease, REGION_LEN};
use gpu_market_core::fit::Regions;
use gpu_market_sdk::instructions::PlaceBid;
use lease_fixture::*;

fn region(label: &str) -> [u8; REGION_LEN] {
    let mut r = [0; REGION_LEN];
    r[..label.len()].copy_from_slice(label.as_bytes());
    r
}

/// The fixture's machine, in eu-central.
fn machine_in_eu() -> Fixture {
    let mut f = fixture();
    f.update_machine(|terms| terms.region = region("eu-central"));
    f
}

fn accepting(f: &mut Fixture, regions: &[&str]) -> PlaceBidArgs {
    PlaceBidArgs {
        regions: regions.iter().map(|r| region(r)).collect(),
        ..f.queue_args(1, 8)
    }
}

#[test]
fn a_machine_runs_only_bids_that_accept_its_region_and_others_never_block() {
    let mut f = machine_in_eu();
    let c = f.client(100 * TOKEN, 0);
    let d = f.client(100 * TOKEN, 0);
    let a = accepting(&mut f, &["us-east"]);
    let elsewhere = f.place(&d, a);
    let a = accepting(&mut f, &[]);
    let anywhere = f.place(&c, a);
    let a = accepting(&mut f, &["us-east", "eu-central"]);
    let either = f.place(&d, a);
    assert_eq!(
        f.ctx.account::<Bid>(&either).regions,
        vec![region("us-east"), region("eu-central")]
    );

    let err = f.allocate(elsewhere, &[0]).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::RegionNotAccepted));
    // Ranked above, another client's bid for us-east needs no evidence to be passed over.
    let agent = f.agent.insecure_clone();
    let a = f.allocate_ix(&agent, anywhere, &[0]);
    assert!(a.evidence.is_empty(), "{:?}", a.evidence);
    f.send_allocate(&a).expect("a bid for any region runs");
    let lease = f
        .allocate(either, &[1])
        .expect("eu-central is one it names");
    assert_eq!(f.ctx.account::<Lease>(&lease).gpu_count, 1);
}

#[test]
fn an_entry_whose_filter_cannot_tell_is_shown_by_its_bid_account() {
    let mut f = machine_in_eu();
    let c = f.client(100 * TOKEN, 0);
    let d = f.client(100 * TOKEN, 0);
    // A label with eu-central's filter bit: the book entry cannot tell it from eu-central.
    let twin = (0..)
        .map(|i| format!("r{i}"))
        .find(|l| Regions::filter(&[region(l)]) == Regions::filter(&[region("eu-central")]))
        .unwrap();
    let a = accepting(&mut f, &[&twin]);
    let lookalike = f.place(&d, a);
    let a = accepting(&mut f, &[]);
    let plain = f.place(&c, a);
    let agent = f.agent.insecure_clone();
    let a = f.allocate_ix(&agent, plain, &[0]);
    // Its account shows it, with its client's stake (the anti-monopoly cap's evidence).
    assert!(a.evidence.contains(&lookalike), "{:?}", a.evidence);
    f.send_allocate(&a)
        .expect("the lookalike does not accept eu-central");
}

#[test]
fn bad_regions_and_a_spot_bid_for_another_region_are_refused_and_move_nothing() {
    let mut f = machine_in_eu();
    let c = f.client(100 * TOKEN, 0);
    let before = f.ctx.token_balance(&c.tokens);
    let five = ["a", "b", "c", "d", "e"];
    let cases = [
        (accepting(&mut f, &five), MarketError::BadRegions),
        (accepting(&mut f, &["a", "a"]), MarketError::BadRegions),
        (accepting(&mut f, &[""]), MarketError::BadRegions),
        (
            PlaceBidArgs {
                regions: vec![region("us-east")],
                ..f.spot_args(100 * TOKEN)
            },
            MarketError::RegionNotAccepted,
        ),
    ];
    for (args, want) in cases {
        let spot = args.kind == gpu_market::state::BidKind::Spot;
        let p = PlaceBid {
            client: &c.key,
            market: f.market,
            book: if spot { f.spot_book } else { f.queue_book },
            machine: spot.then_some(f.machine),
            payment_mint: f.mint,
            client_tokens: c.tokens,
            args,
            evict: None,
        };
        let err = f.ctx.run(&p).unwrap_err();
        assert_eq!(err.custom_code(), code(want), "{want:?}");
        assert!(!f.ctx.account_exists(&p.bid()));
        assert_eq!(f.ctx.token_balance(&c.tokens), before, "no funds moved");
    }
    let a = PlaceBidArgs {
        regions: vec![region("eu-central")],
        ..f.spot_args(100 * TOKEN)
    };
    let bid = f.place(&c, a);
    f.allocate(bid, &[0, 1, 2, 3])
        .expect("a spot bid for its region");
}
