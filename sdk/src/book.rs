//! Reading a bid book (the zero-copy `BidBook` account) off chain, in rank order.

use anchor_lang::__private::bytemuck;
use anchor_lang::Discriminator;
use gpu_market::pda;
use gpu_market::state::{
    Bid, BidBook, BookLeaf, BookRef, BookWalk, FullClock, Offers, BOOK_CAPACITY, BOOK_KIND_QUEUE,
};
use solana_pubkey::Pubkey;

/// A book's header and its entries, best first.
pub struct BookEntries {
    pub market: Pubkey,
    /// The machine of a spot book; the default key for a queue book.
    pub machine: Pubkey,
    /// `BOOK_KIND_QUEUE` or `BOOK_KIND_SPOT`.
    pub kind: u8,
    pub entries: Vec<BookLeaf>,
    /// How long the book has been full: what its bids' holding charges count.
    pub full_clock: FullClock,
}

/// Decodes a book account's data; `None` when it is not an initialised book.
pub fn read_book(data: &[u8]) -> Option<BookEntries> {
    if !data.starts_with(BidBook::DISCRIMINATOR) {
        return None;
    }
    // Account data carries no alignment guarantee off chain: copy it into 8-byte aligned memory.
    let mut aligned = vec![0u64; data.len().div_ceil(8)];
    bytemuck::cast_slice_mut::<u64, u8>(&mut aligned)[..data.len()].copy_from_slice(data);
    let book = BookRef::from_data(&bytemuck::cast_slice::<u64, u8>(&aligned)[..data.len()])?;
    if book.head.kind == 0 {
        return None;
    }
    Some(BookEntries {
        market: book.head.market,
        machine: book.head.machine,
        kind: book.head.kind,
        entries: book.iter().copied().collect(),
        full_clock: book.head.full_clock,
    })
}

impl BookEntries {
    /// Whether newcomers are turned away (or must evict the lowest-ranked entry).
    pub fn is_full(&self) -> bool {
        self.entries.len() >= BOOK_CAPACITY
    }

    /// What waiting in this book has cost `bid` by `now` (`Bid::holding_charge`, on chain).
    pub fn holding_charge(&self, bid: &Bid, now: i64) -> u64 {
        bid.holding_charge_at(self.full_clock.secs(self.is_full(), now))
    }

    /// The remaining accounts `allocate` needs to start `chosen` on the machine behind `offers`
    /// (built as the program builds them, `Machine::offers`), or `allocate_gang` on the machines
    /// behind each: for each entry the program will find fitting one of them (and, where
    /// `chosen_within_cap` is false, every entry, as the program then reads the whole book),
    /// its client's stake in a queue book. A gang's entry never holds another bid back, and
    /// needs none. Each key once.
    pub fn allocate_evidence(
        &self,
        chosen: &Pubkey,
        offers: &[Offers],
        chosen_within_cap: bool,
    ) -> Vec<Pubkey> {
        let mut out: Vec<Pubkey> = Vec::new();
        let mut add = |k: Pubkey| {
            if !out.contains(&k) {
                out.push(k);
            }
        };
        for leaf in &self.entries {
            if leaf.bid == *chosen {
                if chosen_within_cap {
                    break;
                }
                continue;
            }
            if leaf.summary.is_gang() {
                continue;
            }
            // Judged as `allocate` judges it: against the offer its own run would get.
            let fits = |o: &Offers| {
                let offer = o.for_run(&leaf.bid, leaf.summary.runs_until(o.now.now()));
                offer.fits(&leaf.summary.need())
            };
            if self.kind == BOOK_KIND_QUEUE && offers.iter().any(fits) {
                add(pda::stake(&self.market, &leaf.summary.client).0);
            }
        }
        out
    }

    /// [`BookEntries::allocate_evidence`] for `allocate` (or `allocate_gang`) on the machines
    /// behind `offers`, whose walks (`walk_book`) are `walks` (the same order): with the stakes
    /// of the clients each found fitting where it is a walk of this book (at `book`), as the
    /// program weighs their entries it covers as fitting while it holds.
    pub fn allocate_evidence_walked(
        &self,
        book: &Pubkey,
        chosen: &Pubkey,
        offers: &[Offers],
        chosen_within_cap: bool,
        walks: &[&BookWalk],
    ) -> Vec<Pubkey> {
        let mut out = self.allocate_evidence(chosen, offers, chosen_within_cap);
        if self.kind != BOOK_KIND_QUEUE {
            return out;
        }
        for walk in walks.iter().filter(|w| w.started != 0 && w.book == *book) {
            for client in &walk.clients[..walk.clients_len as usize] {
                let stake = pda::stake(&self.market, client).0;
                if !out.contains(&stake) {
                    out.push(stake);
                }
            }
        }
        out
    }

    /// The entry a new bid ranked at (`score`, `seq`) evicts from a full book, if it outranks
    /// it; `None` while the book has room (or the bid would not get in).
    pub fn eviction(&self, score: u64, seq: u64) -> Option<&BookLeaf> {
        if !self.is_full() {
            return None;
        }
        let worst = self.entries.last()?;
        (gpu_market::state::BookKey::new(score, seq) < worst.key()).then_some(worst)
    }
}
