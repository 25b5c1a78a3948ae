//! The machine's walk of a book too deep to judge in one `allocate` (`walk_book`). `allocate`
//! judges every entry ranked above the chosen bid, and an attacker can place 4,095 entries that
//! cost several hundred compute units each to turn away: more than a transaction's 1.4M. The
//! agent then walks the book first, in as many transactions as it takes, and `allocate` judges
//! afresh only what the walk did not cover.

use gpu_market::state::{BookKey, BookLeaf, BookWalk, Machine, Offers, BOOK_CAPACITY};
use gpu_market_sdk::{ClientInstruction, WalkBook, WALK_ENTRIES};
use solana_pubkey::Pubkey;

use super::solana::SolanaChain;
use super::ChainError;

/// Entries above the chosen bid from which the agent walks the book before `allocate`: below
/// this many, `allocate` judges them all within a transaction's units whatever they are (at
/// most about 1,100 units each, measured on a 16-GPU machine whose GPUs all run tenants' own
/// terms; `tests/tests/allocate/walk.rs`).
const WALK_ABOVE: usize = 1_000;

/// Entries a `walk_book` transaction judges at first ([`WALK_ENTRIES`]), halved after a
/// transaction that could not run, down to this.
const WALK_LEAST: u16 = 96;

/// The most `walk_book` transactions before one `allocate`: a full book at the least a
/// transaction judges.
const WALK_TRANSACTIONS: usize = BOOK_CAPACITY.div_ceil(WALK_LEAST as usize);

impl SolanaChain {
    /// Walks this machine's walk of `book` on until it covers `last_above` (the entry ranked
    /// right above the bid to start), and returns `machine` (as last read) as it then is. Stops
    /// early when a
    /// transaction moves the walk no further (it met more fitting clients than it can name, or
    /// what it relied on keeps moving): `allocate` then judges the rest itself, or says why not.
    pub(super) async fn walk_book(
        &self,
        book: Pubkey,
        last_above: BookKey,
        mut machine: Machine,
    ) -> Result<Machine, ChainError> {
        let mut entries = WALK_ENTRIES;
        let mut reached = None;
        for _ in 0..WALK_TRANSACTIONS {
            let ix = WalkBook {
                agent: self.agent_key(),
                market: self.market(),
                machine: self.machine(),
                book,
                entries,
            }
            .instruction();
            match self.send(WalkBook::NAME, ix).await {
                Ok(()) => {}
                // Too many entries for one transaction's units (or refused outright, which
                // the halving ends soon enough).
                Err(e) if !e.is_transient() && entries > WALK_LEAST => {
                    tracing::debug!(entries, error = %e, "walk_book: fewer entries a transaction");
                    entries /= 2;
                    continue;
                }
                Err(e) => return Err(e),
            }
            machine = self.account(&self.machine(), "machine").await?;
            let walk = &machine.walk;
            let upto = (walk.started != 0 && walk.book == book)
                .then(|| BookKey::new(walk.upto_book_key, walk.upto_seq));
            match upto {
                Some(u) if u >= last_above => break,
                Some(u) if reached == Some(u) => break,
                _ => reached = upto,
            }
        }
        tracing::info!(
            %book,
            upto_seq = machine.walk.upto_seq,
            "walked the book before allocating below it"
        );
        Ok(machine)
    }

    /// This machine's part in gang bid `gang` of the queue book at `book` (its entries
    /// `queue`, best first), which another machine's agent starts (`allocate_gang` judges the
    /// entries above it for every part's machine): below more than [`WALK_ABOVE`] entries, this
    /// machine walks its own walk of the book until it covers them, unless it already does for
    /// the machine as it offers now (`offers`).
    pub(super) async fn walk_for_gang(
        &self,
        book: Pubkey,
        queue: &[BookLeaf],
        gang: &Pubkey,
        offers: &Offers,
    ) -> Result<(), ChainError> {
        let Some(last_above) = last_above(queue, gang) else {
            return Ok(());
        };
        let machine: Machine = self.account(&self.machine(), "machine").await?;
        let walk = &machine.walk;
        if walk.holds(&book, &BookWalk::seal_of(offers)) && walk.covers(last_above) {
            return Ok(());
        }
        self.walk_book(book, last_above.key(), machine).await?;
        Ok(())
    }

    /// `machine` (as last read) once its walk of `book` covers every entry ranked above `bid`
    /// (`entries`: the book's, best first), where more than [`WALK_ABOVE`] are; else as it is.
    pub(super) async fn walked_above(
        &self,
        book: Pubkey,
        entries: &[BookLeaf],
        bid: &Pubkey,
        machine: Machine,
    ) -> Result<Machine, ChainError> {
        match last_above(entries, bid) {
            Some(last) => self.walk_book(book, last.key(), machine).await,
            None => Ok(machine),
        }
    }
}

/// The entry ranked right above `bid` in `entries` (a book's, best first), where more than
/// [`WALK_ABOVE`] rank above it: what a walk must cover before `bid` starts.
fn last_above<'e>(entries: &'e [BookLeaf], bid: &Pubkey) -> Option<&'e BookLeaf> {
    let above = entries.iter().position(|l| l.bid == *bid)?;
    (above > WALK_ABOVE).then(|| &entries[above - 1])
}
