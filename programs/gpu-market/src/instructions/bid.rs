use anchor_lang::prelude::*;
use anchor_spl::token::{self, Mint, Token, TokenAccount, TransferChecked};
use gpu_market_core::matching;
use gpu_market_core::score::{self, Inputs};
use gpu_market_core::settlement::escrow_for;

use crate::errors::MarketError;
use crate::events::{BidCancelled, BidPlaced, BidToppedUp};
use crate::state::{
    seeds, Bid, BidBook, BidKind, BidStatus, BookKey, Machine, MachineStatus, Market,
    OverclockTerms, StakeAccount, IMAGE_REF_LEN, MAX_GPUS,
};

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Debug)]
pub struct PlaceBidArgs {
    /// Chosen by the client so one client can hold several bids.
    pub nonce: u64,
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
    pub deadline: i64,
}

#[derive(Accounts)]
#[instruction(args: PlaceBidArgs)]
pub struct PlaceBid<'info> {
    #[account(mut)]
    pub client: Signer<'info>,

    #[account(mut, has_one = payment_mint, has_one = payment_vault)]
    pub market: Box<Account<'info, Market>>,

    #[account(
        init,
        payer = client,
        space = Bid::space(args.overclock.len()),
        seeds = [seeds::BID, market.key().as_ref(), client.key().as_ref(), &args.nonce.to_le_bytes()],
        bump,
    )]
    pub bid: Box<Account<'info, Bid>>,

    /// The queue book of the market, or the spot book of `machine`.
    #[account(mut)]
    pub book: AccountLoader<'info, BidBook>,

    /// The target of a spot bid; absent for a queue bid.
    #[account(has_one = market)]
    pub machine: Option<Box<Account<'info, Machine>>>,

    /// The client's stake account (opened with `open_stake`; its amount may be zero): S of
    /// the score, and the client's GPU count for the anti-monopoly cap.
    #[account(
        mut,
        seeds = [seeds::STAKE, market.key().as_ref(), client.key().as_ref()],
        bump = stake.bump,
    )]
    pub stake: Box<Account<'info, StakeAccount>>,

    pub payment_mint: Box<Account<'info, Mint>>,

    #[account(mut, token::mint = payment_mint, token::authority = client)]
    pub client_tokens: Box<Account<'info, TokenAccount>>,

    #[account(mut)]
    pub payment_vault: Box<Account<'info, TokenAccount>>,

    pub token_program: Program<'info, Token>,
    pub system_program: Program<'info, System>,
}

impl PlaceBid<'_> {
    fn validate(&self, args: &PlaceBidArgs, now: i64) -> Result<()> {
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
        let terms = args.overclock.len();
        require!(
            terms == 1 || terms == args.gpu_count as usize,
            MarketError::BadOverclockCount
        );
        require!(
            args.overclock.iter().all(|t| t.power_limit_w > 0),
            MarketError::PowerLimitMissing
        );
        let latest_start = args
            .deadline
            .checked_sub(args.max_duration_secs as i64)
            .ok_or(MarketError::Overflow)?;
        require!(latest_start >= now, MarketError::DeadlineTooSoon);
        match (args.kind, &self.machine) {
            (BidKind::Queue, None) => {
                require_keys_eq!(
                    self.book.key(),
                    self.market.queue_book,
                    MarketError::WrongBook
                )
            }
            (BidKind::Spot, Some(machine)) => {
                require!(
                    machine.status == MachineStatus::Active,
                    MarketError::MachineNotActive
                );
                require_keys_eq!(self.book.key(), machine.spot_book, MarketError::WrongBook);
                // Some assignment of the machine's GPUs (of an accepted class, with the memory)
                // must allow each GPU's terms, ignoring what runs there now.
                let mut compat = vec![0u16; args.gpu_count as usize];
                for (g, gpu) in machine.gpus().iter().enumerate() {
                    if args.accepted_classes & (1 << gpu.class) == 0
                        || gpu.memory_gib < args.gib_per_gpu
                    {
                        continue;
                    }
                    for (i, mask) in compat.iter_mut().enumerate() {
                        let t = args.overclock[if terms == 1 { 0 } else { i }];
                        if gpu.limits().check(&t.settings()).is_ok() {
                            *mask |= 1 << g;
                        }
                    }
                }
                require!(
                    matching::assign(&compat).is_some(),
                    MarketError::OverclockOutOfRange
                );
            }
            _ => return err!(MarketError::WrongBook),
        }
        Ok(())
    }

    pub fn place_bid(ctx: Context<Self>, args: PlaceBidArgs) -> Result<()> {
        let now = Clock::get()?.unix_timestamp;
        ctx.accounts.validate(&args, now)?;
        let escrow = escrow_for(
            args.price,
            args.kind.unit(),
            args.gpu_count as u64,
            args.max_duration_secs as u64,
        )
        .map_err(MarketError::from)?;

        let market = &mut ctx.accounts.market;
        let p = &market.params;
        let inputs = Inputs {
            stake: ctx.accounts.stake.amount,
            stake_bound: p.stake_bound,
            duration_secs: args.max_duration_secs as u64,
            time_left_secs: (args.deadline - now) as u64,
            // At most 16 × 65 535 × (2³² − 1) < 2⁶⁴: no overflow.
            resource_gib_secs: args.gpu_count as u64
                * args.gib_per_gpu as u64
                * args.max_duration_secs as u64,
            resource_bound: p.resource_bound_gib_secs,
        };
        let base = score::base_score(p.weights(), &inputs);
        let stake = &mut ctx.accounts.stake;
        stake.open_bids = stake
            .open_bids
            .checked_add(1)
            .ok_or(MarketError::Overflow)?;
        let rank = score::rank_key(base, p.aging_per_interval as u64, market.interval_at(now));
        if args.kind == BidKind::Queue {
            market.add_waiting(args.gpu_count as i64)?;
        }

        let mut image_ref = [0u8; IMAGE_REF_LEN];
        image_ref[..args.image_ref.len()].copy_from_slice(args.image_ref.as_bytes());
        let bid = &mut ctx.accounts.bid;
        bid.set_inner(Bid {
            market: market.key(),
            client: ctx.accounts.client.key(),
            machine: ctx
                .accounts
                .machine
                .as_ref()
                .map_or(Pubkey::default(), |m| m.key()),
            image_digest: args.image_digest,
            env_hash: args.env_hash,
            image_ref,
            kind: args.kind,
            status: BidStatus::Open,
            gpu_count: args.gpu_count,
            gib_per_gpu: args.gib_per_gpu,
            accepted_classes: args.accepted_classes,
            overclock: args.overclock,
            price: args.price,
            max_duration_secs: args.max_duration_secs,
            deadline: args.deadline,
            escrow,
            score: base,
            book_key: 0,
            seq: 0,
            placed_at: now,
            bump: ctx.bumps.bid,
        });
        // Queue bids rank by score (with aging); spot bids by the host's profit (GigaSPOT).
        let key = match &ctx.accounts.machine {
            Some(machine) => bid.spot_profit(machine)?,
            None => rank,
        };
        let bid_key = bid.key();
        market.enqueue(bid_key, bid, &mut *ctx.accounts.book.load_mut()?, key)?;
        market.total_escrow = market
            .total_escrow
            .checked_add(escrow)
            .ok_or(MarketError::Overflow)?;

        token::transfer_checked(
            CpiContext::new(
                ctx.accounts.token_program.key(),
                TransferChecked {
                    from: ctx.accounts.client_tokens.to_account_info(),
                    mint: ctx.accounts.payment_mint.to_account_info(),
                    to: ctx.accounts.payment_vault.to_account_info(),
                    authority: ctx.accounts.client.to_account_info(),
                },
            ),
            escrow,
            ctx.accounts.payment_mint.decimals,
        )?;

        let bid = &ctx.accounts.bid;
        emit!(BidPlaced {
            market: market.key(),
            bid: bid.key(),
            client: bid.client,
            kind: bid.kind,
            score: base,
            escrow,
        });
        Ok(())
    }
}

#[derive(Accounts)]
pub struct TopUpBid<'info> {
    pub client: Signer<'info>,

    #[account(mut, has_one = payment_mint, has_one = payment_vault)]
    pub market: Box<Account<'info, Market>>,

    #[account(mut, has_one = client, has_one = market)]
    pub bid: Box<Account<'info, Bid>>,

    pub payment_mint: Box<Account<'info, Mint>>,

    #[account(mut, token::mint = payment_mint, token::authority = client)]
    pub client_tokens: Box<Account<'info, TokenAccount>>,

    #[account(mut)]
    pub payment_vault: Box<Account<'info, TokenAccount>>,

    pub token_program: Program<'info, Token>,
}

impl TopUpBid<'_> {
    /// Adds `amount` to the bid's escrow (more runway at the same price).
    pub fn top_up_bid(ctx: Context<Self>, amount: u64) -> Result<()> {
        require!(amount > 0, MarketError::ZeroAmount);
        let bid = &mut ctx.accounts.bid;
        bid.escrow = bid
            .escrow
            .checked_add(amount)
            .ok_or(MarketError::Overflow)?;
        let market = &mut ctx.accounts.market;
        market.total_escrow = market
            .total_escrow
            .checked_add(amount)
            .ok_or(MarketError::Overflow)?;
        token::transfer_checked(
            CpiContext::new(
                ctx.accounts.token_program.key(),
                TransferChecked {
                    from: ctx.accounts.client_tokens.to_account_info(),
                    mint: ctx.accounts.payment_mint.to_account_info(),
                    to: ctx.accounts.payment_vault.to_account_info(),
                    authority: ctx.accounts.client.to_account_info(),
                },
            ),
            amount,
            ctx.accounts.payment_mint.decimals,
        )?;
        emit!(BidToppedUp {
            bid: bid.key(),
            amount,
            escrow: bid.escrow,
        });
        Ok(())
    }
}

#[derive(Accounts)]
pub struct CancelBid<'info> {
    #[account(mut)]
    pub client: Signer<'info>,

    #[account(mut, has_one = payment_mint, has_one = payment_vault)]
    pub market: Box<Account<'info, Market>>,

    #[account(mut, has_one = client, has_one = market, close = client)]
    pub bid: Box<Account<'info, Bid>>,

    /// The book the bid waits in.
    #[account(mut)]
    pub book: AccountLoader<'info, BidBook>,

    /// The client's stake (unlocked by one waiting bid).
    #[account(
        mut,
        seeds = [seeds::STAKE, market.key().as_ref(), client.key().as_ref()],
        bump = stake.bump,
    )]
    pub stake: Box<Account<'info, StakeAccount>>,

    pub payment_mint: Box<Account<'info, Mint>>,

    #[account(mut, token::mint = payment_mint, token::authority = client)]
    pub client_tokens: Box<Account<'info, TokenAccount>>,

    #[account(mut)]
    pub payment_vault: Box<Account<'info, TokenAccount>>,

    pub token_program: Program<'info, Token>,
}

impl CancelBid<'_> {
    /// Takes a waiting bid out of its book and refunds its escrow in full.
    pub fn cancel_bid(ctx: Context<Self>) -> Result<()> {
        let bid = &ctx.accounts.bid;
        require!(bid.status == BidStatus::Open, MarketError::BidRunning);
        let stake = &mut ctx.accounts.stake;
        stake.open_bids = stake
            .open_bids
            .checked_sub(1)
            .ok_or(MarketError::Overflow)?;
        let leaf = ctx
            .accounts
            .book
            .load_mut()?
            .remove(BookKey::new(bid.book_key, bid.seq))
            .map_err(MarketError::from)?;
        // The key found a leaf: it must be this bid's (else the whole transaction rolls back).
        require_keys_eq!(leaf.bid, bid.key(), MarketError::WrongBook);
        let refund = bid.escrow;
        let market = &mut ctx.accounts.market;
        if bid.kind == BidKind::Queue {
            market.add_waiting(-(bid.gpu_count as i64))?;
        }
        market.total_escrow = market
            .total_escrow
            .checked_sub(refund)
            .ok_or(MarketError::Overflow)?;
        market.with_signer(|signer| {
            token::transfer_checked(
                CpiContext::new_with_signer(
                    ctx.accounts.token_program.key(),
                    TransferChecked {
                        from: ctx.accounts.payment_vault.to_account_info(),
                        mint: ctx.accounts.payment_mint.to_account_info(),
                        to: ctx.accounts.client_tokens.to_account_info(),
                        authority: market.to_account_info(),
                    },
                    signer,
                ),
                refund,
                ctx.accounts.payment_mint.decimals,
            )
        })?;
        emit!(BidCancelled {
            bid: bid.key(),
            refund,
        });
        Ok(())
    }
}
