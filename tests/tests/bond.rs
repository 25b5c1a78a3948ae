//! A host's stake backs its machines: each registered machine bonds the market's
//! `min_host_stake` as it stood at registration until the machine is closed (which its leases must all have settled
//! for), so the stake a silent host is slashed from cannot have left. On the SBF build in
//! LiteSVM; every refused step is checked to move nothing.

use gpu_market_tests::lease_fixture;
use gpu_market_tests::program_test;

use gpu_market::errors::MarketError;
use gpu_market::pda;
use gpu_market::state::{Machine, MachineStatus, Market, StakeAccount};
use gpu_market_sdk::{
    CloseMachine, RegisterMachine, RequestUnstake, SetMachineStatus, Stake, WithdrawStake,
};
use lease_fixture::*;
use program_test::*;
use solana_signer::Signer;

/// The host asks `amount` of its stake back.
fn unstake(f: &mut Fixture, amount: u64) -> Result<(), Failure> {
    let owner = f.host.key.insecure_clone();
    f.ctx
        .run(&RequestUnstake {
            owner: &owner,
            market: f.market,
            amount,
        })
        .map(drop)
}

/// `c` gets a 1-GPU lease on the machine, whose host then proves nothing for two intervals, and a
/// stranger slashes it.
fn slash_a_silent_lease(f: &mut Fixture, c: &Wallet) {
    let a = f.queue_args(1, 8);
    let bid = f.place(c, a);
    let lease = f.allocate(bid, &[0]).unwrap();
    f.ctx.advance_time(3 * INTERVAL);
    prove(f, lease, 2);
    slash_by_stranger(f).expect("slash");
}

fn host_stake(f: &Fixture) -> StakeAccount {
    f.ctx
        .account(&pda::stake(&f.market, &f.host.key.pubkey()).0)
}

#[test]
fn a_host_cannot_take_back_the_stake_a_silent_lease_is_slashed_from() {
    let mut f = fixture();
    // The host staked 100; its machine bonds min_host_stake = 10.
    assert_eq!(host_stake(&f).machines, 1);
    let c = f.client(100 * TOKEN, 0);
    let before = f.ledger(&c);
    // Before the bond, all 100 could be asked back and withdrawn while the machine ran leases.
    let err = unstake(&mut f, 100 * TOKEN).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::HostStakeBonded));
    let err = unstake(&mut f, 91 * TOKEN).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::HostStakeBonded));
    assert_eq!(f.ledger(&c), before, "a refused unstake moves nothing");
    assert_eq!(host_stake(&f).amount, 100 * TOKEN);

    // What is not bonded leaves, after the cooldown.
    unstake(&mut f, 90 * TOKEN).expect("request_unstake");
    f.ctx.advance_time(600);
    f.ctx
        .run(&WithdrawStake {
            owner: &f.host.key,
            market: f.market,
            stake_mint: f.mint,
            owner_tokens: f.host.tokens,
        })
        .expect("withdraw_stake");
    assert_eq!(host_stake(&f).amount, 10 * TOKEN);

    // A lease whose host then goes silent for two intervals: the slash finds the bond.
    slash_a_silent_lease(&mut f, &c);
    let after = f.ledger(&c);
    assert_eq!(after.slashed_due, TOKEN, "10 % of the bonded 10");
    assert_eq!(host_stake(&f).amount, 9 * TOKEN);
    // Below its bond now, the stake can be topped up but not asked back.
    let err = unstake(&mut f, TOKEN).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::HostStakeBonded));
}

#[test]
fn each_machine_bonds_its_part_and_closing_it_releases_it() {
    let mut f = fixture();
    let host = f.host.key.insecure_clone();
    let second = RegisterMachine {
        owner: &host,
        market: f.market,
        id: 1,
        terms: machine_terms(&f.agent.pubkey()),
    };
    // 100 staked, 90 asked back and withdrawn: the 10 left bond the first machine, none is left
    // for a second.
    unstake(&mut f, 90 * TOKEN).expect("request_unstake");
    f.ctx.advance_time(600);
    f.ctx
        .run(&WithdrawStake {
            owner: &host,
            market: f.market,
            stake_mint: f.mint,
            owner_tokens: f.host.tokens,
        })
        .expect("withdraw_stake");
    let err = f.ctx.run(&second).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::HostStakeTooLow));
    assert_eq!(host_stake(&f).machines, 1, "nothing changed");
    f.ctx
        .run(&Stake {
            owner: &f.host.key,
            market: f.market,
            stake_mint: f.mint,
            owner_tokens: f.host.tokens,
            amount: 10 * TOKEN,
        })
        .expect("stake");
    f.ctx.run(&second).expect("a second machine, bonded");
    let s = host_stake(&f);
    assert_eq!((s.machines, s.amount), (2, 20 * TOKEN));
    let err = unstake(&mut f, TOKEN).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::HostStakeBonded));

    // Retired and closed (no lease ever ran on it), the second machine releases its 10.
    let machine = second.machine();
    f.ctx
        .run(&SetMachineStatus {
            owner: &f.host.key,
            market: f.market,
            machine,
            status: MachineStatus::Retired,
        })
        .unwrap();
    let m: Machine = f.ctx.account(&machine);
    assert_eq!(m.leases, 0);
    f.ctx
        .run(&CloseMachine {
            owner: &f.host.key,
            market: f.market,
            machine,
            spot_book: None,
        })
        .expect("close_machine");
    assert_eq!(host_stake(&f).machines, 1);
    unstake(&mut f, 10 * TOKEN).expect("the released part can be asked back");
    let err = unstake(&mut f, TOKEN).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::HostStakeBonded));
}

/// The authority raises `min_host_stake` as far as it goes: a registered machine keeps the bond
/// it was registered with (its host can still ask back everything above it, and a slash takes
/// its share of that bond), and only a new machine needs the new minimum.
#[test]
fn raising_min_host_stake_binds_new_machines_only() {
    let mut f = fixture();
    let m: Market = f.ctx.account(&f.market);
    let mut raised = m.params;
    raised.min_host_stake = u64::MAX;
    f.ctx.change_market(&f.authority, f.market, raised);
    assert_eq!(
        f.ctx.account::<Machine>(&f.machine).bond,
        10 * TOKEN,
        "the bond it was registered with"
    );
    // The host staked 100, of which its machine bonds 10: 90 may leave, not 91.
    let err = unstake(&mut f, 91 * TOKEN).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::HostStakeBonded));
    unstake(&mut f, 90 * TOKEN).expect("everything above the machine's bond");
    assert_eq!(host_stake(&f).bonded, 10 * TOKEN);
    // A second machine needs the new minimum.
    let owner = f.host.key.insecure_clone();
    let before = f.ctx.svm.get_account(&f.market).expect("market").data;
    let err = f
        .ctx
        .run(&RegisterMachine {
            owner: &owner,
            market: f.market,
            id: 9,
            terms: f.ctx.account::<Machine>(&f.machine).terms(),
        })
        .unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::HostStakeTooLow));
    assert_eq!(
        f.ctx.svm.get_account(&f.market).expect("market").data,
        before,
        "a refused registration changes nothing"
    );
    // A silent lease's slash takes its share (10 %) of the machine's 10, not of the new minimum.
    let c = f.client(100 * TOKEN, 0);
    slash_a_silent_lease(&mut f, &c);
    assert_eq!(f.ledger(&c).slashed_due, TOKEN, "10 % of the bond of 10");
}
