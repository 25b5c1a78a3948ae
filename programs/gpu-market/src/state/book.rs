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
//! Entries are ranked by [`BookKey`]: higher `score` first, then lower `seq` (earlier placement).
//! The tree is keyed on the 128 bits `!score ‖ seq`, so ascending bit order is rank order and an
//! in-order walk yields the best bid first.
//!
//! Every operation walks one root-to-leaf path. Crit bits strictly grow down a path, so a path has
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
pub const BOOK_KIND_QUEUE: u8 = 1;
/// `BidBook::kind` of one machine's spot book.
pub const BOOK_KIND_SPOT: u8 = 2;
/// The empty handle: no root, no next free node.
pub const BOOK_NIL: u32 = u32::MAX;
/// Set in a handle that names a leaf; clear in one that names an inner node.
const LEAF_BIT: u32 = 1 << 31;
/// Bits in a key, and so the deepest a path can be (crit bits strictly grow down it).
const KEY_BITS: usize = 128;

/// Bytes of `BidBook`, the header, pinned below.
pub const BOOK_HEADER_SIZE: usize = 128;
/// Bytes of one entry's [`BookSlot`].
pub const BOOK_SLOT_SIZE: usize = 152;
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
    /// Higher first. 0..=10000 from the score formula plus aging; any `u64` works.
    pub score: u64,
    /// Placement order, lower first among equal scores. Unique per book makes keys unique.
    pub seq: u64,
}

impl BookKey {
    pub const fn new(score: u64, seq: u64) -> Self {
        Self { score, seq }
    }

    /// Bit `i` (0 = most significant) of the tree key `!score ‖ seq`, as a child index.
    #[inline(always)]
    fn bit(&self, i: u32) -> usize {
        if i < 64 {
            ((!self.score >> (63 - i)) & 1) as usize
        } else {
            ((self.seq >> (127 - i)) & 1) as usize
        }
    }

    /// The first bit where the two tree keys differ, or `None` when the keys are equal.
    /// (`!a ^ !b == a ^ b`, so the score half needs no negation.)
    #[inline(always)]
    fn crit_bit(&self, other: &BookKey) -> Option<u32> {
        let hi = self.score ^ other.score;
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
        other.score.cmp(&self.score).then(self.seq.cmp(&other.seq))
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
    pub deadline: i64,
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
}

impl BidSummary {
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
            deadline: self.deadline,
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
    pub score: u64,
    pub seq: u64,
    pub summary: BidSummary,
}

impl BookLeaf {
    pub fn key(&self) -> BookKey {
        BookKey::new(self.score, self.seq)
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
    /// 0..128, counted from the most significant bit of `!score ‖ seq`.
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

const _: () = assert!(size_of::<BidSummary>() == 32 + 8 + 8 + 10 + 10 + 2 + 1 + 1 + 1 + 7 + 8);
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

    /// The entry served first: highest score, then earliest placement.
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
            score: key.score,
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Reverse;
    use std::collections::btree_map::Entry;
    use std::collections::{BTreeMap, HashSet};

    /// xorshift64*: deterministic and dependency-free.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// A book as the program keeps it: its header and exactly `len` slots.
    type Owned = Book<Box<BidBook>, Vec<BookSlot>>;

    fn new_book() -> Owned {
        let mut head = Box::new(BidBook::zeroed());
        head.init(Pubkey::new_unique(), BOOK_KIND_QUEUE, Pubkey::default());
        Book {
            head,
            slots: Vec::new(),
        }
    }

    /// [`Book::insert`] as the program calls it: one slot more first, given back if refused.
    fn put(
        book: &mut Owned,
        key: BookKey,
        bid: Pubkey,
        summary: BidSummary,
    ) -> core::result::Result<(), BookError> {
        book.slots.push(BookSlot::zeroed());
        let got = book.insert(key, bid, summary);
        book.slots.truncate(book.len());
        got
    }

    /// [`Book::remove`] as the program calls it: the freed last slot goes.
    fn take(book: &mut Owned, key: BookKey) -> core::result::Result<BookLeaf, BookError> {
        let got = book.remove(key);
        book.slots.truncate(book.len());
        got
    }

    fn pop(book: &mut Owned) -> Option<BookLeaf> {
        let got = book.pop_best();
        book.slots.truncate(book.len());
        got
    }

    fn bid_of(key: BookKey) -> Pubkey {
        let mut b = [0u8; 32];
        b[..8].copy_from_slice(&key.score.to_le_bytes());
        b[8..16].copy_from_slice(&key.seq.to_le_bytes());
        Pubkey::new_from_array(b)
    }

    fn keys(book: &Owned) -> Vec<BookKey> {
        book.iter().map(BookLeaf::key).collect()
    }

    /// Walks the whole tree; panics on any broken invariant (leaves dense in slots `0..len`,
    /// inner nodes in `0..len - 1`, no slot beyond). Returns the deepest path (inner nodes from
    /// root to a leaf).
    fn check(book: &Owned) -> usize {
        let n = book.len();
        assert_eq!(
            book.slots.len(),
            n,
            "the account holds exactly one slot per entry"
        );
        let mut leaves_seen = HashSet::new();
        let mut inners_seen = HashSet::new();
        let mut max_depth = 0;
        if book.head.root != BOOK_NIL {
            // (handle, depth, crit bit of the parent)
            let mut stack = vec![(book.head.root, 0usize, None::<u32>)];
            while let Some((h, depth, parent_crit)) = stack.pop() {
                if is_leaf(h) {
                    let i = index(h);
                    assert!(i < n);
                    assert!(leaves_seen.insert(i), "leaf {i} reached twice");
                    max_depth = max_depth.max(depth);
                } else {
                    let i = h as usize;
                    assert!(i + 1 < n);
                    assert!(inners_seen.insert(i), "inner {i} reached twice");
                    let node = book.inner(h);
                    assert!(node.crit_bit < 128);
                    if let Some(parent_crit) = parent_crit {
                        assert!(
                            node.crit_bit > parent_crit,
                            "crit bits must grow down a path"
                        );
                    }
                    // All leaves below agree above the crit bit and split on it: the subtree's
                    // first and last keys differ first there.
                    let first = book.edge_from(node.children[0], 0).key();
                    let last = book.edge_from(node.children[1], 1).key();
                    assert_eq!(first.crit_bit(&last), Some(node.crit_bit));
                    assert_eq!((first.bit(node.crit_bit), last.bit(node.crit_bit)), (0, 1));
                    for child in node.children {
                        stack.push((child, depth + 1, Some(node.crit_bit)));
                    }
                }
            }
            // Each leaf is found by following its own bits.
            for &i in &leaves_seen {
                let key = book.slots[i].leaf.key();
                assert_eq!(index(book.descend(key)), i);
            }
        }
        assert_eq!(leaves_seen.len(), n);
        assert_eq!(inners_seen.len(), n.saturating_sub(1));
        // Order: strictly ascending in book order, and the iterator's count is exact.
        let ks = keys(book);
        assert_eq!(ks.len(), n);
        assert!(ks.windows(2).all(|w| w[0] < w[1]));
        max_depth
    }

    /// A summary told apart by its price alone (what the tests check moves with its entry).
    fn summary(price: u32) -> BidSummary {
        BidSummary {
            price: price as u64,
            ..BidSummary::default()
        }
    }

    fn payload(leaf: &BookLeaf) -> u32 {
        leaf.summary.price as u32
    }

    fn insert(book: &mut Owned, key: BookKey) -> core::result::Result<(), BookError> {
        put(book, key, bid_of(key), summary(key.seq as u32))
    }

    #[test]
    fn layout_is_pinned() {
        assert_eq!(size_of::<BidBook>(), BOOK_HEADER_SIZE);
        assert_eq!(BOOK_EMPTY_SPACE, 136);
        // A full book: 623 KB, what every book was before it grew with use.
        assert_eq!(book_space(BOOK_CAPACITY), 622_728);
        assert_eq!(core::mem::align_of::<BidBook>(), 8);
        assert_eq!(core::mem::align_of::<BookSlot>(), 8);
        assert_eq!(core::mem::offset_of!(BidBook, kind), 64);
        assert_eq!(core::mem::offset_of!(BidBook, len), 68);
        assert_eq!(core::mem::offset_of!(BookSlot, inner), 136);
        assert_eq!(BidBook::DISCRIMINATOR.len(), 8);
    }

    #[test]
    fn leading_zeros_matches_std() {
        let mut rng = Rng(7);
        for s in 0..64 {
            let x = 1u64 << s;
            assert_eq!(leading_zeros(x), x.leading_zeros());
            assert_eq!(leading_zeros(x | (x - 1)), x.leading_zeros());
        }
        for _ in 0..10_000 {
            let x = rng.next() >> rng.below(64);
            if x != 0 {
                assert_eq!(leading_zeros(x), x.leading_zeros());
            }
        }
    }

    #[test]
    fn key_order_is_rank_order() {
        assert!(BookKey::new(10, 5) < BookKey::new(9, 0));
        assert!(BookKey::new(10, 5) < BookKey::new(10, 6));
        assert!(BookKey::new(u64::MAX, u64::MAX) < BookKey::new(0, 0));
        // The bit encoding agrees with `Ord`: the first differing bit decides.
        let mut rng = Rng(11);
        for _ in 0..10_000 {
            let a = BookKey::new(rng.below(4), rng.below(4));
            let b = BookKey::new(rng.below(4), rng.below(4));
            match a.crit_bit(&b) {
                None => assert_eq!(a, b),
                Some(c) => assert_eq!(a < b, a.bit(c) == 0),
            }
        }
    }

    #[test]
    fn empty_book() {
        let mut book = new_book();
        assert!(book.is_empty());
        assert_eq!(book.best(), None);
        assert_eq!(book.worst(), None);
        assert_eq!(book.iter().next(), None);
        assert_eq!(book.get(BookKey::new(1, 1)), None);
        assert_eq!(
            take(&mut book, BookKey::new(1, 1)),
            Err(BookError::NotFound)
        );
        assert_eq!(pop(&mut book), None);
        check(&book);
    }

    #[test]
    fn iterates_best_first() {
        let mut book = new_book();
        let placed = [
            (5000, 1),
            (10_000, 2),
            (5000, 3),
            (0, 4),
            (10_000, 5),
            (7500, 6),
            (5000, 0),
        ];
        for (score, seq) in placed {
            insert(&mut book, BookKey::new(score, seq)).unwrap();
        }
        let expected: Vec<BookKey> = [
            (10_000, 2),
            (10_000, 5),
            (7500, 6),
            (5000, 0),
            (5000, 1),
            (5000, 3),
            (0, 4),
        ]
        .into_iter()
        .map(|(s, q)| BookKey::new(s, q))
        .collect();
        assert_eq!(keys(&book), expected);
        assert_eq!(book.iter().len(), 7);
        assert_eq!(book.best().unwrap().key(), BookKey::new(10_000, 2));
        assert_eq!(book.worst().unwrap().key(), BookKey::new(0, 4));
        let leaf = book.get(BookKey::new(7500, 6)).unwrap();
        assert_eq!(
            (leaf.bid, payload(leaf)),
            (bid_of(BookKey::new(7500, 6)), 6)
        );
        check(&book);
        let mut popped = Vec::new();
        while let Some(leaf) = pop(&mut book) {
            popped.push(leaf.key());
        }
        assert_eq!(popped, expected);
        check(&book);
    }

    #[test]
    fn duplicate_is_rejected_and_changes_nothing() {
        let mut book = new_book();
        insert(&mut book, BookKey::new(100, 1)).unwrap();
        assert_eq!(
            insert(&mut book, BookKey::new(100, 1)),
            Err(BookError::Duplicate)
        );
        insert(&mut book, BookKey::new(100, 2)).unwrap();
        insert(&mut book, BookKey::new(50, 1)).unwrap();
        let before = keys(&book);
        for (s, q) in [(100, 1), (100, 2), (50, 1)] {
            assert_eq!(
                put(
                    &mut book,
                    BookKey::new(s, q),
                    Pubkey::new_unique(),
                    summary(9)
                ),
                Err(BookError::Duplicate)
            );
        }
        assert_eq!(keys(&book), before);
        assert_eq!(payload(book.get(BookKey::new(100, 2)).unwrap()), 2);
        check(&book);
    }

    #[test]
    fn missing_key_is_not_found_and_changes_nothing() {
        let mut book = new_book();
        for seq in 0..10 {
            insert(&mut book, BookKey::new(seq % 3, seq)).unwrap();
        }
        let before = keys(&book);
        // Same score or same seq as a present key, but not both.
        for (s, q) in [
            (0, 1),
            (1, 0),
            (2, 10),
            (3, 3),
            (u64::MAX, 0),
            (0, u64::MAX),
        ] {
            assert_eq!(
                take(&mut book, BookKey::new(s, q)),
                Err(BookError::NotFound)
            );
            assert_eq!(book.get(BookKey::new(s, q)), None);
        }
        assert_eq!(keys(&book), before);
        let removed = take(&mut book, BookKey::new(1, 4)).unwrap();
        assert_eq!(
            (removed.bid, payload(&removed)),
            (bid_of(BookKey::new(1, 4)), 4)
        );
        assert_eq!(
            take(&mut book, BookKey::new(1, 4)),
            Err(BookError::NotFound)
        );
        check(&book);
    }

    #[test]
    fn fills_to_capacity_then_full_and_empties_to_its_header() {
        let mut book = new_book();
        let mut rng = Rng(0x5eed);
        let mut model = BTreeMap::new();
        // Scores like the real ones: 0..=10000 plus some aging; seq is a placement counter.
        for seq in 0..BOOK_CAPACITY as u64 {
            let key = BookKey::new(rng.below(10_500), seq);
            insert(&mut book, key).unwrap();
            model.insert(key, ());
        }
        assert!(book.is_full());
        assert_eq!(book.len(), BOOK_CAPACITY);
        let depth = check(&book);
        assert!(
            depth <= 40,
            "depth {depth} for {BOOK_CAPACITY} realistic keys"
        );
        assert_eq!(keys(&book), model.keys().copied().collect::<Vec<_>>());
        assert_eq!(
            insert(&mut book, BookKey::new(1, u64::MAX)),
            Err(BookError::Full)
        );
        // Full wins over Duplicate: the cheaper check comes first.
        let first = *model.keys().next().unwrap();
        assert_eq!(insert(&mut book, first), Err(BookError::Full));
        // One out, one in.
        take(&mut book, first).unwrap();
        insert(&mut book, BookKey::new(20_000, u64::MAX)).unwrap();
        assert_eq!(book.best().unwrap().key(), BookKey::new(20_000, u64::MAX));
        assert_eq!(insert(&mut book, first), Err(BookError::Full));
        take(&mut book, BookKey::new(20_000, u64::MAX)).unwrap();
        model.remove(&first);
        // Remove the rest in random order.
        let mut rest: Vec<BookKey> = model.keys().copied().collect();
        for i in (1..rest.len()).rev() {
            rest.swap(i, rng.below(i as u64 + 1) as usize);
        }
        for (n, key) in rest.iter().enumerate() {
            assert_eq!(take(&mut book, *key).unwrap().key(), *key);
            if n % 512 == 0 {
                check(&book);
            }
        }
        assert!(book.is_empty());
        assert_eq!(book.head.root, BOOK_NIL);
        assert_eq!(book.best(), None);
        // Every slot is given back: the account is down to its header.
        assert!(book.slots.is_empty());
        check(&book);
        // And it fills again.
        for seq in 0..BOOK_CAPACITY as u64 {
            insert(&mut book, BookKey::new(rng.below(3), seq)).unwrap();
        }
        assert_eq!(
            insert(&mut book, BookKey::new(0, u64::MAX)),
            Err(BookError::Full)
        );
        check(&book);
    }

    #[test]
    fn deepest_possible_tree() {
        // Keys whose tree keys are 0 and every single bit: a chain of 128 inner nodes.
        let mut book = new_book();
        let mut expected = vec![BookKey::new(u64::MAX, 0)];
        for i in 0..64 {
            expected.push(BookKey::new(u64::MAX, 1 << i));
            expected.push(BookKey::new(!(1u64 << i), 0));
        }
        for key in expected.iter().rev() {
            insert(&mut book, *key).unwrap();
        }
        assert_eq!(check(&book), 128);
        expected.sort();
        assert_eq!(keys(&book), expected);
        assert_eq!(book.worst().unwrap().key(), BookKey::new(!(1u64 << 63), 0));
        for key in &expected {
            take(&mut book, *key).unwrap();
        }
        assert!(book.is_empty());
        check(&book);
    }

    /// Random inserts, removes, look-ups and pops against a `BTreeMap`, with keys from
    /// ranges small enough that duplicates and misses are common, plus the extremes.
    fn random_ops(seed: u64, ops: usize, score_range: u64, seq_range: u64) {
        let mut book = new_book();
        let mut model: BTreeMap<(Reverse<u64>, u64), (Pubkey, u32)> = BTreeMap::new();
        let mut rng = Rng(seed);
        let pick = |rng: &mut Rng| {
            let score = match rng.below(16) {
                0 => u64::MAX,
                1 => 0,
                _ => rng.below(score_range),
            };
            let seq = match rng.below(16) {
                0 => u64::MAX,
                1 => 0,
                _ => rng.below(seq_range),
            };
            BookKey::new(score, seq)
        };
        for op in 0..ops {
            let key = pick(&mut rng);
            let mk = (Reverse(key.score), key.seq);
            match rng.below(10) {
                0..=4 => {
                    let bid = Pubkey::new_unique();
                    let payload = rng.next() as u32;
                    let got = put(&mut book, key, bid, summary(payload));
                    let want = if model.len() == BOOK_CAPACITY {
                        Err(BookError::Full)
                    } else if let Entry::Vacant(slot) = model.entry(mk) {
                        slot.insert((bid, payload));
                        Ok(())
                    } else {
                        Err(BookError::Duplicate)
                    };
                    assert_eq!(got, want, "op {op}: insert {key:?}");
                }
                5..=7 => {
                    let got = take(&mut book, key).map(|l| (l.bid, payload(&l)));
                    let want = model.remove(&mk).ok_or(BookError::NotFound);
                    assert_eq!(got, want, "op {op}: remove {key:?}");
                }
                8 => {
                    let got = book.contains(key);
                    assert_eq!(got, model.contains_key(&mk), "op {op}: contains {key:?}");
                }
                _ => {
                    let got =
                        pop(&mut book).map(|l| ((Reverse(l.score), l.seq), (l.bid, payload(&l))));
                    let want = model.pop_first();
                    assert_eq!(got, want, "op {op}: pop_best");
                }
            }
            assert_eq!(book.len(), model.len());
            let to_leaf = |(k, v): (&(Reverse<u64>, u64), &(Pubkey, u32))| (k.0 .0, k.1, v.0, v.1);
            assert_eq!(
                book.best().map(|l| (l.score, l.seq, l.bid, payload(l))),
                model.iter().next().map(to_leaf)
            );
            assert_eq!(
                book.worst().map(|l| (l.score, l.seq, l.bid, payload(l))),
                model.iter().next_back().map(to_leaf)
            );
            assert_eq!(
                book.get(key).map(|l| (l.bid, payload(l))),
                model.get(&mk).copied()
            );
            if op % 97 == 0 {
                let got: Vec<_> = book
                    .iter()
                    .map(|l| (l.score, l.seq, l.bid, payload(l)))
                    .collect();
                let want: Vec<_> = model.iter().map(to_leaf).collect();
                assert_eq!(got, want, "op {op}: iteration");
                check(&book);
            }
        }
        check(&book);
        // Drain in random order through `remove`; the book ends empty, down to its header.
        let mut rest: Vec<BookKey> = model.keys().map(|k| BookKey::new(k.0 .0, k.1)).collect();
        for i in (1..rest.len()).rev() {
            rest.swap(i, rng.below(i as u64 + 1) as usize);
        }
        for key in rest {
            take(&mut book, key).unwrap();
        }
        assert!(book.is_empty());
        assert!(book.slots.is_empty());
        check(&book);
    }

    #[test]
    fn random_ops_dense_keys() {
        random_ops(1, 20_000, 8, 64);
    }

    #[test]
    fn random_ops_realistic_keys() {
        random_ops(2, 20_000, 10_500, 3_000);
    }

    #[test]
    fn random_ops_wide_keys() {
        random_ops(3, 20_000, u64::MAX, u64::MAX);
    }

    #[test]
    fn random_ops_near_capacity() {
        // Mostly inserts into a small key space larger than the capacity: exercises `Full`.
        let mut book = new_book();
        let mut model = BTreeMap::new();
        let mut rng = Rng(4);
        for op in 0..30_000 {
            let key = BookKey::new(rng.below(4), rng.below(6_000));
            if rng.below(8) < 7 {
                let want = if model.len() == BOOK_CAPACITY {
                    Err(BookError::Full)
                } else if let Entry::Vacant(slot) = model.entry(key) {
                    slot.insert(());
                    Ok(())
                } else {
                    Err(BookError::Duplicate)
                };
                assert_eq!(insert(&mut book, key), want, "op {op}");
            } else {
                let want = model.remove(&key).map(|_| key).ok_or(BookError::NotFound);
                assert_eq!(take(&mut book, key).map(|l| l.key()), want, "op {op}");
            }
        }
        assert!(book.is_full());
        assert_eq!(keys(&book), model.keys().copied().collect::<Vec<_>>());
        check(&book);
    }
}
