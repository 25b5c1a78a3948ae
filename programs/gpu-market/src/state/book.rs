//! The bid book: an ordered set of bid keys stored zero-copy in one account that grows and
//! shrinks with it.
//!
//! Like OpenBook v2's order book it is a crit-bit tree in node arrays, so no operation
//! allocates. Unlike OpenBook, inner nodes carry only their crit bit and two children (the djb
//! layout), and the nodes are dense, as in Manifest's growable book: entry `i` is slot `i` (its
//! leaf and one inner node, 152 bytes), a removal moves the last leaf and inner node into the
//! slots it freed, and the account holds exactly `len` slots. An empty book is 136 bytes of
//! account; each entry's slot is paid for by its bid while it waits (see
//! `instructions::book_rent`). Each leaf carries its bid's [`BidSummary`], so `allocate` can tell
//! from the book alone whether any bid ranked above the chosen one fits.
//!
//! Entries are ranked by [`BookKey`]: higher `book_key` first, then lower `seq` (earlier placement).
//! The tree is keyed on the 128 bits `!book_key ‖ seq`, so ascending bit order is rank order and an
//! in-order walk yields the best bid first.
//!
//! An insertion walks one root-to-leaf path twice; a removal walks its entry's path, then the
//! paths of the last leaf and inner node it moves. Crit bits strictly grow down a path, so a path has
//! at most 128 inner nodes whatever the keys are; with real keys it is about log2(len) deep. No
//! recursion, no heap, no floats, no 128-bit arithmetic: the code stays inside the SBF limits.

use anchor_lang::__private::bytemuck::{self, Pod, Zeroable};
use anchor_lang::prelude::*;
use core::cmp::Ordering;
use core::mem::size_of;
use core::ops::{Deref, DerefMut};
use gpu_market_core::fit::{Host, Need, Regions, Room, Terms};

use crate::state::OverclockTerms;

/// Most entries one book holds.
pub const BOOK_CAPACITY: usize = 4096;
/// `BidBook::kind` of a market's queue book (bids waiting for any machine).
#[constant]
pub const BOOK_KIND_QUEUE: u8 = 1;
/// `BidBook::kind` of one machine's spot book.
#[constant]
pub const BOOK_KIND_SPOT: u8 = 2;
/// The empty handle: no root, no next free node.
#[constant]
pub const BOOK_NIL: u32 = u32::MAX;
/// Set in a handle that names a leaf; clear in one that names an inner node.
const LEAF_BIT: u32 = 1 << 31;
/// Bits in a key, and so the deepest a path can be (crit bits strictly grow down it).
const KEY_BITS: usize = 128;

/// Bytes of `BidBook`, the header, pinned below.
pub const BOOK_HEADER_SIZE: usize = 128;
/// Bytes of one entry's [`BookSlot`].
pub const BOOK_SLOT_SIZE: usize = 160;
/// Bytes of an empty book's account: the 8-byte discriminator and the header. Pass it to
/// `create_account`.
pub const BOOK_EMPTY_SPACE: usize = 8 + BOOK_HEADER_SIZE;

/// Bytes of a book account holding `entries` entries.
pub const fn book_space(entries: usize) -> usize {
    BOOK_EMPTY_SPACE + entries * BOOK_SLOT_SIZE
}

/// Why a book operation failed. The program maps it to its own error code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BookError {
    /// The book already holds `BOOK_CAPACITY` entries.
    Full,
    /// An entry with the same key is already in the book.
    Duplicate,
    /// No entry has the key.
    NotFound,
    /// The account has no free slot for a new entry: it must grow by one first.
    NoSlot,
}

/// The rank of a bid. Its `Ord` is book order: `a < b` means `a` is served before `b`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BookKey {
    /// Higher first: the bid's `book_key` (its rank, from its score: `Bid::book_key`); any
    /// `u64` works.
    pub book_key: u64,
    /// Placement order, lower first among equal book keys. Unique per book makes keys unique.
    pub seq: u64,
}

impl BookKey {
    pub const fn new(book_key: u64, seq: u64) -> Self {
        Self { book_key, seq }
    }

    /// Bit `i` (0 = most significant) of the tree key `!book_key ‖ seq`, as a child index.
    #[inline(always)]
    fn bit(&self, i: u32) -> usize {
        if i < 64 {
            ((!self.book_key >> (63 - i)) & 1) as usize
        } else {
            ((self.seq >> (127 - i)) & 1) as usize
        }
    }

    /// The first bit where the two tree keys differ, or `None` when the keys are equal.
    /// (`!a ^ !b == a ^ b`, so the book-key half needs no negation.)
    #[inline(always)]
    fn crit_bit(&self, other: &BookKey) -> Option<u32> {
        let hi = self.book_key ^ other.book_key;
        if hi != 0 {
            return Some(leading_zeros(hi));
        }
        let lo = self.seq ^ other.seq;
        if lo != 0 {
            return Some(64 + leading_zeros(lo));
        }
        None
    }
}

impl Ord for BookKey {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .book_key
            .cmp(&self.book_key)
            .then(self.seq.cmp(&other.seq))
    }
}

impl PartialOrd for BookKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// `x.leading_zeros()` for `x != 0`, written as a binary search so the SBF build does not depend
/// on how LLVM lowers `ctlz` (the BPF target has no instruction for it).
#[inline(always)]
fn leading_zeros(mut x: u64) -> u32 {
    let mut n = 0;
    if x >> 32 == 0 {
        n += 32;
        x <<= 32;
    }
    if x >> 48 == 0 {
        n += 16;
        x <<= 16;
    }
    if x >> 56 == 0 {
        n += 8;
        x <<= 8;
    }
    if x >> 60 == 0 {
        n += 4;
        x <<= 4;
    }
    if x >> 62 == 0 {
        n += 2;
        x <<= 2;
    }
    if x >> 63 == 0 {
        n += 1;
    }
    n
}

/// What `allocate` needs to know of a waiting bid to tell whether it fits a machine, without
/// its account: every input of the fit rule, and the client for the anti-monopoly cap.
/// A clock that runs only while its book is full: the seconds of every earlier full stretch
/// and when the current one began. A bid notes its reading on entry; the difference when it
/// leaves is the full time it saw, which its holding charge prices.
#[zero_copy(unsafe)]
#[repr(C)]
#[derive(Debug, Default, PartialEq, Eq)]
pub struct FullClock {
    /// Seconds full before the current stretch (or the last one, while not full).
    pub secs_before: u64,
    /// When the current full stretch began; meaningful only while full.
    pub since: i64,
}

impl FullClock {
    /// The reading at `now` of a book that is `full` now.
    pub fn secs(&self, full: bool, now: i64) -> u64 {
        let running = if full {
            now.saturating_sub(self.since).max(0) as u64
        } else {
            0
        };
        self.secs_before.saturating_add(running)
    }
}

#[zero_copy(unsafe)]
#[repr(C)]
#[derive(Debug, PartialEq, Eq, Default)]
pub struct BidSummary {
    pub client: Pubkey,
    pub price: u64,
    /// The bid's latest start ([`crate::state::Bid::latest_start`]): it expires after it.
    pub latest_start: i64,
    /// The bid's overclock terms, as at most two distinct sets (a bid may ask no more):
    /// `second_count` of its GPUs ask `terms_second`, the others `terms_first`
    /// (`gpu_market_core::fit::Terms::summarise`). Exact: fit does not depend on which GPU
    /// of the bid asks which.
    pub terms_first: OverclockTerms,
    pub terms_second: OverclockTerms,
    pub gib_per_gpu: u16,
    pub gpu_count: u8,
    pub accepted_classes: u8,
    /// GPUs asking `terms_second` (0: every GPU asks `terms_first`).
    pub second_count: u8,
    /// The ports the bid publishes, and its scratch GiB (little-endian: the entry keeps its
    /// byte alignment).
    pub ports: u8,
    pub scratch_gib: [u8; 2],
    /// The CPU (thousandths of a core) and memory (MiB) the bid's lease holds.
    pub cpu_milli: [u8; 4],
    pub memory_mib: [u8; 4],
    /// The regions the bid names, as bits of the market's region table (0: any).
    pub regions: [u8; 4],
    /// The longest the bid's lease runs: with the time it starts, when it ends at the latest
    /// (what a reservation asks of a bid that would use its GPUs).
    pub max_duration_secs: [u8; 4],
    /// Machines the bid runs on at once ([`crate::state::Bid::parts`]): a gang's entry (more
    /// than 1) is taken by `allocate_gang` only, and never holds back `allocate`.
    pub parts: u8,
    /// Brings the size to a multiple of the alignment (8).
    pub pad: [u8; 3],
}

impl BidSummary {
    /// Whether the entry is a gang's ([`BidSummary::parts`]).
    pub fn is_gang(&self) -> bool {
        self.parts > 1
    }

    /// Whether the bid's latest start has passed at `now` ([`crate::state::Bid::expired`]).
    pub fn expired(&self, now: i64) -> bool {
        now > self.latest_start
    }

    /// The latest its lease would end if it started at `now` ([`crate::state::Bid::runs_until`]).
    pub fn runs_until(&self, now: i64) -> i64 {
        now.saturating_add(u32::from_le_bytes(self.max_duration_secs) as i64)
    }

    /// The ports, scratch, CPU and memory the bid's lease holds.
    pub fn room(&self) -> Room {
        Room {
            ports: self.ports,
            scratch_gib: u16::from_le_bytes(self.scratch_gib),
            host: Host {
                cpu_milli: u32::from_le_bytes(self.cpu_milli),
                memory_mib: u32::from_le_bytes(self.memory_mib),
            },
        }
    }

    /// The fit rule's input, exact: a bid's two term sets with their counts, its regions by
    /// their indices in the market's table.
    pub fn need(&self) -> Need<'static> {
        let first = self.terms_first.to_core();
        Need {
            gpu_count: self.gpu_count,
            gib_per_gpu: self.gib_per_gpu,
            accepted_classes: self.accepted_classes,
            price: self.price,
            latest_start: self.latest_start,
            room: self.room(),
            regions: Regions::from_filter(u32::from_le_bytes(self.regions)),
            terms: if self.second_count == 0 {
                Terms::Uniform(first)
            } else {
                Terms::Split {
                    first,
                    second: self.terms_second.to_core(),
                    second_count: self.second_count,
                }
            },
        }
    }
}

/// One entry: a bid account, its rank, and what decides whether it fits a machine.
#[zero_copy(unsafe)]
#[repr(C)]
#[derive(Debug, PartialEq, Eq)]
pub struct BookLeaf {
    /// The bid account this entry stands for.
    pub bid: Pubkey,
    /// Its rank in the book, higher first: the bid's `book_key` (not its score).
    pub book_key: u64,
    pub seq: u64,
    pub summary: BidSummary,
}

impl BookLeaf {
    pub fn key(&self) -> BookKey {
        BookKey::new(self.book_key, self.seq)
    }
}

/// A branch: leaves under `children[0]` have bit `crit_bit` clear, under `children[1]` set, and all
/// agree on the bits above it.
#[zero_copy(unsafe)]
#[repr(C)]
#[derive(Debug, PartialEq, Eq)]
pub struct BookInner {
    /// Handles: leaf index | `LEAF_BIT`, or inner index.
    pub children: [u32; 2],
    /// 0..128, counted from the most significant bit of `!book_key ‖ seq`.
    pub crit_bit: u32,
}

/// The space one entry takes in its book account: its leaf and one inner node (a tree of `n`
/// leaves has `n - 1`; the last slot's node is unused). Slot `i` holds leaf `i` and inner node
/// `i`, so the account grows and shrinks by one slot per entry.
#[zero_copy(unsafe)]
#[repr(C)]
#[derive(Debug, PartialEq, Eq)]
pub struct BookSlot {
    pub leaf: BookLeaf,
    pub inner: BookInner,
    pub _pad: u32,
}

// SAFETY: all are `repr(C)`, made only of integers and `Pubkey` (itself Pod), and have no padding
// (sizes pinned below equal the sums of their fields), so every bit pattern is a valid value.
unsafe impl Zeroable for BookLeaf {}
unsafe impl Pod for BookLeaf {}
unsafe impl Zeroable for BidSummary {}
unsafe impl Pod for BidSummary {}
unsafe impl Zeroable for BookInner {}
unsafe impl Pod for BookInner {}
unsafe impl Zeroable for BookSlot {}
unsafe impl Pod for BookSlot {}

const _: () = assert!(size_of::<BidSummary>() == 32 + 8 + 8 + 10 + 10 + 2 + 1 + 1 + 1 + 7 + 8 + 8);
const _: () = assert!(size_of::<BookLeaf>() == 32 + 8 + 8 + size_of::<BidSummary>());
const _: () = assert!(size_of::<BookInner>() == 4 + 4 + 4);
const _: () = assert!(size_of::<BookSlot>() == BOOK_SLOT_SIZE);

/// A bid book account's header: the queue book of a market or the spot book of one machine.
/// Its entries follow it in the account, one [`BookSlot`] each (see [`Book`]).
///
/// Not a PDA (it predates books small enough for a CPI `create_account`): the client creates the
/// account with `BOOK_EMPTY_SPACE` bytes owned by the program, and the program initialises it
/// through an `AccountLoader` with the `zero` constraint and [`BidBook::init`]. Its identity is
/// therefore in its header (`market`, `kind`, `machine`), which the program checks on every use.
///
/// `zero_copy(unsafe)` only because the safe form derives `::bytemuck::Pod`, which needs
/// `bytemuck` as a direct dependency; `repr(C)` is explicit and the layout is pinned.
#[account(zero_copy(unsafe))]
#[repr(C)]
pub struct BidBook {
    pub market: Pubkey,
    /// The machine of a spot book; default for a queue book.
    pub machine: Pubkey,
    /// `BOOK_KIND_QUEUE` or `BOOK_KIND_SPOT`; 0 until initialised.
    pub kind: u8,
    pub _pad0: [u8; 3],
    /// Entries in the tree: they fill slots `0..len`.
    pub len: u32,
    /// Handle of the root, `BOOK_NIL` when empty.
    pub root: u32,
    pub _pad1: [u8; 4],
    /// How long the book has been full (newcomers turned away): a waiting bid pays its price
    /// for the full time it saw. See [`Book::full_secs`].
    pub full_clock: FullClock,
    pub _reserved: [u8; 32],
}

const _: () =
    assert!(size_of::<BidBook>() == 32 + 32 + 1 + 3 + 4 + 4 + 4 + size_of::<FullClock>() + 32);
const _: () = assert!(size_of::<BidBook>() == BOOK_HEADER_SIZE);
const _: () = assert!(BOOK_CAPACITY < LEAF_BIT as usize);

impl BidBook {
    /// Sets up a freshly created (all-zero) account as an empty book. O(1).
    pub fn init(&mut self, market: Pubkey, kind: u8, machine: Pubkey) {
        self.market = market;
        self.machine = machine;
        self.kind = kind;
        self.len = 0;
        self.root = BOOK_NIL;
    }

    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn is_full(&self) -> bool {
        self.len as usize >= BOOK_CAPACITY
    }

    /// Seconds the book has been full in all, up to `now` (see [`FullClock`]).
    pub fn full_secs(&self, now: i64) -> u64 {
        self.full_clock.secs(self.is_full(), now)
    }
}

#[inline(always)]
fn is_leaf(h: u32) -> bool {
    h & LEAF_BIT != 0
}

#[inline(always)]
fn index(h: u32) -> usize {
    (h & !LEAF_BIT) as usize
}

/// A book: its header and its slots, wherever they are held (the account's data on chain,
/// copies off chain). Every slot below `head.len` holds a leaf in the tree, every slot below
/// `head.len - 1` an inner node in it: removing an entry moves the last leaf and inner node into
/// the places it freed, so the account can shrink by one slot. [`Book::insert`] needs one slot
/// more than the entries (the caller grows the account first: [`book_space`]).
pub struct Book<H, S> {
    pub head: H,
    pub slots: S,
}

/// A book read in place.
pub type BookRef<'a> = Book<&'a BidBook, &'a [BookSlot]>;

impl<'a> BookRef<'a> {
    /// The book in a book account's data (discriminator included); `None` when the data is too
    /// short, not a whole number of slots, or not 8-byte aligned (account data on chain is).
    pub fn from_data(data: &'a [u8]) -> Option<Self> {
        let (head, slots) = split_book_data(data.get(8..)?)?;
        Some(Book {
            head: bytemuck::try_from_bytes(head).ok()?,
            slots: bytemuck::try_cast_slice(slots).ok()?,
        })
    }
}

impl<'a> Book<&'a mut BidBook, &'a mut [BookSlot]> {
    /// [`BookRef::from_data`], for writing.
    pub fn from_data_mut(data: &'a mut [u8]) -> Option<Self> {
        let body = data.get_mut(8..)?;
        let slots_len = split_book_data(body)?.1.len();
        let (head, slots) = body.split_at_mut(body.len() - slots_len);
        Some(Book {
            head: bytemuck::try_from_bytes_mut(head).ok()?,
            slots: bytemuck::try_cast_slice_mut(slots).ok()?,
        })
    }
}

/// The header's and the slots' bytes of a book account's data after its discriminator.
fn split_book_data(body: &[u8]) -> Option<(&[u8], &[u8])> {
    let slots = body.len().checked_sub(BOOK_HEADER_SIZE)?;
    slots
        .is_multiple_of(BOOK_SLOT_SIZE)
        .then(|| body.split_at(BOOK_HEADER_SIZE))
}

impl<H: Deref<Target = BidBook>, S: Deref<Target = [BookSlot]>> Book<H, S> {
    pub fn len(&self) -> usize {
        self.head.len()
    }

    pub fn is_empty(&self) -> bool {
        self.head.is_empty()
    }

    pub fn is_full(&self) -> bool {
        self.head.is_full()
    }

    /// Seconds the book has been full in all, up to `now` (see [`FullClock`]).
    pub fn full_secs(&self, now: i64) -> u64 {
        self.head.full_secs(now)
    }

    /// The entry served first: highest book key, then earliest placement.
    pub fn best(&self) -> Option<&BookLeaf> {
        self.edge(0)
    }

    /// The entry served last.
    pub fn worst(&self) -> Option<&BookLeaf> {
        self.edge(1)
    }

    pub fn get(&self, key: BookKey) -> Option<&BookLeaf> {
        if self.head.root == BOOK_NIL {
            return None;
        }
        let leaf = self.leaf(self.descend(key));
        (leaf.key() == key).then_some(leaf)
    }

    pub fn contains(&self, key: BookKey) -> bool {
        self.get(key).is_some()
    }

    /// The entries, best first, without allocating. Amortised O(1) nodes per step.
    pub fn iter(&self) -> BookIter<'_> {
        let mut stack = [BOOK_NIL; KEY_BITS];
        let mut top = 0;
        if self.head.root != BOOK_NIL {
            stack[0] = self.head.root;
            top = 1;
        }
        BookIter {
            slots: &self.slots,
            stack,
            top,
            remaining: self.head.len as usize,
        }
    }

    #[inline(always)]
    fn leaf(&self, h: u32) -> &BookLeaf {
        &self.slots[index(h)].leaf
    }

    #[inline(always)]
    fn inner(&self, h: u32) -> &BookInner {
        &self.slots[h as usize].inner
    }

    /// Handle of the leaf reached by following `key`'s bits from the (non-empty) root.
    #[inline(always)]
    fn descend(&self, key: BookKey) -> u32 {
        let mut h = self.head.root;
        while !is_leaf(h) {
            let node = self.inner(h);
            h = node.children[key.bit(node.crit_bit)];
        }
        h
    }

    /// The leaf reached from handle `h` by always taking child `dir`.
    fn edge_from(&self, mut h: u32, dir: usize) -> &BookLeaf {
        while !is_leaf(h) {
            h = self.inner(h).children[dir];
        }
        self.leaf(h)
    }

    fn edge(&self, dir: usize) -> Option<&BookLeaf> {
        (self.head.root != BOOK_NIL).then(|| self.edge_from(self.head.root, dir))
    }

    /// Where the handle `target` is stored, following `key` (a key below `target`) from the
    /// root: `None` for the root itself, else the inner node and the child index.
    fn parent_of(&self, target: u32, key: BookKey) -> Option<(u32, usize)> {
        let mut parent = None;
        let mut h = self.head.root;
        while h != target {
            let node = self.inner(h);
            let dir = key.bit(node.crit_bit);
            parent = Some((h, dir));
            h = node.children[dir];
        }
        parent
    }
}

impl<H: DerefMut<Target = BidBook>, S: DerefMut<Target = [BookSlot]>> Book<H, S> {
    /// Adds an entry. Touches one root-to-leaf path, twice. Needs a free slot (slot `len`):
    /// `NoSlot` otherwise.
    pub fn insert(
        &mut self,
        key: BookKey,
        bid: Pubkey,
        summary: BidSummary,
    ) -> core::result::Result<(), BookError> {
        if self.is_full() {
            return Err(BookError::Full);
        }
        let n = self.head.len;
        if self.slots.len() <= n as usize {
            return Err(BookError::NoSlot);
        }
        let leaf = BookLeaf {
            bid,
            book_key: key.book_key,
            seq: key.seq,
            summary,
        };
        if self.head.root == BOOK_NIL {
            self.slots[0].leaf = leaf;
            self.head.root = LEAF_BIT;
            self.head.len = 1;
            return Ok(());
        }
        // The leaf the new key would meet: it shares the longest prefix with the key of all leaves.
        let near = self.leaf(self.descend(key)).key();
        let crit = key.crit_bit(&near).ok_or(BookError::Duplicate)?;
        // Walk again to the first node that branches below `crit`: the new inner node goes there.
        let mut parent = None;
        let mut h = self.head.root;
        while !is_leaf(h) {
            let node = self.inner(h);
            if node.crit_bit > crit {
                break;
            }
            let dir = key.bit(node.crit_bit);
            parent = Some((h, dir));
            h = node.children[dir];
        }
        // The new leaf takes slot `n`, the new inner node slot `n - 1`: both are the next free.
        self.slots[n as usize].leaf = leaf;
        let mut children = [h, h];
        children[key.bit(crit)] = n | LEAF_BIT;
        let inner = n - 1;
        self.slots[inner as usize].inner = BookInner {
            children,
            crit_bit: crit,
        };
        self.set_child(parent, inner);
        self.head.len = n + 1;
        Ok(())
    }

    /// Removes the entry with `key` (a filled or cancelled bid) and returns it. The last slot
    /// is free afterwards.
    pub fn remove(&mut self, key: BookKey) -> core::result::Result<BookLeaf, BookError> {
        if self.head.root == BOOK_NIL {
            return Err(BookError::NotFound);
        }
        let mut grand = None;
        let mut parent = None;
        let mut h = self.head.root;
        while !is_leaf(h) {
            let node = self.inner(h);
            let dir = key.bit(node.crit_bit);
            grand = parent;
            parent = Some((h, dir));
            h = node.children[dir];
        }
        let removed = *self.leaf(h);
        if removed.key() != key {
            return Err(BookError::NotFound);
        }
        let n = self.head.len;
        match parent {
            None => self.head.root = BOOK_NIL,
            Some((p, dir)) => {
                // The parent goes too: its other child takes its place.
                let sibling = self.inner(p).children[1 - dir];
                self.set_child(grand, sibling);
                // The last inner node moves into the parent's slot.
                self.move_inner(n - 2, p);
            }
        }
        // The last leaf moves into the removed leaf's slot.
        self.move_leaf(n - 1, index(h) as u32);
        self.head.len = n - 1;
        Ok(removed)
    }

    /// Stores `h` where `parent` says: the root (`None`), or a child of an inner node.
    fn set_child(&mut self, parent: Option<(u32, usize)>, h: u32) {
        match parent {
            None => self.head.root = h,
            Some((p, dir)) => self.slots[p as usize].inner.children[dir] = h,
        }
    }

    /// Moves the leaf in slot `from` (in the tree) to slot `to` (out of it).
    fn move_leaf(&mut self, from: u32, to: u32) {
        if from == to {
            return;
        }
        let leaf = self.slots[from as usize].leaf;
        let parent = self.parent_of(from | LEAF_BIT, leaf.key());
        self.set_child(parent, to | LEAF_BIT);
        self.slots[to as usize].leaf = leaf;
    }

    /// Moves the inner node in slot `from` (in the tree) to slot `to` (out of it).
    fn move_inner(&mut self, from: u32, to: u32) {
        if from == to {
            return;
        }
        let below = self.edge_from(from, 0).key();
        let parent = self.parent_of(from, below);
        self.set_child(parent, to);
        self.slots[to as usize].inner = self.slots[from as usize].inner;
    }

    /// [`Book::insert`] at `now`, starting the full clock when this entry fills the book.
    pub fn insert_at(
        &mut self,
        now: i64,
        key: BookKey,
        bid: Pubkey,
        summary: BidSummary,
    ) -> core::result::Result<(), BookError> {
        self.insert(key, bid, summary)?;
        if self.is_full() {
            self.head.full_clock.since = now;
        }
        Ok(())
    }

    /// [`Book::remove`] at `now`, stopping the full clock when this entry frees a place.
    pub fn remove_at(
        &mut self,
        now: i64,
        key: BookKey,
    ) -> core::result::Result<BookLeaf, BookError> {
        let full = self.full_secs(now);
        let removed = self.remove(key)?;
        self.head.full_clock.secs_before = full;
        Ok(removed)
    }

    /// Moves the entry at `from` to `to`, with its bid and summary: the bid ranks anew, the book
    /// holds as many entries as before (its full clock runs on).
    pub fn rekey(&mut self, from: BookKey, to: BookKey) -> core::result::Result<(), BookError> {
        let leaf = self.remove(from)?;
        self.insert(to, leaf.bid, leaf.summary)
    }

    /// Removes and returns the best entry.
    pub fn pop_best(&mut self) -> Option<BookLeaf> {
        let key = self.best()?.key();
        self.remove(key).ok()
    }
}

/// In-order walk of a book, best first. Holds at most one pending subtree per inner node on the
/// current path, so 128 slots (512 bytes of stack) always suffice.
pub struct BookIter<'a> {
    slots: &'a [BookSlot],
    stack: [u32; KEY_BITS],
    top: usize,
    remaining: usize,
}

impl<'a> Iterator for BookIter<'a> {
    type Item = &'a BookLeaf;

    fn next(&mut self) -> Option<Self::Item> {
        if self.top == 0 {
            return None;
        }
        self.top -= 1;
        let mut h = self.stack[self.top];
        while !is_leaf(h) {
            let node = &self.slots[h as usize].inner;
            self.stack[self.top] = node.children[1];
            self.top += 1;
            h = node.children[0];
        }
        self.remaining -= 1;
        Some(&self.slots[index(h)].leaf)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl ExactSizeIterator for BookIter<'_> {}

/// Names the IDL print of the book's entries ([`__anchor_private_print_idl_book_entries`]).
#[cfg(feature = "idl-build")]
pub const BOOK_ENTRIES_PRINT: &str = "BookEntries";

/// The book's entries in the IDL. Anchor puts in it only the types that instructions, accounts
/// and events reach, and a book's entries follow its header (`BidBook`) in the account, where no
/// field can name them; yet an integrator needs their layout to read a book's bids. The IDL
/// builder (`anchor_lang_idl::build`, run by `gpu-market-idl`) runs every test named
/// `__anchor_private_print_idl…` and takes types from its event prints only, so this prints
/// [`BookSlot`] and the types it holds as the types of an event named [`BOOK_ENTRIES_PRINT`],
/// which `gpu-market-idl` then takes out of the events: no such event exists.
#[cfg(all(test, feature = "idl-build"))]
#[test]
fn __anchor_private_print_idl_book_entries() {
    use anchor_lang::idl::build::IdlBuild;
    use anchor_lang::idl::types::IdlEvent;
    let mut types = std::collections::BTreeMap::new();
    BookSlot::insert_types(&mut types);
    let slot = BookSlot::create_type().expect("BookSlot has an IDL type");
    types.insert(slot.name.clone(), slot);
    use anchor_lang::idl::serde_json;
    let print = serde_json::json!({
        "event": IdlEvent {
            name: BOOK_ENTRIES_PRINT.into(),
            // The builder refuses an empty one; `gpu-market-idl` drops the print.
            discriminator: vec![0; 8],
        },
        "types": types.into_values().collect::<Vec<_>>(),
    });
    println!("--- IDL begin event ---");
    println!("{}", serde_json::to_string_pretty(&print).unwrap());
    println!("--- IDL end event ---");
}

#[cfg(test)]
mod tests;
