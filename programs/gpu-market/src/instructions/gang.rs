//! Gang leases: one bid on several machines at once, started together or not at all.

use anchor_lang::prelude::*;
use anchor_lang::system_program;

use crate::errors::MarketError;
use crate::events::{GangRendezvous, LeaseStarted};
use crate::instructions::allocate::{
    bid_started, book_backs, fits_one, leave_book, run_end_of, walk_holding, Evidence,
};
use crate::instructions::lease_rent;
use crate::state::{
    seeds, Bid, BidBook, BidKind, BidStatus, BookLeaf, BookWalk, Freed, Lease, LeaseRules, Machine,
    Market, Offers, StakeAccount, MAX_GPUS,
};

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Debug)]
pub struct AllocateGangArgs {
    /// For each part, in the gang's order: the machine GPUs that serve the bid's GPUs there, in
    /// the bid's GPU order.
    pub gpus: Vec<Vec<u8>>,
}

/// Remaining accounts: for each part, in the gang's order, its machine and its lease account
/// (at `[LEASE, bid, part]`, created here); then, as for `allocate`, the stake account of the
/// client of each book entry ranked above the gang that fits one of its machines.
#[derive(Accounts)]
pub struct AllocateGang<'info> {
    /// The agent of one of the gang's machines; pays the parts' lease rent, and gets it back at
    /// once from the bid's account, which holds it since `place_gang_bid`.
    #[account(mut)]
    pub agent: Signer<'info>,

    #[account(mut, dup)]
    pub market: Box<Account<'info, Market>>,

    #[account(mut, address = market.queue_book @ MarketError::WrongBook)]
    pub book: AccountLoader<'info, BidBook>,

    #[account(mut, dup, constraint = bid.market == market.key() @ ErrorCode::ConstraintHasOne)]
    pub bid: Box<Account<'info, Bid>>,

    #[account(
        mut, dup,
        seeds = [seeds::STAKE, market.key().as_ref(), bid.data.client.as_ref()],
        bump = client_stake.bump,
    )]
    pub client_stake: Box<Account<'info, StakeAccount>>,

    pub system_program: Program<'info, System>,
}

/// A machine from a remaining account (owner and discriminator checked), in a frame of its own.
#[inline(never)]
fn load_machine<'info>(info: &'info AccountInfo<'info>) -> Result<Account<'info, Machine>> {
    Account::try_from(info)
}

impl<'info> AllocateGang<'info> {
    /// The gang's machines from the remaining accounts, each checked: the market's, active
    /// with a heartbeat within the silence window (their agents do not sign: a live agent
    /// runs what the market starts on its machine), none twice, one of them the signer's.
    #[inline(never)]
    fn machines(
        &self,
        parts: &'info [AccountInfo<'info>],
        now: i64,
    ) -> Result<Vec<Account<'info, Machine>>> {
        let market = &self.market;
        let mut machines: Vec<Account<'info, Machine>> = Vec::with_capacity(parts.len() / 2);
        for pair in parts.chunks(2) {
            let machine = load_machine(&pair[0])?;
            require_keys_eq!(machine.market, market.key(), ErrorCode::ConstraintHasOne);
            require!(
                !machines.iter().any(|m| m.key() == machine.key()),
                MarketError::GangPartsMismatch
            );
            require!(
                now.saturating_sub(machine.last_heartbeat) <= market.silence_window_secs(),
                MarketError::MachineSilent
            );
            machines.push(machine);
        }
        require!(
            machines.iter().any(|m| m.agent == self.agent.key()),
            MarketError::GangAgentMissing
        );
        Ok(machines)
    }

    /// What `machine` offers the gang, after checking that its part fits on the GPUs chosen
    /// there (`gpus`) and leaves the machine's reservation what it holds.
    #[inline(never)]
    fn offers(&self, machine: &Machine, gpus: &[u8], now: i64) -> Result<Box<Offers>> {
        let bid = &self.bid;
        require!(gpus.len() <= MAX_GPUS, MarketError::BadGpuCount);
        let overclock = bid.overclock_per_gpu();
        let need = bid.need(&overclock);
        let offers =
            Box::new(machine.offers(&self.market, BidKind::Queue, now, &Freed::default())?);
        offers
            .now
            .check_choice(&need, gpus)
            .map_err(MarketError::from)?;
        let offer = offers.for_run(&bid.key(), bid.runs_until(now));
        require!(
            offer.check_choice(&need, gpus).is_ok(),
            MarketError::GpusReserved
        );
        Ok(offers)
    }

    /// Starts part `part` on `machine`'s `gpus`: takes them, counts the lease in the machine's
    /// reservation, and creates the part's lease at `info` from `now` to `ends_at` holding
    /// `escrow`.
    #[inline(never)]
    fn start_part(
        &self,
        machine: &mut Account<'info, Machine>,
        (info, part): (&AccountInfo<'info>, u8),
        gpus: &[u8],
        (now, ends_at): (i64, i64),
        escrow: u64,
    ) -> Result<()> {
        let bid = &self.bid;
        let host = machine.lease_host(bid.host(), bid.gpu_count, bid.gib_per_gpu);
        machine.take(gpus, bid.gib_per_gpu, host, false, |i| bid.terms_of(i))?;
        let grace = self.market.silence_window_secs();
        machine
            .reservation
            .lease_started(&bid.key(), (ends_at, host), now, grace)?;
        let bump = self.create_lease(info, part)?;
        let mut lease = Box::new(Lease::of_bid(
            (self.market.key(), machine.key(), bid.key()),
            bid,
            (gpus, host),
            (now, ends_at),
            LeaseRules::of(&self.market.params),
            bump,
        ));
        lease.part = part;
        lease.parts = bid.parts;
        lease.escrow = escrow;
        lease.try_serialize(&mut &mut info.try_borrow_mut_data()?[..])?;
        machine.exit(&crate::ID)?;
        emit!(LeaseStarted {
            lease: info.key(),
            machine: machine.key(),
            bid: bid.key(),
            client: bid.client,
            kind: bid.kind,
            gpus: gpus.to_vec(),
            started_at: now,
            ends_at,
        });
        Ok(())
    }

    /// Creates part `part`'s lease account at its address, paid by the agent (whom
    /// [`AllocateGang::repay_rent`] pays back). Returns the address's bump.
    fn create_lease(&self, info: &AccountInfo<'info>, part: u8) -> Result<u8> {
        let bid = self.bid.key();
        let (address, bump) =
            Pubkey::find_program_address(&[seeds::LEASE, bid.as_ref(), &[part]], &crate::ID);
        require_keys_eq!(info.key(), address, MarketError::GangPartsMismatch);
        let rent = lease_rent(&Rent::get()?);
        let signer: &[&[&[u8]]] = &[&[seeds::LEASE, bid.as_ref(), &[part], &[bump]]];
        system_program::create_account(
            CpiContext::new_with_signer(
                self.system_program.key(),
                system_program::CreateAccount {
                    from: self.agent.to_account_info(),
                    to: info.clone(),
                },
                signer,
            ),
            rent,
            (8 + Lease::INIT_SPACE) as u64,
            &crate::ID,
        )?;
        Ok(bump)
    }

    /// Pays the agent back the `k` leases' rent from the bid's account. After every CPI: one
    /// that carries the agent but not the bid would see the lamports moved only halfway.
    fn repay_rent(&self, k: usize) -> Result<()> {
        let due = lease_rent(&Rent::get()?)
            .checked_mul(k as u64)
            .ok_or(MarketError::Overflow)?;
        let from = self.bid.to_account_info();
        let mut held = from.try_borrow_mut_lamports()?;
        **held = held.checked_sub(due).ok_or(MarketError::BookRentMissing)?;
        **self.agent.try_borrow_mut_lamports()? += due;
        Ok(())
    }

    /// Starts every part of a gang bid at once, each on its own machine: the same checks as
    /// `allocate` on each machine, the book backing the gang on all of them, then one lease per
    /// part, all from now to the same end, the escrow shared between them. Any part that
    /// cannot start fails the whole instruction: nothing is held, nothing billed.
    pub fn allocate_gang(ctx: Context<'info, Self>, args: AllocateGangArgs) -> Result<()> {
        let now = Clock::get()?.unix_timestamp;
        let a = ctx.accounts;
        require!(a.bid.is_gang(), MarketError::NotAGang);
        require!(a.bid.status == BidStatus::Open, MarketError::BidRunning);
        let k = a.bid.parts as usize;
        require!(
            args.gpus.len() == k && ctx.remaining_accounts.len() >= 2 * k,
            MarketError::GangPartsMismatch
        );
        let (parts, evidence) = ctx.remaining_accounts.split_at(2 * k);
        let mut machines = a.machines(parts, now)?;
        let offers = machines
            .iter()
            .zip(&args.gpus)
            .map(|(m, gpus)| a.offers(m, gpus, now).map(|o| *o))
            .collect::<Result<Vec<Offers>>>()?;
        let evidence = Evidence::read(evidence, &a.market.key())?;
        let book = a.book.to_account_info();
        // Each machine's walk of the book, while it holds, judged the entries it covers for
        // that machine, as for `allocate`.
        let walks: Vec<Option<&BookWalk>> = machines
            .iter()
            .zip(&offers)
            .map(|(m, o)| walk_holding(m, o, &book.key()))
            .collect();
        let fits_on = |(o, walk): (&Offers, &Option<&BookWalk>), leaf: &BookLeaf| match walk {
            Some(w) if w.covers(leaf) => w.may_fit(leaf),
            _ => fits_one(o, now)(leaf),
        };
        let chosen: (&Bid, Pubkey) = (&a.bid, a.bid.key());
        let (market, held) = (&a.market, a.client_stake.gpus_held);
        // Two walks, each compiled for its own test (as `allocate`'s): without a walk to
        // consult, an entry costs nothing more than its fit on each machine.
        match walks.iter().any(Option::is_some) {
            true => book_backs(
                &book,
                market,
                chosen,
                held,
                &evidence,
                |leaf: &BookLeaf| offers.iter().zip(&walks).any(|m| fits_on(m, leaf)),
                now,
            )?,
            false => book_backs(
                &book,
                market,
                chosen,
                held,
                &evidence,
                |leaf: &BookLeaf| offers.iter().any(|o| fits_one(o, now)(leaf)),
                now,
            )?,
        }
        drop(walks);
        drop(offers);

        let held = leave_book(&mut a.market, &mut a.bid, &book, now)?;
        let total = a.bid.total_gpus();
        bid_started(&mut a.market, &mut a.client_stake, (total, true), now)?;
        let ends_at = run_end_of(&a.bid, held, now)?;
        let (share, rest) = (a.bid.escrow / k as u64, a.bid.escrow % k as u64);
        for (part, machine) in machines.iter_mut().enumerate() {
            let escrow = share + if part == 0 { rest } else { 0 };
            a.start_part(
                machine,
                (&parts[2 * part + 1], part as u8),
                &args.gpus[part],
                (now, ends_at),
                escrow,
            )?;
        }
        a.repay_rent(k)?;
        let bid = &mut a.bid;
        bid.escrow = 0;
        bid.parts_running = k as u8;
        bid.gang_flags = 0;
        Ok(())
    }
}

/// Accounts of `set_rendezvous`: the agent of the machine running a gang's first part.
#[derive(Accounts)]
pub struct SetRendezvous<'info> {
    pub agent: Signer<'info>,

    #[account(address = lease.machine, constraint = machine.agent == agent.key() @ MarketError::WrongAgent)]
    pub machine: Box<Account<'info, Machine>>,

    #[account(mut)]
    pub lease: Box<Account<'info, Lease>>,
}

impl SetRendezvous<'_> {
    /// Records where the gang's other parts reach its first: the host port `port` the agent
    /// published the bid's first port on. Once, and only for a gang's first part.
    pub fn set_rendezvous(ctx: Context<Self>, port: u16) -> Result<()> {
        let lease = &mut ctx.accounts.lease;
        require!(lease.parts > 1 && lease.part == 0, MarketError::NotAGang);
        require!(port != 0, MarketError::BadPorts);
        require!(lease.rendezvous_port == 0, MarketError::RendezvousSet);
        lease.rendezvous_port = port;
        emit!(GangRendezvous {
            lease: lease.key(),
            bid: lease.bid,
            port,
        });
        Ok(())
    }
}
