//! Regions: a bid may name the regions whose machines may run it, among those its market lists
//! (`add_region`). The fit rule refuses other machines; a book entry keeps the regions as indices
//! into the market's table, so it decides exactly and a bid above that does not accept the
//! machine's region never keeps a plainer bid waiting nor asks for evidence. On the SBF build in
//! LiteSVM.

use gpu_market_tests::lease_fixture;

use gpu_market::errors::MarketError;
use gpu_market::instructions::PlaceBidArgs;
use gpu_market::state::{Bid, Lease, REGION_LEN};
use gpu_market_tests::program_test::region;
use lease_fixture::*;
use solana_signer::Signer;

/// The fixture's machine, in eu-central; the market lists eu-central and us-east.
fn machine_in_eu() -> Fixture {
    let mut f = fixture();
    for r in ["eu-central", "us-east"] {
        f.add_region(region(r)).expect("add_region");
    }
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
    let in_us = f.other_machine(1, |t| t.region = region("us-east"));
    // The cap counts the GPUs offered when the billing interval began: the machines', from
    // the next interval on.
    f.ctx.advance_time(INTERVAL);
    let a = accepting(&mut f, &["us-east"]);
    // The fixture's machine is no witness for it: its region is not one the bid accepts.
    let p = f.placement(&d, a.clone());
    let err = f.ctx.run(&p).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::RegionNotAccepted));
    let elsewhere = f.place_via(&d, a, in_us);
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

/// The former attack: a label whose 32-bit hash collided with the machine's made the entry
/// undecidable, so each such bid above an honest one put its account into `allocate`. Labels are
/// now indices into the market's table: a label the market does not list is refused at
/// placement, a machine cannot declare one, and the table holds 32 at most.
#[test]
fn a_region_the_market_does_not_list_is_refused_and_the_table_is_the_authoritys() {
    let mut f = machine_in_eu();
    let c = f.client(100 * TOKEN, 0);
    let before = f.ledger(&c);
    // "r6" had eu-central's bit under the old 32-bit hash.
    for label in ["r6", "eu-west"] {
        let a = accepting(&mut f, &[label]);
        let p = f.placement(&c, a);
        let err = f.ctx.run(&p).unwrap_err();
        assert_eq!(
            err.custom_code(),
            code(MarketError::UnknownRegion),
            "{label}"
        );
        assert!(!f.ctx.account_exists(&p.bid()));
    }
    assert_eq!(f.ledger(&c), before, "no funds moved");
    // A machine cannot declare one either.
    let owner = f.host.key.insecure_clone();
    let mut terms = machine_terms(&f.agent.pubkey());
    terms.region = region("r6");
    let err = f
        .ctx
        .run(&gpu_market_sdk::instructions::UpdateMachine {
            owner: &owner,
            market: f.market,
            machine: f.machine,
            spot_book: None,
            terms,
        })
        .unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::UnknownRegion));
    // Only the authority lists; a region once; 32 at most; never an empty label.
    let stranger = f.ctx.wallet(1);
    let err = f
        .ctx
        .run(&gpu_market_sdk::instructions::AddRegion {
            authority: &stranger,
            market: f.market,
            region: region("r6"),
        })
        .unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::NotMarketAuthority));
    let err = f.add_region(region("us-east")).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::RegionListed));
    let err = f.add_region([0; REGION_LEN]).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::BadRegions));
    for i in 2..32 {
        f.add_region(region(&format!("r{i}"))).expect("room for 32");
    }
    let err = f.add_region(region("one-more")).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::RegionTableFull));
    let m: gpu_market::state::Market = f.ctx.account(&f.market);
    assert_eq!(m.regions[0], region("eu-central"));
    assert_eq!(m.regions[31], region("r31"));
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
        let p = f.placement(&c, args);
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
