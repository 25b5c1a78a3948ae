use anchor_lang::prelude::*;
use gpu_market_core::fit::{Offer, Regions};
use gpu_market_core::lease::run_end;
use gpu_market_core::settlement::secs_covered;

use crate::errors::MarketError;
use crate::events::LeaseStarted;
use crate::instructions::{load_book, load_book_mut, shrink_book, slot_rent};
use crate::state::{
    seeds, Bid, BidBook, BidKind, BidStatus, BookKey, BookLeaf, BookWalk, Freed, Lease, LeaseRules,
    Machine, Market, Offers, StakeAccount, MAX_GPUS,
};

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Debug)]
pub struct AllocateArgs {
    /// The machine GPU that serves each of the bid's GPUs, in the bid's GPU order.
    pub gpus: Vec<u8>,
}

/// Remaining accounts, in any order: for a queue bid, the stake account of the client of each
/// book entry ranked above the chosen bid that fits the machine (the anti-monopoly cap decides
/// whether the entry may run first). A book entry decides fit exactly from what it holds, so
/// entries that do not fit need nothing, and the transaction's size does not grow with what
/// other bidders chose.
#[derive(Accounts)]
pub struct Allocate<'info> {
    /// The machine's agent; pays the lease's rent and gets it back when the lease closes.
    #[account(mut)]
    pub agent: Signer<'info>,

    #[account(mut, dup)]
    pub market: Box<Account<'info, Market>>,

    #[account(
        mut, dup,
        constraint = machine.market == market.key() @ ErrorCode::ConstraintHasOne,
        constraint = machine.agent == agent.key() @ MarketError::WrongAgent,
    )]
    pub machine: Box<Account<'info, Machine>>,

    /// The market's queue book (queue bids) or the machine's spot book (spot bids).
    #[account(mut)]
    pub book: AccountLoader<'info, BidBook>,

    #[account(mut, dup, constraint = bid.market == market.key() @ ErrorCode::ConstraintHasOne)]
    pub bid: Box<Account<'info, Bid>>,

    #[account(
        init,
        payer = agent,
        space = 8 + Lease::INIT_SPACE,
        seeds = [seeds::LEASE, bid.key().as_ref()],
        bump,
    )]
    pub lease: Box<Account<'info, Lease>>,

    #[account(
        mut, dup,
        seeds = [seeds::STAKE, market.key().as_ref(), bid.data.client.as_ref()],
        bump = client_stake.bump,
    )]
    pub client_stake: Box<Account<'info, StakeAccount>>,

    pub system_program: Program<'info, System>,
}

/// What the remaining accounts of `allocate` prove about book entries: (client, GPUs it holds)
/// from each stake account passed.
pub(crate) struct Evidence {
    stakes: Vec<(Pubkey, u32)>,
}

impl Evidence {
    pub(crate) fn read(remaining: &[AccountInfo], market: &Pubkey) -> Result<Self> {
        let mut stakes = Vec::with_capacity(remaining.len());
        for info in remaining {
            require_keys_eq!(*info.owner, crate::ID, MarketError::CandidatesMissing);
            let data = info.try_borrow_data()?;
            require!(
                data.starts_with(StakeAccount::DISCRIMINATOR),
                MarketError::CandidatesMissing
            );
            let stake = StakeAccount::try_deserialize(&mut &data[..])?;
            require_keys_eq!(stake.market, *market, MarketError::WrongStakeAccount);
            stakes.push((stake.owner, stake.gpus_held));
        }
        Ok(Evidence { stakes })
    }

    fn held_by(&self, client: &Pubkey) -> Result<u32> {
        self.stakes
            .iter()
            .find(|(c, _)| c == client)
            .map(|(_, held)| *held)
            .ok_or_else(|| error!(MarketError::CandidatesMissing))
    }
}

/// Whether the entry's bid fits `offer`, from its summary alone: its region and the
/// whole-machine bounds first (a few comparisons on the entry as stored), then the exact rule
/// on its one or two term sets as stored (`BidSummary::need` is not built: its copies and
/// conversions cost about half of what the rule itself does).
pub(crate) fn entry_fits(offer: &Offer, leaf: &BookLeaf) -> bool {
    let s = &leaf.summary;
    offer.accepts(Regions::from_filter(u32::from_le_bytes(s.regions)))
        && !offer.rules_out(
            s.gpu_count,
            s.gib_per_gpu,
            s.accepted_classes,
            s.price,
            s.latest_start,
            s.room(),
        )
        && offer.sets_fit(
            s.gpu_count,
            s.gib_per_gpu,
            s.accepted_classes,
            s.price,
            &s.terms_first,
            (s.second_count > 0).then_some((&s.terms_second, s.second_count)),
        )
}

/// The book backs the choice of `chosen` (the bid and its key, its client's stake holding
/// `chosen_held` GPUs) for the machines behind `fits` (whether an entry starting now fits one of
/// them): every entry ranked above it that fits one of them must give
/// way to it, which only an entry over its client's anti-monopoly cap does while the chosen bid
/// is within its own. A chosen bid over the cap runs only when nothing else fits: no entry above
/// it, and no entry below it within its client's cap.
/// A reservation counts as it does for the chosen bid: each entry is judged against the offer
/// its own run would get ([`Offers::for_run`]). A gang's entry takes several machines at once
/// (`allocate_gang`): it never holds back a bid that one machine can run, nor another gang.
/// `fits` is a type parameter so that each caller's walk is compiled for its own test: one
/// machine's (`allocate`, [`fits_one`]) without a loop over machines, which is most of the
/// walk's cost per entry.
pub(crate) fn book_backs(
    book: &AccountInfo,
    market: &Market,
    (bid, chosen): (&Bid, Pubkey),
    chosen_held: u32,
    evidence: &Evidence,
    fits: impl Fn(&BookLeaf) -> bool,
    now: i64,
) -> Result<()> {
    let queue = bid.kind == BidKind::Queue;
    let chosen_seq = bid.seq;
    let held_by = |client: &Pubkey| -> Result<u32> {
        if *client == bid.client {
            Ok(chosen_held)
        } else {
            evidence.held_by(client)
        }
    };
    let within_cap = |client: &Pubkey, gpus: u64| -> Result<bool> {
        Ok(!queue || market.within_client_cap(held_by(client)? as u64, gpus, now))
    };
    let chosen_within = within_cap(&bid.client, bid.total_gpus())?;
    let book = load_book(book)?;
    let mut above = true;
    for leaf in book.iter() {
        // Placement numbers are unique in a market: one comparison finds the chosen entry.
        if leaf.seq == chosen_seq && leaf.bid == chosen {
            if chosen_within {
                return Ok(());
            }
            above = false;
            continue;
        }
        if !fits(leaf) || leaf.summary.is_gang() {
            continue;
        }
        let within = within_cap(&leaf.summary.client, leaf.summary.gpu_count as u64)?;
        if above {
            require!(chosen_within && !within, MarketError::BetterBidFeasible);
        } else {
            require!(!within, MarketError::ClientCapReached);
        }
    }
    if above {
        return err!(MarketError::BookNotFound);
    }
    Ok(())
}

/// Whether an entry starting at `now` fits the machine behind `offers`, against the offer its
/// own run would get.
pub(crate) fn fits_one(offers: &Offers, now: i64) -> impl Fn(&BookLeaf) -> bool + '_ {
    move |leaf| {
        entry_fits(
            offers.for_run(&leaf.bid, leaf.summary.runs_until(now)),
            leaf,
        )
    }
}

/// `machine`'s walk of `book` (`walk_book`), if it has one that still holds for `offers`.
pub(crate) fn walk_holding<'m>(
    machine: &'m Machine,
    offers: &Offers,
    book: &Pubkey,
) -> Option<&'m BookWalk> {
    let walk = &machine.walk;
    if walk.started == 0 || walk.book != *book {
        return None;
    }
    walk.holds(book, &BookWalk::seal_of(offers)).then_some(walk)
}

/// Takes `bid` out of its `book` as it starts: its holding charge taken (returned), its entry
/// removed and the slot's rent back to the bid's account, which keeps it while the bid runs;
/// its reservations' round ends.
pub(crate) fn leave_book(
    market: &mut Market,
    bid: &mut Account<Bid>,
    book: &AccountInfo,
    now: i64,
) -> Result<u64> {
    let mut entries = load_book_mut(book)?;
    // Waiting in a full book is paid for whether the bid then runs or not.
    let held = market.charge_holding(bid, &entries.head, now)?;
    let leaf = entries
        .remove_at(now, BookKey::new(bid.book_key, bid.seq))
        .map_err(MarketError::from)?;
    drop(entries);
    require_keys_eq!(leaf.bid, bid.key(), MarketError::WrongBook);
    shrink_book(book, &bid.to_account_info(), slot_rent(&Rent::get()?))?;
    bid.status = BidStatus::Running;
    // Reservations it had on machines it does not start on hold nothing now, nor after a
    // failover puts it back in the queue.
    bid.reserved_round = bid.reserved_round.wrapping_add(1);
    Ok(held)
}

/// What a bid's start moves in its client's stake and the market's counts: one open bid less,
/// `gpus` held more, and for a queue bid (`queue`) as many GPUs fewer waiting, sampled on the
/// market's clock first.
pub(crate) fn bid_started(
    market: &mut Market,
    stake: &mut StakeAccount,
    (gpus, queue): (u64, bool),
    now: i64,
) -> Result<()> {
    stake.open_bids = stake
        .open_bids
        .checked_sub(1)
        .ok_or(MarketError::Overflow)?;
    stake.gpus_held = stake
        .gpus_held
        .checked_add(gpus as u32)
        .ok_or(MarketError::Overflow)?;
    market.tick_demand(now);
    if queue {
        market.add_waiting(-(gpus as i64))?;
    }
    Ok(())
}

/// When the lease of `bid` starting at `now` ends: its duration, shortened by a holding charge
/// (`held`) to what the rest of its escrow pays for, capped at its deadline.
pub(crate) fn run_end_of(bid: &Bid, held: u64, now: i64) -> Result<i64> {
    let runs_for = if held > 0 {
        (bid.max_duration_secs as u64).min(secs_covered(
            bid.price,
            bid.unit(),
            bid.total_gpus(),
            bid.escrow,
        ))
    } else {
        bid.max_duration_secs as u64
    };
    Ok(run_end(now, runs_for, bid.deadline).ok_or(MarketError::Overflow)?)
}

impl Allocate<'_> {
    /// The machine's offers to the book's bids; checks that the bid fits on the GPUs chosen,
    /// and that they leave the machine's reservation what it holds.
    fn validate(&self, args: &AllocateArgs, now: i64) -> Result<Offers> {
        let (machine, bid, market) = (&self.machine, &self.bid, &self.market);
        require!(bid.status == BidStatus::Open, MarketError::BidRunning);
        require!(!bid.is_gang(), MarketError::GangNeedsAllocateGang);
        let book = match bid.kind {
            BidKind::Queue => market.queue_book,
            BidKind::Spot => {
                require_keys_eq!(bid.machine, machine.key(), MarketError::WrongBook);
                machine.spot_book
            }
        };
        require_keys_eq!(self.book.key(), book, MarketError::WrongBook);
        require!(args.gpus.len() <= MAX_GPUS, MarketError::BadGpuCount);
        let offers = machine.offers(market, bid.kind, now, &Freed::default())?;
        let overclock = bid.overclock_per_gpu();
        let need = bid.need(&overclock);
        offers
            .now
            .check_choice(&need, &args.gpus)
            .map_err(MarketError::from)?;
        let offer = offers.for_run(&bid.key(), bid.runs_until(now));
        require!(
            offer.check_choice(&need, &args.gpus).is_ok(),
            MarketError::GpusReserved
        );
        Ok(offers)
    }

    /// The book backs the choice ([`book_backs`]) for this one machine. Entries the machine's
    /// walk of the book covers (`walk_book`), while it holds, are taken as it judged them.
    fn check_book(&self, remaining: &[AccountInfo], offers: &Offers, now: i64) -> Result<()> {
        let evidence = Evidence::read(remaining, &self.market.key())?;
        let info = self.book.to_account_info();
        let chosen: (&Bid, Pubkey) = (&self.bid, self.bid.key());
        let (market, held) = (&self.market, self.client_stake.gpus_held);
        let fits = fits_one(offers, now);
        // Two walks, each compiled for its own test: without a walk to consult, an entry costs
        // nothing more than its fit.
        match walk_holding(&self.machine, offers, &info.key()) {
            Some(w) => book_backs(
                &info,
                market,
                chosen,
                held,
                &evidence,
                |leaf: &BookLeaf| match w.covers(leaf) {
                    true => w.may_fit(leaf),
                    false => fits(leaf),
                },
                now,
            ),
            None => book_backs(&info, market, chosen, held, &evidence, fits, now),
        }
    }

    pub fn allocate<'info>(ctx: Context<'info, Allocate<'info>>, args: AllocateArgs) -> Result<()> {
        let now = Clock::get()?.unix_timestamp;
        let offers = ctx.accounts.validate(&args, now)?;
        ctx.accounts
            .check_book(ctx.remaining_accounts, &offers, now)?;

        let accounts = ctx.accounts;
        let bid = &mut accounts.bid;
        let n = bid.gpu_count;
        let info = accounts.book.to_account_info();
        let held = leave_book(&mut accounts.market, bid, &info, now)?;

        let spot = bid.kind == BidKind::Spot;
        let held_host = accounts.machine.lease_host(bid.host(), n, bid.gib_per_gpu);
        accounts
            .machine
            .take(&args.gpus, bid.gib_per_gpu, held_host, spot, |i| {
                bid.terms_of(i)
            })?;
        let market = &mut accounts.market;
        bid_started(market, &mut accounts.client_stake, (n as u64, !spot), now)?;
        let ends_at = run_end_of(bid, held, now)?;
        accounts.machine.reservation.lease_started(
            &bid.key(),
            (ends_at, held_host),
            now,
            market.silence_window_secs(),
        )?;
        let lease = &mut accounts.lease;
        lease.set_inner(Lease::of_bid(
            (market.key(), accounts.machine.key(), bid.key()),
            bid,
            (&args.gpus, held_host),
            (now, ends_at),
            LeaseRules::of(&market.params),
            ctx.bumps.lease,
        ));
        // The escrow moves to the lease, which pays its proofs out of it.
        bid.escrow = 0;
        emit!(LeaseStarted {
            lease: lease.key(),
            machine: lease.machine,
            bid: lease.bid,
            client: lease.client,
            kind: lease.kind,
            gpus: args.gpus,
            started_at: now,
            ends_at,
        });
        Ok(())
    }
}
