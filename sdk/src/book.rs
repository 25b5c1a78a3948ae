//! Reading a bid book (the zero-copy `BidBook` account) off chain, in rank order.

use anchor_lang::__private::bytemuck;
use anchor_lang::Discriminator;
use gpu_market::state::{BidBook, BookLeaf};
use solana_pubkey::Pubkey;

/// A book's header and its entries, best first.
pub struct BookEntries {
    pub market: Pubkey,
    /// The machine of a spot book; the default key for a queue book.
    pub machine: Pubkey,
    /// `BOOK_KIND_QUEUE` or `BOOK_KIND_SPOT`.
    pub kind: u8,
    pub entries: Vec<BookLeaf>,
}

/// Decodes a book account's data; `None` when it is not an initialised book.
pub fn read_book(data: &[u8]) -> Option<BookEntries> {
    let body = data.strip_prefix(BidBook::DISCRIMINATOR)?;
    let size = std::mem::size_of::<BidBook>();
    if body.len() < size {
        return None;
    }
    // Account data carries no alignment guarantee: copy it into 8-byte aligned memory.
    let mut aligned = vec![0u64; size.div_ceil(8)];
    bytemuck::cast_slice_mut::<u64, u8>(&mut aligned)[..size].copy_from_slice(&body[..size]);
    let book: &BidBook = bytemuck::from_bytes(&bytemuck::cast_slice::<u64, u8>(&aligned)[..size]);
    if book.kind == 0 {
        return None;
    }
    Some(BookEntries {
        market: book.market,
        machine: book.machine,
        kind: book.kind,
        entries: book.iter().copied().collect(),
    })
}
