//! The sizes and limits an integrator needs that the program declares as `usize`, for the IDL
//! (its `constants`): Anchor's IDL has no `usize`, so each is given here as a `u32` equal to its
//! namesake in [`crate::state`]. Those of other types carry `#[constant]` where they are
//! declared (the PDA seeds in `state::seeds`, the market's limits in `state::market`, ...).

use anchor_lang::prelude::*;

use crate::state;

/// Entries a book holds at most.
#[constant]
pub const BOOK_CAPACITY: u32 = state::BOOK_CAPACITY as u32;
/// Bytes of a book's header after its 8-byte discriminator.
#[constant]
pub const BOOK_HEADER_SIZE: u32 = state::BOOK_HEADER_SIZE as u32;
/// Bytes each waiting bid adds to its book (paid by the bid, returned when it leaves).
#[constant]
pub const BOOK_SLOT_SIZE: u32 = state::BOOK_SLOT_SIZE as u32;
/// Bytes of an empty book account: what `init_queue_book` and `init_spot_book` expect.
#[constant]
pub const BOOK_EMPTY_SPACE: u32 = state::BOOK_EMPTY_SPACE as u32;
/// GPUs a machine declares at most.
#[constant]
pub const MAX_GPUS: u32 = state::MAX_GPUS as u32;
/// Cached images a machine declares at most (`set_cached_images`).
#[constant]
pub const MAX_CACHED_IMAGES: u32 = state::MAX_CACHED_IMAGES as u32;
/// Bytes of a region label (zero-padded).
#[constant]
pub const REGION_LEN: u32 = state::REGION_LEN as u32;
/// Bytes of a GPU class's name (zero-padded).
#[constant]
pub const CLASS_NAME_LEN: u32 = state::CLASS_NAME_LEN as u32;
/// Regions a market lists at most.
#[constant]
pub const MAX_MARKET_REGIONS: u32 = state::MAX_MARKET_REGIONS as u32;
/// Bytes of a machine's public address at most.
#[constant]
pub const HOST_LEN: u32 = state::HOST_LEN as u32;
/// Networks a machine's egress allow-list names at most.
#[constant]
pub const MAX_ALLOW: u32 = state::MAX_ALLOW as u32;
/// Bytes of a bid's image reference at most.
#[constant]
pub const IMAGE_REF_LEN: u32 = state::IMAGE_REF_LEN as u32;
/// Ports a bid publishes at most.
#[constant]
pub const MAX_PORTS: u32 = state::MAX_PORTS as u32;
/// Regions a bid names at most.
#[constant]
pub const MAX_REGIONS: u32 = state::MAX_REGIONS as u32;
/// GPU classes a market prices.
#[constant]
pub const GPU_CLASSES: u32 = state::GPU_CLASSES as u32;
