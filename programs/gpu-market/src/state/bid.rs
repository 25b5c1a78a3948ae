use anchor_lang::__private::bytemuck::{Pod, Zeroable};
use anchor_lang::prelude::*;
use gpu_market_core::fit::{Choice, Host, Need, Offer, Regions, Room, Terms, Unfit};
use gpu_market_core::lease;
use gpu_market_core::overclock;
use gpu_market_core::settlement::{self, PriceUnit};

use crate::errors::MarketError;
use crate::state::{BidBook, BidSummary, Machine, MachineStatus, MAX_GPUS, REGION_LEN};

/// The longest image reference (`registry/repository:tag`) a bid takes, in bytes: the
/// distribution spec's limit on a repository name with its registry host (255), which
/// `region-docker.pkg.dev/project/repo/image:tag` names and the like stay well within. The bid
/// account is sized to the reference it holds.
pub const IMAGE_REF_LEN: usize = 255;
/// Most container ports one bid publishes.
pub const MAX_PORTS: usize = 4;
/// Most regions one bid names.
pub const MAX_REGIONS: usize = 4;

/// Whether `regions` is what a bid may name: at most [`MAX_REGIONS`], none empty, none twice.
pub fn regions_valid(regions: &[[u8; REGION_LEN]]) -> bool {
    regions.len() <= MAX_REGIONS
        && regions
            .iter()
            .enumerate()
            .all(|(i, r)| r[0] != 0 && !regions[..i].contains(r))
}

/// Whether `ports` is what a bid may publish: at most [`MAX_PORTS`], each non-zero, none twice.
pub fn ports_valid(ports: &[u16]) -> bool {
    ports.len() <= MAX_PORTS
        && ports
            .iter()
            .enumerate()
            .all(|(i, &p)| p != 0 && !ports[..i].contains(&p))
}

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
/// means "no lock", an offset of 0 "no offset". `repr(C)` because book entries hold it zero-copy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, InitSpace)]
#[cfg_attr(feature = "idl-build", derive(AnchorSerialize, AnchorDeserialize))]
#[repr(C)]
pub struct OverclockTerms {
    pub power_limit_w: u16,
    pub core_lock_mhz: u16,
    pub mem_lock_mhz: u16,
    pub core_offset_mhz: i16,
    pub mem_offset_mhz: i16,
}

// SAFETY: `repr(C)`, five 2-byte integers, no padding (pinned below): every bit pattern is valid.
unsafe impl Zeroable for OverclockTerms {}
unsafe impl Pod for OverclockTerms {}
const _: () = assert!(core::mem::size_of::<OverclockTerms>() == 10);
crate::state::pod_borsh!(OverclockTerms);

impl OverclockTerms {
    /// The stored form of `s` (an absent lock or offset is 0).
    pub fn from_core(s: &overclock::OverclockTerms) -> Self {
        OverclockTerms {
            power_limit_w: s.power_limit_w,
            core_lock_mhz: s.core_lock_mhz.unwrap_or(0),
            mem_lock_mhz: s.mem_lock_mhz.unwrap_or(0),
            core_offset_mhz: s.core_offset_mhz.unwrap_or(0),
            mem_offset_mhz: s.mem_offset_mhz.unwrap_or(0),
        }
    }

    pub fn to_core(&self) -> overclock::OverclockTerms {
        overclock::Settings::terms(self)
    }
}

/// The stored terms as the fit rule reads them, without conversion (0: no lock or offset).
impl overclock::Settings for OverclockTerms {
    fn power_limit_w(&self) -> u16 {
        self.power_limit_w
    }
    fn core_lock_mhz(&self) -> Option<u16> {
        (self.core_lock_mhz != 0).then_some(self.core_lock_mhz)
    }
    fn mem_lock_mhz(&self) -> Option<u16> {
        (self.mem_lock_mhz != 0).then_some(self.mem_lock_mhz)
    }
    fn core_offset_mhz(&self) -> Option<i16> {
        (self.core_offset_mhz != 0).then_some(self.core_offset_mhz)
    }
    fn mem_offset_mhz(&self) -> Option<i16> {
        (self.mem_offset_mhz != 0).then_some(self.mem_offset_mhz)
    }
}

/// The most throughput, in bps, a bid may let the host trade for energy with auto power (20 %).
#[constant]
pub const MAX_AUTO_POWER_TOLERANCE_BPS: u16 = 2_000;

/// A client's bid with its escrow. Its fixed fields are [`BidData`]'s (`bid.escrow` reads
/// through `Deref`); its kind, status and the lists it asks follow.
#[account]
#[derive(InitSpace, Debug)]
pub struct Bid {
    pub data: BidData,
    pub kind: BidKind,
    pub status: BidStatus,
    #[max_len(IMAGE_REF_LEN)]
    pub image_ref: String,
    /// One entry per GPU of the bid, or a single entry that applies to each of its GPUs (the
    /// account is sized by the entries it holds).
    #[max_len(16)]
    pub overclock: Vec<OverclockTerms>,
    /// Container ports the lease publishes on the machine's address.
    #[max_len(MAX_PORTS)]
    pub ports: Vec<u16>,
    /// The regions whose machines may run it (none: any).
    #[max_len(MAX_REGIONS)]
    pub regions: Vec<[u8; REGION_LEN]>,
    /// Auto power: the share of throughput (bps) the client lets the host trade for a lower
    /// power limit than the stated one (see [`MAX_AUTO_POWER_TOLERANCE_BPS`]); `None`: the
    /// stated limits hold as they are.
    pub auto_power: Option<u16>,
}

/// A bid's fixed fields. Plain old data, keys first (the agent filters bids by `market` at
/// offset 8 and `machine` at offset 72), then widest first so that `repr(C)` adds no padding:
/// Borsh reads and writes it as one copy (`pod_borsh!`), where the derived code took one call
/// per field.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "idl-build", derive(AnchorSerialize, AnchorDeserialize))]
#[repr(C)]
pub struct BidData {
    pub market: Pubkey,
    pub client: Pubkey,
    /// The machine of a spot bid; the default key for a queue bid.
    pub machine: Pubkey,
    /// The client's token account the escrow came from: where a keeper sends a refund (any
    /// token account of the client for the payment mint is accepted).
    pub refund_tokens: Pubkey,
    /// sha256 digest of the image the bid runs.
    pub image_digest: [u8; 32],
    /// Hash of the encrypted environment (the ciphertext travels off chain, to the host only).
    pub env_hash: [u8; 32],
    /// The machine whose GPUs `reserve` holds for this queue bid, or the first of a gang's
    /// (`reserve_gang`), whose reservation's start is the gang's (the machine's
    /// [`crate::state::Reservation`] says whether it still holds); default: none.
    pub reserved_on: Pubkey,
    /// Per GPU-hour (queue) or per GPU-day (spot), in payment-token base units.
    pub price: u64,
    pub deadline: i64,
    /// Tokens locked in the market's payment vault for this bid: at placement, its price for
    /// its run and for the longest it may wait to start (`settlement::bid_escrow`).
    pub escrow: u64,
    /// Paid at placement for urgency (the market's at once; never refunded).
    pub urgency_premium: u64,
    /// The weighted score at placement, or at its last boost (0..=10 000), and the book key
    /// derived from it.
    pub score: u64,
    pub book_key: u64,
    /// Placement order in the market; with `book_key` it locates the bid in its book.
    pub seq: u64,
    pub placed_at: i64,
    /// Its book's [`BidBook::full_secs`] when it entered: what it saw of the book's full time
    /// since is what its [`Bid::holding_charge`] counts.
    pub full_secs_at_entry: u64,
    pub max_duration_secs: u32,
    /// The shortest run the client accepts: the bid may start until `deadline` less this
    /// ([`Bid::latest_start`]), and expires then. Equal to `max_duration_secs` unless the client
    /// accepted a shorter run for a later start.
    pub min_duration_secs: u32,
    /// Thousandths of a CPU core and MiB of memory the lease holds on its machine (the
    /// container's limits; 0: its GPU memory's share of the machine's, `Host::or_share`).
    pub cpu_milli: u32,
    pub memory_mib: u32,
    pub gib_per_gpu: u16,
    /// GiB of scratch volume at the container's `/workspace` (0: none).
    pub scratch_gib: u16,
    pub gpu_count: u8,
    /// Bit `c` set: GPU class `c` is accepted.
    pub accepted_classes: u8,
    pub bump: u8,
    /// Machines a gang bid runs on at once, `gpu_count` GPUs on each (1: one machine).
    pub parts: u8,
    /// The parts of a gang bid whose leases have not settled yet (0 while it waits).
    pub parts_running: u8,
    /// [`GangFlags`] of a running gang bid: what its parts' settlements decided so far.
    pub gang_flags: u8,
    /// Which of the bid's reservations is current: `reserve` and `reserve_gang` count it up
    /// and stamp it on the reservations they make, and it counts up again when the bid leaves
    /// its book, so a machine's reservation of an earlier round holds nothing
    /// ([`Machine::holds`]). A gang's reservation spans several machines, which one
    /// `reserved_on` cannot name.
    pub reserved_round: u16,
    /// Brings the size to a multiple of the alignment (8), so that `repr(C)` adds no padding.
    pub pad: [u8; 4],
}

// SAFETY: see `account_data!`; the size is pinned here.
crate::state::account_data!(Bid, BidData);
const _: () =
    assert!(core::mem::size_of::<BidData>() == 7 * 32 + 9 * 8 + 4 * 4 + 2 * 2 + 6 + 2 + 4);

/// Most machines one gang bid runs on at once: what `allocate_gang` fits in one transaction with
/// a machine and a lease account for each part.
#[constant]
pub const MAX_GANG_PARTS: u8 = 8;

/// What a gang's settled parts decided for the gang ([`BidData::gang_flags`]).
pub struct GangFlags;

impl GangFlags {
    /// A part's host went silent and the part was reclaimed for failover: once every part has
    /// settled, the gang goes back to the queue at its rank.
    pub const FAILOVER: u8 = 1;
    /// The client asked for its escrow back when it reclaimed a part: no failover.
    pub const REFUND: u8 = 2;
}

impl Bid {
    /// An open queue bid of `data` asking `terms` of each of its GPUs, with no image reference,
    /// port, region or auto power: what a model of the market (the packing replay, the policy's
    /// tests) stands a workload's job for.
    pub fn queue(data: BidData, terms: OverclockTerms) -> Bid {
        Bid {
            data,
            kind: BidKind::Queue,
            status: BidStatus::Open,
            image_ref: String::new(),
            overclock: vec![terms],
            ports: Vec::new(),
            regions: Vec::new(),
            auto_power: None,
        }
    }

    /// Account size with `terms` overclock entries, an image reference of `image_len` bytes,
    /// `ports` published ports and `regions` regions. More than `MAX_GPUS` entries, a longer
    /// reference than [`IMAGE_REF_LEN`], more than [`MAX_PORTS`] ports or [`MAX_REGIONS`]
    /// regions get the largest account (placement then refuses them with `BadOverclockCount`,
    /// `ImageRefTooLong`, `BadPorts` or `BadRegions`, never a panic).
    pub const fn space(terms: usize, image_len: usize, ports: usize, regions: usize) -> usize {
        let unused = MAX_GPUS.saturating_sub(terms);
        let unused_image = IMAGE_REF_LEN.saturating_sub(image_len);
        let unused_ports = MAX_PORTS.saturating_sub(ports);
        let unused_regions = MAX_REGIONS.saturating_sub(regions);
        8 + Self::INIT_SPACE
            - unused * OverclockTerms::INIT_SPACE
            - unused_image
            - unused_ports * core::mem::size_of::<u16>()
            - unused_regions * REGION_LEN
    }

    /// The overclock terms of the bid's GPU `i`.
    pub fn terms_of(&self, i: usize) -> OverclockTerms {
        self.overclock[if self.overclock.len() == 1 { 0 } else { i }]
    }

    /// The agreed power limit of each of the bid's GPUs, in its GPU order.
    pub fn power_limits(&self) -> Vec<u16> {
        (0..self.gpu_count as usize)
            .map(|i| self.terms_of(i).power_limit_w)
            .collect()
    }

    /// Machines the bid runs on at once (1 unless it is a gang bid).
    pub fn parts(&self) -> u8 {
        self.parts.max(1)
    }

    /// Whether the bid is a gang's: several machines at once, all or none (`allocate_gang`).
    pub fn is_gang(&self) -> bool {
        self.parts > 1
    }

    /// GPUs of all its parts: what its escrow, its waiting and its client's cap count.
    pub fn total_gpus(&self) -> u64 {
        self.gpu_count as u64 * self.parts() as u64
    }

    /// Whether one of the gang's parts has settled while others run: the gang no longer runs
    /// as a whole, and anyone may stop its other parts.
    pub fn gang_broken(&self) -> bool {
        self.is_gang() && self.status == BidStatus::Running && self.parts_running < self.parts
    }

    /// The latest time the bid may start: its deadline less the shortest run its client
    /// accepts. A lease that starts then runs at least that long.
    pub fn latest_start(&self) -> i64 {
        gpu_market_core::lease::latest_start(self.deadline, self.min_duration_secs)
    }

    /// Whether the bid's latest start has passed at `now`: it can no longer start, and anyone
    /// may prune it.
    pub fn expired(&self, now: i64) -> bool {
        now > self.latest_start()
    }

    /// The latest its lease would end if it started at `now` (a run is never longer than its
    /// duration): what a machine's [`crate::state::Reservation`] asks of it.
    pub fn runs_until(&self, now: i64) -> i64 {
        now.saturating_add(self.max_duration_secs as i64)
    }

    /// Whether anyone may remove the waiting bid at `now` (`prune_bid`): its latest start has
    /// passed, or it is a spot bid whose machine (of status `machine`) has retired, so that a
    /// retired machine's book empties and the machine can always be closed.
    pub fn prunable(&self, now: i64, machine: Option<MachineStatus>) -> bool {
        self.expired(now) || (self.kind == BidKind::Spot && machine == Some(MachineStatus::Retired))
    }

    pub fn unit(&self) -> PriceUnit {
        self.kind.unit()
    }

    /// The terms of each of the bid's GPUs, in its GPU order.
    pub fn overclock_per_gpu(&self) -> Vec<overclock::OverclockTerms> {
        (0..self.gpu_count as usize)
            .map(|i| self.terms_of(i).to_core())
            .collect()
    }

    /// What the fit rule needs of the bid; `overclock` is [`Bid::overclock_per_gpu`].
    pub fn need<'a>(&'a self, overclock: &'a [overclock::OverclockTerms]) -> Need<'a> {
        Need {
            gpu_count: self.gpu_count,
            gib_per_gpu: self.gib_per_gpu,
            accepted_classes: self.accepted_classes,
            price: self.price,
            latest_start: self.latest_start(),
            terms: Terms::of(overclock),
            room: self.room(),
            regions: Regions::of(&self.regions),
        }
    }

    /// The ports, scratch, CPU and memory the bid's lease holds besides GPUs.
    pub fn room(&self) -> Room {
        Room {
            ports: self.ports.len() as u8,
            scratch_gib: self.scratch_gib,
            host: self.host(),
        }
    }

    /// The CPU and memory the bid's lease holds on its machine.
    pub fn host(&self) -> Host {
        Host {
            cpu_milli: self.cpu_milli,
            memory_mib: self.memory_mib,
        }
    }

    /// The GPUs the bid gets on the machine behind `offer`, or why it does not fit there.
    pub fn fit(&self, offer: &Offer) -> core::result::Result<Choice, Unfit> {
        let overclock = self.overclock_per_gpu();
        offer.fit(&self.need(&overclock))
    }

    /// What its book entry carries, so `allocate` can decide fit without the account;
    /// `regions` is its market's [`crate::state::Market::region_filter`] of the bid's labels.
    /// A bid holds at most two distinct term sets (`place_bid` refuses more).
    pub fn summary(&self, regions: u32) -> BidSummary {
        let (first, second, second_count) = match Terms::summarise(&self.overclock_per_gpu()) {
            Some(Terms::Split {
                first,
                second,
                second_count,
            }) => (first, second, second_count),
            Some(Terms::Uniform(t)) => (t, t, 0),
            _ => Default::default(),
        };
        let (terms_first, terms_second) = (
            OverclockTerms::from_core(&first),
            OverclockTerms::from_core(&second),
        );
        BidSummary {
            client: self.client,
            price: self.price,
            latest_start: self.latest_start(),
            terms_first,
            terms_second,
            gib_per_gpu: self.gib_per_gpu,
            gpu_count: self.gpu_count,
            accepted_classes: self.accepted_classes,
            second_count,
            ports: self.ports.len() as u8,
            scratch_gib: self.scratch_gib.to_le_bytes(),
            cpu_milli: self.cpu_milli.to_le_bytes(),
            memory_mib: self.memory_mib.to_le_bytes(),
            regions: regions.to_le_bytes(),
            max_duration_secs: self.max_duration_secs.to_le_bytes(),
            parts: self.parts(),
            pad: [0; 3],
        }
    }

    /// What waiting has cost this bid by `now`: its price for the seconds its `book` was full
    /// while it waited, within its escrow (`settlement::holding_charge`). Taken from the escrow
    /// when it leaves the book, run or not, and burnt.
    pub fn holding_charge(&self, book: &BidBook, now: i64) -> u64 {
        self.holding_charge_at(book.full_secs(now))
    }

    /// [`Bid::holding_charge`] when its book's [`BidBook::full_secs`] reads `book_full_secs`.
    pub fn holding_charge_at(&self, book_full_secs: u64) -> u64 {
        settlement::holding_charge(
            self.price,
            self.kind.unit(),
            self.total_gpus(),
            book_full_secs.saturating_sub(self.full_secs_at_entry),
            self.escrow,
        )
    }

    /// The book key of a spot bid on `machine`: the host's profit per day (GigaSPOT).
    pub fn spot_profit(&self, machine: &Machine) -> Result<u64> {
        let watts: u64 = self.power_limits().iter().map(|&w| w as u64).sum();
        lease::spot_profit_per_day(
            self.price,
            self.gpu_count as u64,
            watts,
            machine.electricity_cost_per_kwh,
        )
        .map_err(|e| error!(MarketError::from(e)))
    }
}

impl BidKind {
    pub fn unit(self) -> PriceUnit {
        match self {
            BidKind::Queue => PriceUnit::PerGpuHour,
            BidKind::Spot => PriceUnit::PerGpuDay,
        }
    }
}
