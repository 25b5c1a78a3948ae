//! The book against a `BTreeMap` model, driven as the program drives it.

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
    b[..8].copy_from_slice(&key.book_key.to_le_bytes());
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
    // A full book: 656 KB (623 KB before entries carried their bid's duration).
    assert_eq!(book_space(BOOK_CAPACITY), 655_496);
    assert_eq!(core::mem::align_of::<BidBook>(), 8);
    assert_eq!(core::mem::align_of::<BookSlot>(), 8);
    assert_eq!(core::mem::offset_of!(BidBook, kind), 64);
    assert_eq!(core::mem::offset_of!(BidBook, len), 68);
    assert_eq!(core::mem::offset_of!(BookSlot, inner), 144);
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
        let mk = (Reverse(key.book_key), key.seq);
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
                    pop(&mut book).map(|l| ((Reverse(l.book_key), l.seq), (l.bid, payload(&l))));
                let want = model.pop_first();
                assert_eq!(got, want, "op {op}: pop_best");
            }
        }
        assert_eq!(book.len(), model.len());
        let to_leaf = |(k, v): (&(Reverse<u64>, u64), &(Pubkey, u32))| (k.0 .0, k.1, v.0, v.1);
        assert_eq!(
            book.best().map(|l| (l.book_key, l.seq, l.bid, payload(l))),
            model.iter().next().map(to_leaf)
        );
        assert_eq!(
            book.worst().map(|l| (l.book_key, l.seq, l.bid, payload(l))),
            model.iter().next_back().map(to_leaf)
        );
        assert_eq!(
            book.get(key).map(|l| (l.bid, payload(l))),
            model.get(&mk).copied()
        );
        if op % 97 == 0 {
            let got: Vec<_> = book
                .iter()
                .map(|l| (l.book_key, l.seq, l.bid, payload(l)))
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

#[test]
fn an_insert_without_a_free_slot_is_refused_and_changes_nothing() {
    let mut book = new_book();
    for seq in 0..3 {
        insert(&mut book, BookKey::new(7, seq)).unwrap();
    }
    let before = keys(&book);
    // The account was not grown first: the slots hold exactly the entries.
    assert_eq!(
        book.insert(BookKey::new(9, 9), Pubkey::new_unique(), summary(9)),
        Err(BookError::NoSlot)
    );
    assert_eq!(keys(&book), before);
    check(&book);
}
