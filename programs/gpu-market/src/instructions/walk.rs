use anchor_lang::prelude::*;

use crate::errors::MarketError;
use crate::instructions::{fits_one, load_book};
use crate::state::{BidBook, BidKind, BookWalk, Freed, Machine, Market};

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Debug)]
pub struct WalkBookArgs {
    /// The most entries this transaction judges (its sender sizes it to the transaction's
    /// compute units: an entry takes from about 90 to several hundred).
    pub entries: u16,
}

#[derive(Accounts)]
pub struct WalkBook<'info> {
    pub agent: Signer<'info>,

    pub market: Box<Account<'info, Market>>,

    #[account(
        mut, dup,
        constraint = machine.market == market.key() @ ErrorCode::ConstraintHasOne,
        constraint = machine.agent == agent.key() @ MarketError::WrongAgent,
    )]
    pub machine: Box<Account<'info, Machine>>,

    /// The market's queue book or the machine's spot book.
    pub book: AccountLoader<'info, BidBook>,
}

impl WalkBook<'_> {
    /// Judges up to `args.entries` of the book's entries against the machine, best first, from
    /// where its walk of this book stopped (from the best entry when the walk no longer holds or
    /// is of another book); keeps how far it got in `machine.walk`. Moves no funds and writes
    /// only the machine.
    pub fn walk_book(ctx: Context<WalkBook>, args: WalkBookArgs) -> Result<()> {
        let now = Clock::get()?.unix_timestamp;
        let a = ctx.accounts;
        let book = a.book.key();
        let kind = if book == a.market.queue_book {
            BidKind::Queue
        } else if book == a.machine.spot_book {
            BidKind::Spot
        } else {
            return err!(MarketError::WrongBook);
        };
        let offers = a.machine.offers(&a.market, kind, now, &Freed::default())?;
        let info = a.book.to_account_info();
        let entries = load_book(&info)?;
        let seal = BookWalk::seal_of(&offers);
        let walk = &mut a.machine.walk;
        if !walk.holds(&book, &seal) {
            *walk = BookWalk::begin(book, &seal, a.market.next_bid_seq);
        }
        let fits = fits_one(&offers, now);
        let mut left = args.entries;
        for leaf in entries.iter() {
            if walk.covers(leaf) || leaf.seq >= walk.below_seq {
                continue;
            }
            if left == 0 {
                break;
            }
            left -= 1;
            let fitting = !leaf.summary.is_gang() && fits(leaf);
            if fitting && !walk.note_fitting(&leaf.summary.client) {
                break;
            }
            walk.judged(leaf.key());
        }
        Ok(())
    }
}
