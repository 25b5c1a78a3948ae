use anchor_lang::prelude::*;
use anchor_lang::system_program;
use anchor_spl::token::{Mint, Token, TokenAccount};
use gpu_market_core::fit::{Host, Need, Regions, Room, Terms, Unfit};
use gpu_market_core::score;
use gpu_market_core::settlement::{bid_escrow, escrow_for, spend_per_hour};

use crate::errors::MarketError;
use crate::events::{BidCancelled, BidPlaced, BidRemoval, BidToppedUp};
use crate::instructions::{
    client_pays, grow_book, lease_rent, load_book, load_book_mut, refund_escrow, shrink_book,
    slot_rent,
};
use crate::state::{
    ports_valid, regions_valid, seeds, Bid, BidBook, BidData, BidKind, BidStatus, BookKey, Freed,
    Machine, MachineStatus, Market, OverclockTerms, StakeAccount, IMAGE_REF_LEN,
    MAX_AUTO_POWER_TOLERANCE_BPS, MAX_GANG_PARTS, MAX_GPUS, REGION_LEN,
};

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Debug)]
pub struct PlaceBidArgs {
    pub kind: BidKind,
    pub image_ref: String,
    pub image_digest: [u8; 32],
    pub env_hash: [u8; 32],
    pub gpu_count: u8,
    pub gib_per_gpu: u16,
    pub accepted_classes: u8,
    /// One entry per GPU, or one entry for every GPU. The power limit is mandatory in each.
    pub overclock: Vec<OverclockTerms>,
    pub price: u64,
    pub max_duration_secs: u32,
    /// The shortest run the client accepts (at most `max_duration_secs`): the bid may start
    /// until `deadline` less this, and runs until its deadline when it starts after `deadline`
    /// less `max_duration_secs`. Equal to `max_duration_secs`: never started late.
    pub min_duration_secs: u32,
    /// The latest end of the bid's run.
    pub deadline: i64,
    /// Paid at placement and never refunded: it buys urgency (U) in the bid's score.
    pub urgency_premium: u64,
    /// Container ports to publish on the machine's address (at most 4, distinct, non-zero).
    pub ports: Vec<u16>,
    /// GiB of scratch volume at the container's `/workspace` (0: none).
    pub scratch_gib: u16,
    /// Thousandths of a CPU core and MiB of memory the machine holds for the lease; the
    /// container gets them as its limits (0: its GPU memory's share of what the machine gives all
    /// its leases, `Host::or_share`).
    pub cpu_milli: u32,
    pub memory_mib: u32,
    /// The regions whose machines may run it (at most 4 labels; none: any).
    pub regions: Vec<[u8; REGION_LEN]>,
    /// Auto power: the share of throughput (bps, at most `MAX_AUTO_POWER_TOLERANCE_BPS`) the
    /// host may trade for a lower power limit than the stated one; `None`: the limits hold.
    pub auto_power: Option<u16>,
}

impl PlaceBidArgs {
    /// The latest time the bid may start: its deadline less the shortest run it accepts.
    pub fn latest_start(&self) -> i64 {
        gpu_market_core::lease::latest_start(self.deadline, self.min_duration_secs)
    }

    /// The terms of each of the bid's GPUs, in its GPU order (one entry stands for all).
    pub fn overclock_per_gpu(&self) -> Vec<gpu_market_core::overclock::OverclockTerms> {
        let one = self.overclock.len() == 1;
        (0..self.gpu_count as usize)
            .filter_map(|i| self.overclock.get(if one { 0 } else { i }))
            .map(OverclockTerms::to_core)
            .collect()
    }

    /// What the fit rule needs of the bid; `settings` is [`PlaceBidArgs::overclock_per_gpu`].
    pub fn need<'a>(
        &'a self,
        settings: &'a [gpu_market_core::overclock::OverclockTerms],
    ) -> Need<'a> {
        Need {
            gpu_count: self.gpu_count,
            gib_per_gpu: self.gib_per_gpu,
            accepted_classes: self.accepted_classes,
            price: self.price,
            latest_start: self.latest_start(),
            terms: Terms::of(settings),
            room: Room {
                ports: self.ports.len() as u8,
                scratch_gib: self.scratch_gib,
                host: Host {
                    cpu_milli: self.cpu_milli,
                    memory_mib: self.memory_mib,
                },
            },
            regions: Regions::of(&self.regions),
        }
    }
}

#[derive(Accounts)]
#[instruction(nonce: u64)]
pub struct PlaceBid<'info> {
    #[account(mut)]
    pub client: Signer<'info>,

    #[account(
        mut, dup,
        constraint = market.payment_mint == payment_mint.key() @ ErrorCode::ConstraintHasOne,
        constraint = market.payment_vault == payment_vault.key() @ ErrorCode::ConstraintHasOne,
    )]
    pub market: Box<Account<'info, Market>>,

    /// The new bid's account, created by the handler rather than by `init`: one
    /// `create_account` pays its rent and its slot's in the book (`PlaceBid::create_bid`).
    /// CHECK: the seeds check its address; creating it fails if another program owns it.
    #[account(
        mut,
        seeds = [seeds::BID, market.key().as_ref(), client.key().as_ref(), &nonce.to_le_bytes()],
        bump,
    )]
    pub bid: UncheckedAccount<'info>,

    /// The queue book of the market, or the spot book of `machine`.
    #[account(mut)]
    pub book: AccountLoader<'info, BidBook>,

    /// The target of a spot bid; for a queue bid, its witness: an active machine it could run
    /// on once that machine's leases are gone (any one; the client finds it), so that no bid
    /// that fits no machine waits in the book, counts as demand or outranks one that fits.
    #[account(constraint = machine.market == market.key() @ ErrorCode::ConstraintHasOne)]
    pub machine: Box<Account<'info, Machine>>,

    /// The client's stake account (opened with `open_stake`; its amount may be zero): S of
    /// the score, and the client's GPU count for the anti-monopoly cap. A stake account exists
    /// only at its address (`open_stake` creates it there), so its own `market` and `owner`
    /// name it as surely as its seeds, for 1.6k fewer compute units than deriving them.
    #[account(
        mut, dup,
        constraint = client_stake.market == market.key() && client_stake.owner == client.key()
            @ MarketError::WrongStakeAccount,
    )]
    pub client_stake: Box<Account<'info, StakeAccount>>,

    pub payment_mint: Box<Account<'info, Mint>>,

    #[account(mut, dup, token::mint = payment_mint, token::authority = client)]
    pub client_tokens: Box<Account<'info, TokenAccount>>,

    #[account(mut, dup)]
    pub payment_vault: Box<Account<'info, TokenAccount>>,

    pub token_program: Program<'info, Token>,
    pub system_program: Program<'info, System>,

    /// Only when the book is full: its lowest-ranked bid, which the new bid evicts (if it
    /// outranks it) with its escrow, less its holding charge, and its rent back to that bid's client.
    #[account(mut, dup, constraint = evicted.market == market.key() @ ErrorCode::ConstraintHasOne)]
    pub evicted: Option<Box<Account<'info, Bid>>>,

    /// CHECK: must be `evicted.client` (checked in the handler); receives the evicted bid's rent.
    #[account(mut)]
    pub evicted_client: Option<UncheckedAccount<'info>>,

    /// A token account of the evicted bid's client for the payment mint: gets its escrow.
    /// Absent (that client may have closed it), the escrow is owed by its stake account
    /// (`refunds_due`): no client can make its bid unevictable.
    #[account(mut, dup, token::mint = payment_mint)]
    pub evicted_tokens: Option<Box<Account<'info, TokenAccount>>>,

    /// The evicted bid's client's stake account; absent when that client is the bidder. Never
    /// the bidder's own: both are written back at the end, and the second write would undo the
    /// first (the bidder's open bids).
    #[account(
        mut, dup,
        constraint = evicted_stake.key() != client_stake.key() @ MarketError::WrongStakeAccount,
    )]
    pub evicted_stake: Option<Box<Account<'info, StakeAccount>>>,
}

impl PlaceBid<'_> {
    /// Checks the bid against the market and its machine; returns the longest it may wait to
    /// start (seconds from now to its latest start), which its escrow covers too.
    fn validate(&self, args: &PlaceBidArgs, now: i64) -> Result<u64> {
        require!(
            (1..=MAX_GPUS).contains(&(args.gpu_count as usize)),
            MarketError::BadGpuCount
        );
        require!(args.gib_per_gpu > 0, MarketError::BadGpuMemory);
        require!(args.accepted_classes != 0, MarketError::NoGpuClass);
        require!(args.price > 0, MarketError::ZeroAmount);
        require!(args.max_duration_secs > 0, MarketError::ZeroAmount);
        require!(
            args.image_ref.len() <= IMAGE_REF_LEN,
            MarketError::ImageRefTooLong
        );
        require!(ports_valid(&args.ports), MarketError::BadPorts);
        require!(regions_valid(&args.regions), MarketError::BadRegions);
        require!(
            args.auto_power
                .is_none_or(|t| t <= MAX_AUTO_POWER_TOLERANCE_BPS),
            MarketError::BadAutoPower
        );
        let terms = args.overclock.len();
        require!(
            terms == 1 || terms == args.gpu_count as usize,
            MarketError::BadOverclockCount
        );
        require!(
            args.overclock.iter().all(|t| t.power_limit_w > 0),
            MarketError::PowerLimitMissing
        );
        require!(
            args.min_duration_secs <= args.max_duration_secs,
            MarketError::MinDurationTooLong
        );
        let latest_start = args.latest_start();
        require!(latest_start >= now, MarketError::DeadlineTooSoon);
        // Queue and spot bids alike: a spot bid with no bound could hold its machine's book,
        // and so the host's bond, for as long as its client liked.
        require!(
            ((latest_start - now) as u64) <= self.market.max_wait_secs(),
            MarketError::DeadlineTooFar
        );
        // A lease bills and proves by whole intervals: a shorter bid would only hold a place.
        require!(
            args.min_duration_secs >= self.market.params.billing_interval_secs,
            MarketError::BidShorterThanInterval
        );
        let book = match args.kind {
            BidKind::Queue => self.market.queue_book,
            BidKind::Spot => self.machine.spot_book,
        };
        require_keys_eq!(self.book.key(), book, MarketError::WrongBook);
        let machine = &self.machine;
        require!(
            machine.status == MachineStatus::Active,
            MarketError::MachineNotActive
        );
        // At most two distinct term sets: what a book entry holds exactly.
        let settings = args.overclock_per_gpu();
        require!(
            Terms::summarise(&settings).is_some(),
            MarketError::TooManyTermSets
        );
        // Every region named is one the market lists, so its book entry decides it exactly.
        self.market.region_filter(&args.regions)?;
        // The bid must fit the machine once its running leases are gone: the same fit rule
        // as `allocate`, on a machine with every GPU free, at the machine's floor and (queue
        // bids) the market's reserve price now.
        let offer = machine.offer(&self.market, args.kind, now, &Freed::all())?;
        let need = args.need(&settings);
        // The quick answer first; the full rule only to name the reason for a refusal.
        if !offer.fits(&need) {
            let unfit = offer.fit(&need).err().unwrap_or(Unfit::Busy);
            return err!(MarketError::from(unfit));
        }
        Ok((latest_start - now) as u64)
    }

    /// Makes room in a full book for a bid ranked at `newcomer`: its lowest-ranked entry leaves
    /// with its escrow (less its holding charge) and rent back, as in an order book; a newcomer that does not outrank it is refused.
    fn evict_worst(&mut self, newcomer: BookKey, now: i64) -> Result<()> {
        let info = self.book.to_account_info();
        let worst = *load_book(&info)?.worst().ok_or(MarketError::BookNotFound)?;
        require!(newcomer < worst.key(), MarketError::BookFullOfBetterBids);
        let missing = || error!(MarketError::EvictionMissing);
        let evicted = self.evicted.as_mut().ok_or_else(missing)?;
        require_keys_eq!(evicted.key(), worst.bid, MarketError::EvictionMissing);
        // A bidder outbidding its own entry: its own accounts stand for the evicted client's,
        // as one account must not be passed twice.
        let own = evicted.client == self.client.key();
        let (tokens, stake) = if own {
            require!(
                self.evicted_client.is_none()
                    && self.evicted_tokens.is_none()
                    && self.evicted_stake.is_none(),
                MarketError::EvictionMissing
            );
            (
                Some(self.client_tokens.to_account_info()),
                &mut self.client_stake,
            )
        } else {
            let to = self.evicted_client.as_ref().ok_or_else(missing)?;
            require_keys_eq!(to.key(), evicted.client, MarketError::EvictionMissing);
            let tokens = match self.evicted_tokens.as_ref() {
                Some(tokens) => {
                    require_keys_eq!(tokens.owner, evicted.client, MarketError::EvictionMissing);
                    Some(tokens.to_account_info())
                }
                None => None,
            };
            let stake = self.evicted_stake.as_mut().ok_or_else(missing)?;
            require!(
                stake.market == self.market.key() && stake.owner == evicted.client,
                MarketError::WrongStakeAccount
            );
            (tokens, stake)
        };
        let refund =
            self.market
                .take_out(worst.bid, evicted, &mut load_book_mut(&info)?, stake, now)?;
        // Its slot's rent goes back with the evicted bid's account (`close_evicted`).
        shrink_book(&info, &evicted.to_account_info(), slot_rent(&Rent::get()?))?;
        refund_escrow(
            &mut self.market,
            stake,
            tokens,
            self.payment_vault.to_account_info(),
            &self.payment_mint,
            &self.token_program,
            refund,
        )?;
        emit!(BidCancelled {
            bid: worst.bid,
            refund,
            reason: BidRemoval::Evicted,
        });
        Ok(())
    }

    /// Closes the evicted bid's account, its rent to its client. Last, after every CPI: a CPI
    /// that carries the receiving account (the bidder's own, when it evicts its own entry) but
    /// not the closed one would see the lamports moved only halfway.
    fn close_evicted(&self) -> Result<()> {
        let Some(evicted) = self.evicted.as_ref() else {
            return Ok(());
        };
        let to = match self.evicted_client.as_ref() {
            Some(to) => to.to_account_info(),
            None => self.client.to_account_info(),
        };
        evicted.close(to)
    }

    /// Creates the bid's account at its address, owned by the program, with `space` bytes and
    /// lamports for its rent and for `slot`, its place in the book (`grow_book` moves that on),
    /// and its gang's lease rent.
    /// As Anchor's `init`: lamports someone sent to the address first are kept, and the
    /// account is allocated and assigned instead of created.
    fn create_bid(&self, rent: &Rent, nonce: u64, bump: u8, space: usize, slot: u64) -> Result<()> {
        let lamports = rent
            .minimum_balance(space)
            .checked_add(slot)
            .ok_or(MarketError::Overflow)?;
        let (market, client) = (self.market.key(), self.client.key());
        let nonce = nonce.to_le_bytes();
        let signer: &[&[&[u8]]] = &[&[
            seeds::BID,
            market.as_ref(),
            client.as_ref(),
            &nonce,
            &[bump],
        ]];
        let program = self.system_program.key();
        let (from, to) = (self.client.to_account_info(), self.bid.to_account_info());
        let held = to.lamports();
        if held == 0 {
            return system_program::create_account(
                CpiContext::new_with_signer(
                    program,
                    system_program::CreateAccount { from, to },
                    signer,
                ),
                lamports,
                space as u64,
                &crate::ID,
            );
        }
        if lamports > held {
            system_program::transfer(
                CpiContext::new(
                    program,
                    system_program::Transfer {
                        from,
                        to: to.clone(),
                    },
                ),
                lamports - held,
            )?;
        }
        system_program::allocate(
            CpiContext::new_with_signer(
                program,
                system_program::Allocate {
                    account_to_allocate: to.clone(),
                },
                signer,
            ),
            space as u64,
        )?;
        system_program::assign(
            CpiContext::new_with_signer(
                program,
                system_program::Assign {
                    account_to_assign: to,
                },
                signer,
            ),
            &crate::ID,
        )
    }

    /// Places a bid that runs on `parts` machines at once, `args.gpu_count` GPUs on each (1:
    /// an ordinary bid). A gang's escrow pays for all its parts, and its account holds, besides
    /// its book slot's rent, the rent of each part's lease (`allocate_gang` pays them from it).
    pub fn place_bid(ctx: Context<Self>, nonce: u64, args: PlaceBidArgs, parts: u8) -> Result<()> {
        let now = Clock::get()?.unix_timestamp;
        let wait_secs = ctx.accounts.validate(&args, now)?;
        require!(
            (1..=MAX_GANG_PARTS).contains(&parts),
            MarketError::BadGangParts
        );
        require!(
            parts == 1 || args.kind == BidKind::Queue,
            MarketError::GangSpotBid
        );
        require!(
            parts == 1 || !args.ports.is_empty(),
            MarketError::GangNeedsPort
        );
        let (unit, gpus) = (args.kind.unit(), args.gpu_count as u64 * parts as u64);
        let run = args.max_duration_secs as u64;
        // The score's urgency counts against the run's escrow; the bid locks its wait too.
        let run_escrow = escrow_for(args.price, unit, gpus, run).map_err(MarketError::from)?;
        let escrow =
            bid_escrow(args.price, unit, gpus, run, wait_secs).map_err(MarketError::from)?;

        let market = &mut ctx.accounts.market;
        let spend_per_hour = spend_per_hour(args.price, unit, gpus).map_err(MarketError::from)?;
        let p = &market.params;
        let inputs = p.score_inputs(
            ctx.accounts.client_stake.amount,
            spend_per_hour,
            run_escrow,
            args.urgency_premium,
        )?;
        let base = score::base_score(p.weights(), &inputs);
        let stake = &mut ctx.accounts.client_stake;
        stake.touch(now);
        stake.open_bids = stake
            .open_bids
            .checked_add(1)
            .ok_or(MarketError::Overflow)?;
        let rank = market.rank_key(base, now, args.max_duration_secs);
        if args.kind == BidKind::Queue {
            market.tick_demand(now);
            market.add_waiting(gpus as i64)?;
        }

        // The client pays for the bid's account and its slot in the book at once; the bid
        // account holds the slot's rent whenever the bid is out of its book, and gives it back
        // when it closes. A gang's holds its parts' lease rent as well.
        let rent = Rent::get()?;
        let slot = slot_rent(&rent);
        let leases = match parts {
            1 => 0,
            n => lease_rent(&rent)
                .checked_mul(n as u64)
                .ok_or(MarketError::Overflow)?,
        };
        let space = Bid::space(
            args.overclock.len(),
            args.image_ref.len(),
            args.ports.len(),
            args.regions.len(),
        );
        let held = slot.checked_add(leases).ok_or(MarketError::Overflow)?;
        ctx.accounts
            .create_bid(&rent, nonce, ctx.bumps.bid, space, held)?;
        let market = &mut ctx.accounts.market;
        let mut bid = Bid {
            data: BidData {
                market: market.key(),
                client: ctx.accounts.client.key(),
                machine: match args.kind {
                    BidKind::Spot => ctx.accounts.machine.key(),
                    BidKind::Queue => Pubkey::default(),
                },
                refund_tokens: ctx.accounts.client_tokens.key(),
                image_digest: args.image_digest,
                env_hash: args.env_hash,
                reserved_on: Pubkey::default(),
                price: args.price,
                deadline: args.deadline,
                escrow,
                urgency_premium: args.urgency_premium,
                score: base,
                book_key: 0,
                seq: 0,
                placed_at: now,
                full_secs_at_entry: 0,
                max_duration_secs: args.max_duration_secs,
                min_duration_secs: args.min_duration_secs,
                cpu_milli: args.cpu_milli,
                memory_mib: args.memory_mib,
                gib_per_gpu: args.gib_per_gpu,
                scratch_gib: args.scratch_gib,
                gpu_count: args.gpu_count,
                accepted_classes: args.accepted_classes,
                bump: ctx.bumps.bid,
                parts,
                parts_running: 0,
                gang_flags: 0,
                reserved_round: 0,
                pad: [0; 4],
            },
            kind: args.kind,
            status: BidStatus::Open,
            image_ref: args.image_ref.clone(),
            overclock: args.overclock,
            ports: args.ports,
            regions: args.regions.clone(),
            auto_power: args.auto_power,
        };
        // Queue bids rank by score (with aging); spot bids by the host's profit (GigaSPOT).
        let key = match args.kind {
            BidKind::Spot => bid.spot_profit(&ctx.accounts.machine)?,
            BidKind::Queue => rank,
        };
        let bid_key = ctx.accounts.bid.key();
        let book = ctx.accounts.book.to_account_info();
        let evicting = load_book(&book)?.is_full();
        if evicting {
            let newcomer = BookKey::new(key, market.next_bid_seq);
            ctx.accounts.evict_worst(newcomer, now)?;
        }
        grow_book(&book, &ctx.accounts.bid.to_account_info(), slot)?;
        let market = &mut ctx.accounts.market;
        market.enqueue(bid_key, &mut bid, &mut load_book_mut(&book)?, key, now)?;
        bid.try_serialize(&mut &mut ctx.accounts.bid.try_borrow_mut_data()?[..])?;
        market.total_escrow = market
            .total_escrow
            .checked_add(escrow)
            .ok_or(MarketError::Overflow)?;
        // The urgency premium is spent at once, and burnt: ranking first costs whoever asks,
        // the market's authority included.
        market.burn_due = market
            .burn_due
            .checked_add(args.urgency_premium)
            .ok_or(MarketError::Overflow)?;

        let a = &ctx.accounts;
        client_pays!(
            a,
            escrow
                .checked_add(args.urgency_premium)
                .ok_or(MarketError::Overflow)?
        )?;

        if evicting {
            ctx.accounts.close_evicted()?;
        }
        emit!(BidPlaced {
            market: ctx.accounts.market.key(),
            bid: bid_key,
            client: bid.client,
            kind: bid.kind,
            score: base,
            escrow,
            urgency_premium: args.urgency_premium,
        });
        Ok(())
    }
}

#[derive(Accounts)]
pub struct TopUpBid<'info> {
    pub client: Signer<'info>,

    #[account(
        mut, dup,
        constraint = market.payment_mint == payment_mint.key() @ ErrorCode::ConstraintHasOne,
        constraint = market.payment_vault == payment_vault.key() @ ErrorCode::ConstraintHasOne,
    )]
    pub market: Box<Account<'info, Market>>,

    #[account(
        mut, dup,
        constraint = bid.client == client.key() @ ErrorCode::ConstraintHasOne,
        constraint = bid.market == market.key() @ ErrorCode::ConstraintHasOne,
    )]
    pub bid: Box<Account<'info, Bid>>,

    pub payment_mint: Box<Account<'info, Mint>>,

    #[account(mut, dup, token::mint = payment_mint, token::authority = client)]
    pub client_tokens: Box<Account<'info, TokenAccount>>,

    #[account(mut, dup)]
    pub payment_vault: Box<Account<'info, TokenAccount>>,

    pub token_program: Program<'info, Token>,
}

impl TopUpBid<'_> {
    /// Adds `amount` to a waiting bid's escrow (more runway at the same price). A running
    /// bid's escrow is its lease's (`allocate` moved it there), so it takes none.
    pub fn top_up_bid(ctx: Context<Self>, amount: u64) -> Result<()> {
        require!(amount > 0, MarketError::ZeroAmount);
        let bid = &mut ctx.accounts.bid;
        require!(bid.status == BidStatus::Open, MarketError::BidRunning);
        bid.escrow = bid
            .escrow
            .checked_add(amount)
            .ok_or(MarketError::Overflow)?;
        let market = &mut ctx.accounts.market;
        market.total_escrow = market
            .total_escrow
            .checked_add(amount)
            .ok_or(MarketError::Overflow)?;
        let a = &ctx.accounts;
        client_pays!(a, amount)?;
        emit!(BidToppedUp {
            bid: a.bid.key(),
            amount,
            escrow: a.bid.escrow,
        });
        Ok(())
    }
}

/// Takes the waiting bid of `$a` (accounts with `market`, `bid`, `book`, `client_stake`,
/// `payment_vault`, `payment_mint`, `token_program`) out of its book and refunds its escrow,
/// less its holding charge, to `$to`, a token account of the client (or, absent, to its stake's `refunds_due`); the
/// event says why.
macro_rules! refund_waiting {
    ($a:expr, $now:expr, $reason:expr, $to:expr) => {{
        let to = $to;
        let a = &mut *$a;
        let bid_key = a.bid.key();
        let book = a.book.to_account_info();
        let refund = a.market.take_out(
            bid_key,
            &mut a.bid,
            &mut load_book_mut(&book)?,
            &mut a.client_stake,
            $now,
        )?;
        // The slot's rent goes back with the bid account, which closes to its client.
        shrink_book(&book, &a.bid.to_account_info(), slot_rent(&Rent::get()?))?;
        refund_escrow(
            &mut a.market,
            &mut a.client_stake,
            to,
            a.payment_vault.to_account_info(),
            &a.payment_mint,
            &a.token_program,
            refund,
        )?;
        emit!(BidCancelled {
            bid: bid_key,
            refund,
            reason: $reason,
        });
        Ok(())
    }};
}

#[derive(Accounts)]
pub struct CancelBid<'info> {
    #[account(mut)]
    pub client: Signer<'info>,

    #[account(
        mut, dup,
        constraint = market.payment_mint == payment_mint.key() @ ErrorCode::ConstraintHasOne,
        constraint = market.payment_vault == payment_vault.key() @ ErrorCode::ConstraintHasOne,
    )]
    pub market: Box<Account<'info, Market>>,

    #[account(
        mut, dup,
        constraint = bid.client == client.key() @ ErrorCode::ConstraintHasOne,
        constraint = bid.market == market.key() @ ErrorCode::ConstraintHasOne,
        close = client,
    )]
    pub bid: Box<Account<'info, Bid>>,

    /// The book the bid waits in.
    #[account(mut)]
    pub book: AccountLoader<'info, BidBook>,

    /// The client's stake (unlocked by one waiting bid).
    #[account(
        mut, dup,
        seeds = [seeds::STAKE, market.key().as_ref(), client.key().as_ref()],
        bump = client_stake.bump,
    )]
    pub client_stake: Box<Account<'info, StakeAccount>>,

    pub payment_mint: Box<Account<'info, Mint>>,

    #[account(mut, dup, token::mint = payment_mint, token::authority = client)]
    pub client_tokens: Box<Account<'info, TokenAccount>>,

    #[account(mut, dup)]
    pub payment_vault: Box<Account<'info, TokenAccount>>,

    pub token_program: Program<'info, Token>,
}

impl CancelBid<'_> {
    /// Takes a waiting bid out of its book and refunds its escrow, less its holding charge.
    pub fn cancel_bid(ctx: Context<Self>) -> Result<()> {
        let now = Clock::get()?.unix_timestamp;
        ctx.accounts.client_stake.touch(now);
        let to = ctx.accounts.client_tokens.to_account_info();
        refund_waiting!(ctx.accounts, now, BidRemoval::Cancelled, Some(to))
    }
}

/// Anyone may remove a bid whose latest start has passed: it can no longer run, and only clutters
/// the book. Escrow and rent go back to its client, nowhere else.
#[derive(Accounts)]
pub struct PruneBid<'info> {
    /// Whoever sends it (a keeper, an agent, the client): pays only the fee.
    pub caller: Signer<'info>,

    #[account(
        mut, dup,
        constraint = market.payment_mint == payment_mint.key() @ ErrorCode::ConstraintHasOne,
        constraint = market.payment_vault == payment_vault.key() @ ErrorCode::ConstraintHasOne,
    )]
    pub market: Box<Account<'info, Market>>,

    #[account(
        mut, dup,
        constraint = bid.client == client.key() @ ErrorCode::ConstraintHasOne,
        constraint = bid.market == market.key() @ ErrorCode::ConstraintHasOne,
        close = client,
    )]
    pub bid: Box<Account<'info, Bid>>,

    /// CHECK: the bid's client (the bid's constraint above); receives the bid account's rent.
    #[account(mut)]
    pub client: UncheckedAccount<'info>,

    /// The book the bid waits in.
    #[account(mut)]
    pub book: AccountLoader<'info, BidBook>,

    #[account(
        mut, dup,
        seeds = [seeds::STAKE, market.key().as_ref(), bid.data.client.as_ref()],
        bump = client_stake.bump,
    )]
    pub client_stake: Box<Account<'info, StakeAccount>>,

    pub payment_mint: Box<Account<'info, Mint>>,

    /// A token account of the bid's client for the payment mint: receives the escrow. Absent
    /// (its client may have closed it), the escrow is owed by the client's stake account
    /// (`refunds_due`): no client can make its expired bid unprunable.
    #[account(mut, dup, token::mint = payment_mint, token::authority = bid.client)]
    pub client_tokens: Option<Box<Account<'info, TokenAccount>>>,

    #[account(mut, dup)]
    pub payment_vault: Box<Account<'info, TokenAccount>>,

    pub token_program: Program<'info, Token>,

    /// A spot bid's machine: once retired, its waiting spot bids may be removed before their
    /// deadlines, so that the machine can always be closed.
    pub machine: Option<Box<Account<'info, Machine>>>,
}

impl PruneBid<'_> {
    pub fn prune_bid(ctx: Context<Self>) -> Result<()> {
        let now = Clock::get()?.unix_timestamp;
        let bid = &ctx.accounts.bid;
        let machine = match &ctx.accounts.machine {
            Some(m) => {
                require_keys_eq!(m.key(), bid.machine, MarketError::WrongMachine);
                Some(m.status)
            }
            None => None,
        };
        require!(bid.prunable(now, machine), MarketError::BidNotExpired);
        let reason = match bid.expired(now) {
            true => BidRemoval::Expired,
            false => BidRemoval::MachineRetired,
        };
        let to = ctx
            .accounts
            .client_tokens
            .as_ref()
            .map(|t| t.to_account_info());
        refund_waiting!(ctx.accounts, now, reason, to)
    }
}
