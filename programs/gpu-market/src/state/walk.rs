//! A machine's walk of a book spread over several transactions (`walk_book`). `allocate` must
//! show that no entry ranked above the chosen bid fits the machine, and judging an entry costs
//! up to several hundred compute units (two term sets against GPUs that leases share with
//! their own terms): 4,095 such entries, which an attacker can place, are more than one
//! transaction's 1.4M units. So the machine's agent may walk the book first, in as many
//! transactions as it takes; the machine keeps how far the walk got, what it met, and the
//! state it judged against, and `allocate` judges afresh only what the walk did not.
//!
//! The walk holds only while nothing it relied on has moved towards more bids fitting: the
//! machine's offers (everything but the clock and the reserve prices, hashed) and reserve prices
//! no lower than it saw. Entries placed after it began are never covered, and an entry that
//! moves up (`boost`) or comes back (failover) takes a new placement number. A later clock only
//! turns bids away (they expire, or run past a reservation's start), never in.

use anchor_lang::prelude::*;
use gpu_market_core::fit::GPU_CLASSES;

use crate::state::{BookKey, BookLeaf, Offers};

/// Distinct clients whose entries the walk found fitting that it can name. Such an entry lets
/// the chosen bid pass only while its client is over the anti-monopoly cap, which few clients
/// can be at once, so a handful is enough; a walk that meets more stops there.
pub const WALK_CLIENTS: usize = 4;

/// What a walk was judged against: the machine's offers as hashed by [`BookWalk::seal_of`], and
/// the reserve prices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seal {
    pub digest: [u8; 32],
    pub reserve: [u64; GPU_CLASSES],
}

/// `Machine::walk`; all zero: none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "idl-build", derive(AnchorSerialize, AnchorDeserialize))]
#[repr(C)]
pub struct BookWalk {
    /// The book walked (the market's queue book or the machine's spot book).
    pub book: Pubkey,
    /// SHA-256 of the machine's offers when the walk began ([`BookWalk::seal_of`]).
    pub digest: [u8; 32],
    /// The reserve price of each class when the walk began.
    pub reserve: [u64; GPU_CLASSES],
    /// The last entry judged (its rank and placement number), in rank order.
    pub upto_book_key: u64,
    pub upto_seq: u64,
    /// The market's next placement number when the walk began: entries from it on are not
    /// covered.
    pub below_seq: u64,
    /// Clients of the entries it found fitting (the first `clients_len`).
    pub clients: [Pubkey; WALK_CLIENTS],
    pub clients_len: u8,
    /// 1 once it has judged an entry (`upto_*` is set).
    pub started: u8,
    pub pad: [u8; 6],
}

// SAFETY: `repr(C)`, keys, byte arrays and integers only, no padding (size pinned below).
unsafe impl anchor_lang::__private::bytemuck::Zeroable for BookWalk {}
unsafe impl anchor_lang::__private::bytemuck::Pod for BookWalk {}
const _: () = assert!(
    core::mem::size_of::<BookWalk>() == 32 + 32 + 8 * GPU_CLASSES + 3 * 8 + 32 * WALK_CLIENTS + 8
);
crate::state::pod_borsh!(BookWalk);

/// Collects what `Offer::hash_state` feeds, to be hashed at once (one syscall).
struct Bytes(Vec<u8>);

impl core::hash::Hasher for Bytes {
    fn write(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }

    fn finish(&self) -> u64 {
        0
    }
}

impl BookWalk {
    /// What a walk is judged against with `offers`: both offers' states (the reservation's bid
    /// and start with the second), hashed, and the reserve prices.
    pub fn seal_of(offers: &Offers) -> Seal {
        use core::hash::Hash;
        let mut bytes = Bytes(Vec::with_capacity(1024));
        offers.now.hash_state(&mut bytes);
        if let Some((bid, start, after)) = &offers.after {
            bid.to_bytes().hash(&mut bytes);
            start.hash(&mut bytes);
            after.hash_state(&mut bytes);
        }
        Seal {
            digest: solana_sha256_hasher::hash(&bytes.0).to_bytes(),
            reserve: *offers.now.reserve(),
        }
    }

    /// Whether this walk of `book` still holds under `seal`: the same offers, and no reserve
    /// price lower than it saw.
    pub fn holds(&self, book: &Pubkey, seal: &Seal) -> bool {
        self.book == *book
            && self.digest == seal.digest
            && seal
                .reserve
                .iter()
                .zip(&self.reserve)
                .all(|(now, then)| now >= then)
    }

    /// A walk of `book` from its best entry, under `seal`, covering entries placed before
    /// `below_seq`.
    pub fn begin(book: Pubkey, seal: &Seal, below_seq: u64) -> Self {
        BookWalk {
            book,
            digest: seal.digest,
            reserve: seal.reserve,
            below_seq,
            ..Default::default()
        }
    }

    /// Whether the walk has judged `leaf`: placed before it began, and ranked no lower than the
    /// last entry it judged.
    #[inline(always)]
    pub fn covers(&self, leaf: &BookLeaf) -> bool {
        // Ranked no lower: a higher rank, or the same and placed no later (`BookKey`'s order,
        // spelt out: `allocate` asks it of every entry above the chosen bid).
        leaf.seq < self.below_seq
            && self.started != 0
            && (leaf.book_key > self.upto_book_key
                || (leaf.book_key == self.upto_book_key && leaf.seq <= self.upto_seq))
    }

    /// What the walk says of a covered `leaf`: it may fit when its client had an entry that did
    /// (so `allocate` weighs it as fitting, against its client's cap), and does not otherwise.
    #[inline(always)]
    pub fn may_fit(&self, leaf: &BookLeaf) -> bool {
        self.clients[..self.clients_len as usize].contains(&leaf.summary.client)
    }

    /// Notes that `client`'s entry fits; `false` when the walk cannot name another client.
    pub fn note_fitting(&mut self, client: &Pubkey) -> bool {
        let n = self.clients_len as usize;
        if self.clients[..n].contains(client) {
            return true;
        }
        if n == WALK_CLIENTS {
            return false;
        }
        self.clients[n] = *client;
        self.clients_len += 1;
        true
    }

    /// The walk has judged every entry up to `key`.
    pub fn judged(&mut self, key: BookKey) {
        self.upto_book_key = key.book_key;
        self.upto_seq = key.seq;
        self.started = 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::BidSummary;
    use anchor_lang::__private::bytemuck::Zeroable;

    fn seal(digest: u8, reserve: u64) -> Seal {
        Seal {
            digest: [digest; 32],
            reserve: [reserve; GPU_CLASSES],
        }
    }

    fn leaf(book_key: u64, seq: u64) -> BookLeaf {
        BookLeaf {
            bid: Pubkey::new_unique(),
            book_key,
            seq,
            summary: BidSummary::zeroed(),
        }
    }

    #[test]
    fn a_walk_holds_only_while_nothing_it_judged_against_moved_towards_more_bids_fitting() {
        let book = Pubkey::new_unique();
        let walk = BookWalk::begin(book, &seal(1, 100), 50);
        assert!(walk.holds(&book, &seal(1, 100)));
        // Higher reserve prices only turn bids away.
        assert!(walk.holds(&book, &seal(1, 150)));
        let mut cheaper = seal(1, 100);
        cheaper.reserve[3] = 99;
        assert!(
            !walk.holds(&book, &cheaper),
            "one class's reserve price fell"
        );
        assert!(
            !walk.holds(&book, &seal(2, 100)),
            "the machine's offers moved"
        );
        assert!(
            !walk.holds(&Pubkey::new_unique(), &seal(1, 100)),
            "another book"
        );
    }

    #[test]
    fn a_walk_covers_what_it_judged_and_nothing_placed_after_it_began() {
        let mut walk = BookWalk::begin(Pubkey::new_unique(), &seal(1, 100), 50);
        assert!(!walk.covers(&leaf(u64::MAX, 0)), "nothing judged yet");
        walk.judged(BookKey::new(500, 20));
        // Higher ranks, and the same rank placed no later.
        assert!(walk.covers(&leaf(900, 30)));
        assert!(walk.covers(&leaf(500, 20)));
        assert!(walk.covers(&leaf(500, 10)));
        // Lower ranks.
        assert!(!walk.covers(&leaf(500, 21)));
        assert!(!walk.covers(&leaf(400, 1)));
        // Placed after the walk began, wherever it ranks.
        assert!(!walk.covers(&leaf(900, 50)));
        assert!(!walk.covers(&leaf(900, 60)));
    }

    #[test]
    fn a_walk_names_the_clients_of_fitting_entries_up_to_its_room() {
        let mut walk = BookWalk::default();
        let clients: Vec<Pubkey> = (0..=WALK_CLIENTS).map(|_| Pubkey::new_unique()).collect();
        for c in &clients[..WALK_CLIENTS] {
            assert!(walk.note_fitting(c));
            assert!(walk.note_fitting(c), "a client named once");
        }
        assert_eq!(walk.clients_len as usize, WALK_CLIENTS);
        assert!(
            !walk.note_fitting(&clients[WALK_CLIENTS]),
            "no room for another"
        );
        let mut fits = leaf(1, 1);
        fits.summary.client = clients[0];
        assert!(walk.may_fit(&fits));
        fits.summary.client = clients[WALK_CLIENTS];
        assert!(!walk.may_fit(&fits));
    }
}
