use anchor_lang::prelude::*;
use gpu_market_core::overclock::Settings;

/// Bytes of a bid's image reference (`registry/repository:tag`), zero-padded.
pub const IMAGE_REF_LEN: usize = 48;

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, Debug, PartialEq, Eq, InitSpace)]
pub enum BidKind {
    /// Any machine that matches; priced per GPU-hour; ranked by score.
    Queue,
    /// One machine; priced per GPU-day as in GigaSPOT; the most profitable bid wins each interval.
    Spot,
}

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, Debug, PartialEq, Eq, InitSpace)]
pub enum BidStatus {
    /// Waiting in its book.
    Open,
    /// Allocated to a machine.
    Running,
}

/// Overclock terms a bid asks of each of its GPUs. The power limit is mandatory; a lock of 0
/// means "no lock", an offset of 0 "no offset".
#[derive(
    AnchorSerialize, AnchorDeserialize, Clone, Copy, Debug, Default, PartialEq, Eq, InitSpace,
)]
pub struct OverclockTerms {
    pub power_limit_w: u16,
    pub core_lock_mhz: u16,
    pub mem_lock_mhz: u16,
    pub core_offset_mhz: i16,
    pub mem_offset_mhz: i16,
}

impl OverclockTerms {
    pub fn settings(&self) -> Settings {
        let opt_u = |v: u16| (v != 0).then_some(v);
        let opt_i = |v: i16| (v != 0).then_some(v);
        Settings {
            power_limit_w: self.power_limit_w,
            core_lock_mhz: opt_u(self.core_lock_mhz),
            mem_lock_mhz: opt_u(self.mem_lock_mhz),
            core_offset_mhz: opt_i(self.core_offset_mhz),
            mem_offset_mhz: opt_i(self.mem_offset_mhz),
        }
    }
}

/// A client's bid with its escrow. The overclock terms apply to each GPU of the bid.
#[account]
#[derive(InitSpace, Debug)]
pub struct Bid {
    pub market: Pubkey,
    pub client: Pubkey,
    /// The machine of a spot bid; the default key for a queue bid.
    pub machine: Pubkey,
    /// sha256 digest of the image the bid runs.
    pub image_digest: [u8; 32],
    /// Hash of the encrypted environment (the ciphertext travels off chain, to the host only).
    pub env_hash: [u8; 32],
    pub image_ref: [u8; IMAGE_REF_LEN],
    pub kind: BidKind,
    pub status: BidStatus,
    pub gpu_count: u8,
    pub gib_per_gpu: u16,
    /// Bit `c` set: GPU class `c` is accepted.
    pub accepted_classes: u8,
    pub overclock: OverclockTerms,
    /// Per GPU-hour (queue) or per GPU-day (spot), in payment-token base units.
    pub price: u64,
    pub max_duration_secs: u32,
    pub deadline: i64,
    /// Tokens locked in the market's payment vault for this bid.
    pub escrow: u64,
    /// The weighted score at placement (0..=10 000) and the book key derived from it.
    pub score: u64,
    pub book_key: u64,
    /// Placement order in the market; with `book_key` it locates the bid in its book.
    pub seq: u64,
    pub placed_at: i64,
    /// Whether the score used the client's stake (which stays locked while the bid waits).
    pub used_stake: bool,
    pub bump: u8,
}
