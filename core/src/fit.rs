//! The one fit rule: which of a machine's GPUs a bid can use now, or the first reason why not.
//!
//! The program runs it on every book entry ranked above the bid an agent allocates (so it must be
//! cheap and never allocate), on the chosen bid itself, and on the GPUs the agent names; the agent
//! runs it to choose GPUs; the client's `bid explain` turns its [`Unfit`] into a sentence. Each of
//! them builds an [`Offer`] from the accounts it read, so no copy of the rule lives anywhere else.
//!
//! The checks go from the most basic up, each narrowing a bit mask of the machine's GPUs:
//! accepted class, memory per GPU, overclock ranges, price (host floor, then reserve price), then
//! what running leases leave free (GiB, and a shared GPU's terms). The first stage that leaves too
//! few GPUs is the reason.
//!
//! A book entry knows a bid's per-GPU overclock terms only as their range ([`Terms::Range`]): when
//! every GPU of a machine accepts the whole range the bid fits, when too few accept any part of it
//! the bid does not, and in between the answer is [`Unfit::Undecided`] and the caller must read the
//! bid account. That takes per-GPU terms that differ *and* GPUs whose limits differ, so it is rare.

use crate::matching::{self, AssignError, MAX};
use crate::overclock::{GpuLimits, OverclockTerms};

/// GPU classes a market prices (bit `c` of a bid's `accepted_classes`).
pub const GPU_CLASSES: usize = 8;
/// Bytes of a region label (e.g. `eu-central`, zero-padded).
pub const REGION_LEN: usize = 16;

/// A machine's region label, zero-padded.
pub type Region = [u8; REGION_LEN];

/// The regions a bid accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Regions<'a> {
    /// Any region: the bid names none.
    Any,
    /// Only these.
    Listed(&'a [Region]),
    /// What a book entry keeps of a list ([`Regions::filter`]): a machine whose region's bit
    /// ([`region_bit`]) is clear is not accepted; one whose bit is set may be, and only the
    /// bid account tells.
    Filter(u32),
}

impl<'a> Regions<'a> {
    /// `Any` for no region, else `Listed`.
    pub fn of(regions: &'a [Region]) -> Regions<'a> {
        if regions.is_empty() {
            Regions::Any
        } else {
            Regions::Listed(regions)
        }
    }

    /// The bits of `regions` (0 for none): what a book entry stores.
    pub fn filter(regions: &[Region]) -> u32 {
        regions.iter().fold(0, |f, r| f | region_bit(r))
    }

    /// What a book entry's `filter` says.
    pub fn from_filter(filter: u32) -> Regions<'static> {
        if filter == 0 {
            Regions::Any
        } else {
            Regions::Filter(filter)
        }
    }

    /// Whether a machine in `region` (its bit `bit`) is accepted: `Some(false)` when it is not,
    /// `None` when only the bid account can tell.
    fn accepts(self, region: &Region, bit: u32) -> Option<bool> {
        match self {
            Regions::Any => Some(true),
            Regions::Listed(list) => Some(list.contains(region)),
            Regions::Filter(f) if f & bit == 0 => Some(false),
            Regions::Filter(_) => None,
        }
    }
}

/// One bit of 32 for a region label: FNV-1a of its bytes, modulo 32.
fn region_bit(region: &Region) -> u32 {
    let hash = region.iter().fold(0x811c_9dc5u32, |h, &b| {
        (h ^ b as u32).wrapping_mul(0x0100_0193)
    });
    1 << (hash % 32)
}

/// One of the machine's GPUs, as the fit rule sees it now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuOffer {
    /// Index into the market's class table.
    pub class: u8,
    /// GPUs in one NVLink island or under one PCIe switch share a group.
    pub topology_group: u8,
    pub memory_gib: u16,
    /// GiB no running lease holds.
    pub free_gib: u16,
    pub limits: GpuLimits,
    /// The terms the GPU runs for the leases that hold some of it; `None` while none does.
    pub running: Option<OverclockTerms>,
}

/// CPU and memory of a machine's host, in the units a container's limits take (as Kubernetes
/// counts them): what a lease reserves, what a machine gives leases in all, or what running
/// leases hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Host {
    /// Thousandths of a CPU core.
    pub cpu_milli: u32,
    /// MiB of memory.
    pub memory_mib: u32,
}

impl Host {
    /// Whether `self` (what is there) covers `asked`.
    pub fn holds(self, asked: Host) -> bool {
        asked.cpu_milli <= self.cpu_milli && asked.memory_mib <= self.memory_mib
    }

    /// What is left of `self` once `held` is taken (never below nothing).
    pub fn less(self, held: Host) -> Host {
        Host {
            cpu_milli: self.cpu_milli.saturating_sub(held.cpu_milli),
            memory_mib: self.memory_mib.saturating_sub(held.memory_mib),
        }
    }

    /// `self` and `other` together; `None` on overflow.
    pub fn checked_add(self, other: Host) -> Option<Host> {
        Some(Host {
            cpu_milli: self.cpu_milli.checked_add(other.cpu_milli)?,
            memory_mib: self.memory_mib.checked_add(other.memory_mib)?,
        })
    }

    /// `self` without `other`; `None` when `other` is more.
    pub fn checked_sub(self, other: Host) -> Option<Host> {
        Some(Host {
            cpu_milli: self.cpu_milli.checked_sub(other.cpu_milli)?,
            memory_mib: self.memory_mib.checked_sub(other.memory_mib)?,
        })
    }
}

/// What a lease holds besides GPUs: published ports, scratch space, CPU and memory. A bid asks
/// for it; a machine declares the most ports and scratch it gives one lease and the CPU and
/// memory it gives all its leases together.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Room {
    /// Container ports published on the machine's address.
    pub ports: u8,
    /// GiB of scratch volume at the container's `/workspace`.
    pub scratch_gib: u16,
    /// CPU and memory reserved for the lease (0: none reserved, no limit set).
    pub host: Host,
}

impl Room {
    /// Whether a machine declaring `self` has room for a lease asking `asked`.
    pub fn holds(self, asked: Room) -> bool {
        asked.ports <= self.ports
            && asked.scratch_gib <= self.scratch_gib
            && self.host.holds(asked.host)
    }
}

/// A machine's GPUs and prices at one moment, with the masks every check reuses.
#[derive(Clone, Debug)]
pub struct Offer {
    gpus: Vec<GpuOffer>,
    /// Whether the machine takes work at all (active, not paused or retired).
    active: bool,
    /// The machine's region label and its [`region_bit`].
    region: Region,
    region_bit: u32,
    /// The most ports and scratch it gives one lease, and the CPU and memory of all its leases.
    room: Room,
    /// CPU and memory no running lease holds.
    free: Host,
    now: i64,
    /// The least price per unit the host takes (queue: per GPU-hour; spot: per GPU-day).
    floor: u64,
    /// The market's reserve price per class (0 where none applies, e.g. spot bids).
    reserve: [u64; GPU_CLASSES],
    /// Bit `g` of `class_gpus[c]`: GPU `g` is of class `c`.
    class_gpus: [u16; GPU_CLASSES],
    /// Classes present on the machine.
    classes: u8,
    /// Each distinct limits declaration with the GPUs that declare it (usually one).
    limits: Vec<(GpuLimits, u16)>,
    /// GPUs some lease holds (their terms are fixed while it runs).
    shared: u16,
    /// Cheap bounds for [`Offer::fits`]: GPUs with any free GiB, the most free GiB on one GPU,
    /// the least price any class takes, and the union of every GPU's limits.
    free_gpus: u32,
    /// Free GiB of each GPU, most first.
    free_desc: [u16; MAX],
    min_price: u64,
    hull: GpuLimits,
    /// Per GPU, for [`Offer::fits`]'s tight loop: its class, free GiB, index into `limits`,
    /// and 0 while unshared or 1 + index into `running` of the terms it runs.
    class_of: [u8; MAX],
    free_of: [u16; MAX],
    limits_of: [u8; MAX],
    running_of: [u8; MAX],
    /// The distinct terms shared GPUs run.
    running: Vec<OverclockTerms>,
    /// The least price each class takes: the floor, or its reserve price when higher.
    class_price: [u64; GPU_CLASSES],
    /// Topology groups that occur, as GPU masks.
    groups: Vec<u16>,
}

/// What a bid asks, as far as fitting goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Need<'a> {
    pub gpu_count: u8,
    pub gib_per_gpu: u16,
    pub accepted_classes: u8,
    pub price: u64,
    /// The bid cannot start at or after this time.
    pub deadline: i64,
    pub terms: Terms<'a>,
    /// Ports and scratch the lease holds besides its GPUs.
    pub room: Room,
    /// The regions whose machines it accepts.
    pub regions: Regions<'a>,
}

/// A bid's overclock terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Terms<'a> {
    /// The same terms on each of the bid's GPUs.
    Uniform(OverclockTerms),
    /// One entry per GPU of the bid, in its GPU order.
    PerGpu(&'a [OverclockTerms]),
    /// Only the range of differing per-GPU terms is known (see [`Terms::range_of`]).
    Range {
        lo: OverclockTerms,
        hi: OverclockTerms,
    },
}

/// Why a bid cannot run on a machine now; the first stage that fails, most basic first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unfit {
    /// The machine is paused or retired.
    MachineInactive,
    /// The bid's deadline has passed.
    Expired,
    /// The machine is in a region the bid does not accept.
    RegionNotAccepted,
    /// The machine publishes fewer ports, gives less scratch per lease, or gives its leases
    /// fewer CPU cores or less memory than the bid asks.
    NoRoom,
    /// Fewer GPUs of an accepted class than the bid asks for.
    NoAcceptedClass,
    /// Too few of them have the memory per GPU the bid asks for.
    TooLittleMemory,
    /// Too few of them allow the bid's overclock terms.
    OverclockOutOfRange,
    /// The price is below the host's floor on too many of them.
    PriceBelowFloor,
    /// The price is below the market's reserve price for their classes.
    PriceBelowReserve,
    /// Running leases hold too much of them (GiB, or other overclock terms on a shared GPU),
    /// or of the machine's CPU or memory.
    Busy,
    /// A book entry whose differing per-GPU terms, or whose regions, only the bid account can
    /// decide.
    Undecided,
}

impl Unfit {
    /// One sentence for people (the CLI's `bid explain`).
    pub fn describe(self) -> &'static str {
        match self {
            Unfit::MachineInactive => "machine paused or retired",
            Unfit::Expired => "the bid's deadline has passed",
            Unfit::RegionNotAccepted => "the machine's region is not one the bid accepts",
            Unfit::NoRoom => {
                "the machine gives fewer ports, less scratch, fewer CPU cores or less memory"
            }
            Unfit::NoAcceptedClass => "too few GPUs of an accepted class",
            Unfit::TooLittleMemory => "too little memory per GPU",
            Unfit::OverclockOutOfRange => "overclock terms outside the GPUs' ranges",
            Unfit::PriceBelowFloor => "price below the host's floor",
            Unfit::PriceBelowReserve => "price below the market's reserve price",
            Unfit::Busy => "GPUs, CPU or memory busy with running leases",
            Unfit::Undecided => "per-GPU overclock terms or regions the book entry cannot decide",
        }
    }
}

/// The machine GPUs a bid gets: `gpus()[i]` serves the bid's GPU `i`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Choice {
    gpus: [u8; MAX],
    len: u8,
}

impl Choice {
    pub fn gpus(&self) -> &[u8] {
        &self.gpus[..self.len as usize]
    }

    /// The chosen GPUs as a mask.
    pub fn mask(&self) -> u16 {
        self.gpus().iter().fold(0, |m, &g| m | 1 << g)
    }
}

/// [`Offer::fits`]'s answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fits {
    Yes,
    No,
    /// Only the bid account can tell (see [`Unfit::Undecided`]).
    Undecided,
}

/// What the checks leave for choosing: one mask for every GPU of the bid, or one per GPU.
enum Free {
    Uniform(u16),
    Exact([u16; MAX]),
}

/// Why GPUs an agent named for a bid are refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChoiceError {
    /// The bid does not fit the machine at all.
    Unfit(Unfit),
    /// Not one machine GPU per bid GPU, an unknown or repeated GPU, or one that cannot serve.
    Assign(AssignError),
    /// The GPUs span topology groups although one group could serve the bid.
    TopologySplit,
}

#[inline(always)]
fn count(mask: u16) -> u32 {
    mask.count_ones()
}

/// `Some(v)` is inside `r`; `None` (no lock or offset asked) always is.
fn opt_in<T: PartialOrd + Copy>(v: Option<T>, r: crate::overclock::Range<T>) -> bool {
    v.is_none_or(|v| r.contains(v))
}

/// Some value of `lo..=hi` (ordered with `None` lowest, meaning "not asked") is allowed by `r`.
fn opt_overlaps<T: PartialOrd + Copy>(
    lo: Option<T>,
    hi: Option<T>,
    r: crate::overclock::Range<T>,
) -> bool {
    match (lo, hi) {
        (None, _) => true,
        (Some(lo), Some(hi)) => lo <= r.max && r.min <= hi,
        (Some(_), None) => false,
    }
}

/// `v` lies in `lo..=hi`, with `None` lowest.
fn opt_between<T: PartialOrd + Copy>(v: Option<T>, lo: Option<T>, hi: Option<T>) -> bool {
    lo <= v && v <= hi
}

impl Terms<'_> {
    /// The range of `terms` field by field (`None`, "not asked", below every value): what a
    /// book entry stores for per-GPU terms that differ.
    pub fn range_of(terms: &[OverclockTerms]) -> (OverclockTerms, OverclockTerms) {
        let first = terms.first().copied().unwrap_or_default();
        terms.iter().fold((first, first), |(lo, hi), t| {
            (
                OverclockTerms {
                    power_limit_w: lo.power_limit_w.min(t.power_limit_w),
                    core_lock_mhz: lo.core_lock_mhz.min(t.core_lock_mhz),
                    mem_lock_mhz: lo.mem_lock_mhz.min(t.mem_lock_mhz),
                    core_offset_mhz: lo.core_offset_mhz.min(t.core_offset_mhz),
                    mem_offset_mhz: lo.mem_offset_mhz.min(t.mem_offset_mhz),
                },
                OverclockTerms {
                    power_limit_w: hi.power_limit_w.max(t.power_limit_w),
                    core_lock_mhz: hi.core_lock_mhz.max(t.core_lock_mhz),
                    mem_lock_mhz: hi.mem_lock_mhz.max(t.mem_lock_mhz),
                    core_offset_mhz: hi.core_offset_mhz.max(t.core_offset_mhz),
                    mem_offset_mhz: hi.mem_offset_mhz.max(t.mem_offset_mhz),
                },
            )
        })
    }

    /// `Uniform` when every entry is the same, else `PerGpu`.
    pub fn of(terms: &[OverclockTerms]) -> Terms<'_> {
        match terms {
            [first, rest @ ..] if rest.iter().all(|t| t == first) => Terms::Uniform(*first),
            _ => Terms::PerGpu(terms),
        }
    }
}

/// Every GPU allowed by `limits` accepts every value of `lo..=hi`.
fn range_within(limits: &GpuLimits, lo: &OverclockTerms, hi: &OverclockTerms) -> bool {
    // A field asked on some GPUs and not on others has an unknown least asked value.
    fn known<T>(lo: Option<T>, hi: Option<T>) -> bool {
        lo.is_some() || hi.is_none()
    }
    limits.check(lo).is_ok()
        && limits.check(hi).is_ok()
        && known(lo.core_lock_mhz, hi.core_lock_mhz)
        && known(lo.mem_lock_mhz, hi.mem_lock_mhz)
        && known(lo.core_offset_mhz, hi.core_offset_mhz)
        && known(lo.mem_offset_mhz, hi.mem_offset_mhz)
}

/// Some value of `lo..=hi` could be allowed by `limits`, field by field (necessary, not
/// sufficient, for one of the bid's GPUs to fit).
fn range_overlaps(limits: &GpuLimits, lo: &OverclockTerms, hi: &OverclockTerms) -> bool {
    lo.power_limit_w <= limits.power_w.max
        && limits.power_w.min <= hi.power_limit_w
        && opt_overlaps(lo.core_lock_mhz, hi.core_lock_mhz, limits.core_lock_mhz)
        && opt_overlaps(lo.mem_lock_mhz, hi.mem_lock_mhz, limits.mem_lock_mhz)
        && opt_overlaps(
            lo.core_offset_mhz,
            hi.core_offset_mhz,
            limits.core_offset_mhz,
        )
        && opt_overlaps(lo.mem_offset_mhz, hi.mem_offset_mhz, limits.mem_offset_mhz)
}

fn settings_between(s: &OverclockTerms, lo: &OverclockTerms, hi: &OverclockTerms) -> bool {
    lo.power_limit_w <= s.power_limit_w
        && s.power_limit_w <= hi.power_limit_w
        && opt_between(s.core_lock_mhz, lo.core_lock_mhz, hi.core_lock_mhz)
        && opt_between(s.mem_lock_mhz, lo.mem_lock_mhz, hi.mem_lock_mhz)
        && opt_between(s.core_offset_mhz, lo.core_offset_mhz, hi.core_offset_mhz)
        && opt_between(s.mem_offset_mhz, lo.mem_offset_mhz, hi.mem_offset_mhz)
}

/// Whether `s` fits `limits`, with `None` lowest for the optional fields.
fn settings_allowed(limits: &GpuLimits, s: &OverclockTerms) -> bool {
    limits.power_w.contains(s.power_limit_w)
        && opt_in(s.core_lock_mhz, limits.core_lock_mhz)
        && opt_in(s.mem_lock_mhz, limits.mem_lock_mhz)
        && opt_in(s.core_offset_mhz, limits.core_offset_mhz)
        && opt_in(s.mem_offset_mhz, limits.mem_offset_mhz)
}

impl Offer {
    /// The offer of a machine whose GPUs are `gpus` (at most 16), at `now`, giving each lease
    /// at most `room`'s ports and scratch, and its leases `room`'s CPU and memory, of which
    /// `free` is not held.
    pub fn new(
        gpus: Vec<GpuOffer>,
        active: bool,
        room: Room,
        free: Host,
        now: i64,
        floor: u64,
        reserve: [u64; GPU_CLASSES],
    ) -> Self {
        let mut class_gpus = [0u16; GPU_CLASSES];
        let mut limits: Vec<(GpuLimits, u16)> = Vec::new();
        let mut groups: Vec<(u8, u16)> = Vec::new();
        let mut shared = 0u16;
        for (g, gpu) in gpus.iter().enumerate().take(MAX) {
            let bit = 1u16 << g;
            if let Some(m) = class_gpus.get_mut(gpu.class as usize) {
                *m |= bit;
            }
            match limits.iter_mut().find(|(l, _)| *l == gpu.limits) {
                Some((_, m)) => *m |= bit,
                None => limits.push((gpu.limits, bit)),
            }
            match groups.iter_mut().find(|(t, _)| *t == gpu.topology_group) {
                Some((_, m)) => *m |= bit,
                None => groups.push((gpu.topology_group, bit)),
            }
            if gpu.running.is_some() {
                shared |= bit;
            }
        }
        let classes = class_gpus
            .iter()
            .enumerate()
            .fold(0u8, |c, (i, &m)| if m != 0 { c | 1 << i } else { c });
        let mut class_of = [0u8; MAX];
        let mut free_of = [0u16; MAX];
        let mut limits_of = [0u8; MAX];
        let mut running_of = [0u8; MAX];
        let mut running: Vec<OverclockTerms> = Vec::new();
        for (g, gpu) in gpus.iter().enumerate().take(MAX) {
            class_of[g] = gpu.class;
            free_of[g] = gpu.free_gib;
            limits_of[g] = limits
                .iter()
                .position(|(l, _)| *l == gpu.limits)
                .unwrap_or(0) as u8;
            if let Some(r) = gpu.running {
                let i = match running.iter().position(|x| *x == r) {
                    Some(i) => i,
                    None => {
                        running.push(r);
                        running.len() - 1
                    }
                };
                running_of[g] = i as u8 + 1;
            }
        }
        let mut class_price = [u64::MAX; GPU_CLASSES];
        for (c, p) in class_price.iter_mut().enumerate() {
            *p = floor.max(reserve[c]);
        }
        let present = gpus.iter().take(MAX);
        let free_gpus = present.clone().filter(|g| g.free_gib > 0).count() as u32;
        let mut free_desc = [0u16; MAX];
        for (slot, g) in free_desc.iter_mut().zip(present.clone()) {
            *slot = g.free_gib;
        }
        insertion_sort_by_key(&mut free_desc, |&f| core::cmp::Reverse(f));
        let min_reserve = present
            .clone()
            .filter_map(|g| reserve.get(g.class as usize))
            .min()
            .copied()
            .unwrap_or(0);
        let hull = limits
            .iter()
            .map(|(l, _)| *l)
            .reduce(|a, b| GpuLimits {
                power_w: hull_of(a.power_w, b.power_w),
                core_lock_mhz: hull_of(a.core_lock_mhz, b.core_lock_mhz),
                mem_lock_mhz: hull_of(a.mem_lock_mhz, b.mem_lock_mhz),
                core_offset_mhz: hull_of(a.core_offset_mhz, b.core_offset_mhz),
                mem_offset_mhz: hull_of(a.mem_offset_mhz, b.mem_offset_mhz),
            })
            .unwrap_or(EMPTY_LIMITS);
        Offer {
            gpus,
            active,
            region: [0; REGION_LEN],
            region_bit: region_bit(&[0; REGION_LEN]),
            room,
            free,
            now,
            floor,
            reserve,
            class_gpus,
            classes,
            limits,
            shared,
            free_gpus,
            free_desc,
            min_price: floor.max(min_reserve),
            hull,
            class_of,
            free_of,
            limits_of,
            running_of,
            running,
            class_price,
            groups: groups.into_iter().map(|(_, m)| m).collect(),
        }
    }

    /// The offer of a machine in `region` (a machine without one is in the empty label's).
    pub fn in_region(mut self, region: Region) -> Self {
        self.region = region;
        self.region_bit = region_bit(&region);
        self
    }

    pub fn gpus(&self) -> &[GpuOffer] {
        &self.gpus
    }

    /// The most ports and scratch it gives one lease, and the CPU and memory of all its leases.
    pub fn room(&self) -> Room {
        self.room
    }

    /// CPU and memory no running lease holds.
    pub fn host_free(&self) -> Host {
        self.free
    }

    pub fn now(&self) -> i64 {
        self.now
    }

    /// GPUs of the accepted classes.
    fn class_mask(&self, accepted: u8) -> u16 {
        let mut m = 0;
        let mut classes = accepted & self.classes;
        while classes != 0 {
            let c = classes.trailing_zeros() as usize;
            m |= self.class_gpus[c];
            classes &= classes - 1;
        }
        m
    }

    /// GPUs among `among` whose memory (or free GiB, `free`) is at least `gib`.
    fn gib_mask(&self, among: u16, gib: u16, free: bool) -> u16 {
        let mut out = 0;
        let mut rest = among;
        while rest != 0 {
            let g = rest.trailing_zeros() as usize;
            let gpu = &self.gpus[g];
            if (if free { gpu.free_gib } else { gpu.memory_gib }) >= gib {
                out |= 1 << g;
            }
            rest &= rest - 1;
        }
        out
    }

    /// GPUs among `among` of a class whose price `floor_only` (or also the reserve) `price` meets.
    fn price_mask(&self, among: u16, price: u64, with_reserve: bool) -> u16 {
        if price < self.floor {
            return 0;
        }
        if !with_reserve {
            return among;
        }
        let mut m = 0;
        for (c, &cm) in self.class_gpus.iter().enumerate() {
            if cm & among != 0 && price >= self.reserve[c] {
                m |= cm;
            }
        }
        m & among
    }

    /// GPUs whose declared limits pass `ok`.
    fn limits_mask(&self, ok: impl Fn(&GpuLimits) -> bool) -> u16 {
        self.limits
            .iter()
            .filter(|(l, _)| ok(l))
            .fold(0, |m, (_, g)| m | g)
    }

    /// Shared GPUs among `among` whose running terms pass `ok`.
    fn running_mask(&self, among: u16, ok: impl Fn(&OverclockTerms) -> bool) -> u16 {
        let mut out = 0;
        let mut rest = among & self.shared;
        while rest != 0 {
            let g = rest.trailing_zeros() as usize;
            if self.gpus[g].running.as_ref().is_some_and(&ok) {
                out |= 1 << g;
            }
            rest &= rest - 1;
        }
        out
    }

    /// The machine GPUs that can serve `need` once every check has passed, or the first check
    /// that fails.
    fn free(&self, need: &Need) -> Result<Free, Unfit> {
        if !self.active {
            return Err(Unfit::MachineInactive);
        }
        if self.now >= need.deadline {
            return Err(Unfit::Expired);
        }
        match need.regions.accepts(&self.region, self.region_bit) {
            Some(true) => self.free_here(need),
            Some(false) => Err(Unfit::RegionNotAccepted),
            // Every later stage may still say no; only a yes waits for the bid account.
            None => self.free_here(need).and(Err(Unfit::Undecided)),
        }
    }

    /// [`Offer::free`] once the machine's region is accepted.
    fn free_here(&self, need: &Need) -> Result<Free, Unfit> {
        let n = need.gpu_count as u32;
        if !self.room.holds(need.room) {
            return Err(Unfit::NoRoom);
        }
        let enough = |m: u16, e: Unfit| if count(m) >= n { Ok(m) } else { Err(e) };
        let by_class = enough(
            self.class_mask(need.accepted_classes),
            Unfit::NoAcceptedClass,
        )?;
        let by_memory = enough(
            self.gib_mask(by_class, need.gib_per_gpu, false),
            Unfit::TooLittleMemory,
        )?;
        // Per bid GPU masks for the exact cases; one mask serves every GPU of a uniform bid.
        let allowed = match need.terms {
            Terms::Uniform(s) => self.limits_mask(|l| settings_allowed(l, &s)),
            Terms::PerGpu(terms) => {
                if terms.len() != need.gpu_count as usize || terms.len() > MAX {
                    return Err(Unfit::OverclockOutOfRange);
                }
                let mut compat = [0u16; MAX];
                for (c, s) in compat.iter_mut().zip(terms) {
                    *c = by_memory & self.limits_mask(|l| settings_allowed(l, s));
                }
                if matching::assign(&compat[..terms.len()]).is_none() {
                    return Err(Unfit::OverclockOutOfRange);
                }
                compat.iter().fold(0, |m, c| m | c)
            }
            Terms::Range { lo, hi } => self.limits_mask(|l| range_overlaps(l, &lo, &hi)),
        };
        let by_terms = enough(by_memory & allowed, Unfit::OverclockOutOfRange)?;
        enough(
            self.price_mask(by_terms, need.price, false),
            Unfit::PriceBelowFloor,
        )?;
        let by_price = enough(
            self.price_mask(by_terms, need.price, true),
            Unfit::PriceBelowReserve,
        )?;
        if !self.free.holds(need.room.host) {
            return Err(Unfit::Busy);
        }
        let roomy = self.gib_mask(by_price, need.gib_per_gpu, true);
        let unshared = roomy & !self.shared;
        match need.terms {
            Terms::Uniform(s) => {
                let free = unshared | self.running_mask(roomy, |r| *r == s);
                Ok(Free::Uniform(enough(free, Unfit::Busy)?))
            }
            Terms::PerGpu(terms) => {
                let mut compat = [0u16; MAX];
                for (i, s) in terms.iter().enumerate() {
                    let fits = self.limits_mask(|l| settings_allowed(l, s));
                    compat[i] = (unshared | self.running_mask(roomy, |r| r == s)) & fits;
                }
                match matching::assign(&compat[..terms.len()]) {
                    Some(_) => Ok(Free::Exact(compat)),
                    None => Err(Unfit::Busy),
                }
            }
            Terms::Range { lo, hi } => {
                let all = unshared & self.limits_mask(|l| range_within(l, &lo, &hi));
                if count(all) >= n {
                    return Ok(Free::Uniform(all));
                }
                let any = (unshared & by_terms)
                    | self.running_mask(roomy, |r| settings_between(r, &lo, &hi));
                enough(any, Unfit::Busy)?;
                Err(Unfit::Undecided)
            }
        }
    }

    /// Bounds over the whole machine that rule a bid out without looking at its overclock
    /// terms: a few comparisons, so a caller holding a bid's numbers (a book entry) can skip
    /// the rest. `false` does not mean the bid fits.
    pub fn rules_out(
        &self,
        gpu_count: u8,
        gib_per_gpu: u16,
        accepted_classes: u8,
        price: u64,
        deadline: i64,
        room: Room,
    ) -> bool {
        let n = gpu_count as usize;
        !self.active
            || self.now >= deadline
            || !self.room.holds(room)
            || !self.free.holds(room.host)
            || n as u32 > self.free_gpus
            || price < self.min_price
            || accepted_classes & self.classes == 0
            // The n-th most free GPU must have the GiB (n ≤ free GPUs ≤ 16 here).
            || (n > 0 && self.free_desc[n - 1] < gib_per_gpu)
    }

    /// Whether `need` can run on this machine now: [`Offer::fit`] without choosing the GPUs
    /// and without the reason, what `allocate` asks of every book entry above the chosen bid.
    /// Bounds that hold for the whole machine turn most bids away in a few steps; the rest take
    /// the full rule. Never allocates.
    pub fn fits(&self, need: &Need) -> Fits {
        let within_hull = match need.terms {
            Terms::Uniform(s) => settings_allowed(&self.hull, &s),
            Terms::PerGpu(t) => t.iter().all(|s| settings_allowed(&self.hull, s)),
            Terms::Range { lo, hi } => range_overlaps(&self.hull, &lo, &hi),
        };
        let hopeless = self.rules_out(
            need.gpu_count,
            need.gib_per_gpu,
            need.accepted_classes,
            need.price,
            need.deadline,
            need.room,
        ) || !within_hull;
        let region = need.regions.accepts(&self.region, self.region_bit);
        if hopeless || region == Some(false) {
            return Fits::No;
        }
        if let Terms::Uniform(s) = need.terms {
            return match (self.fits_uniform(need, &s), region) {
                (Fits::Yes, None) => Fits::Undecided,
                (fits, _) => fits,
            };
        }
        match self.free(need) {
            Ok(_) => Fits::Yes,
            Err(Unfit::Undecided) => Fits::Undecided,
            Err(_) => Fits::No,
        }
    }

    /// [`Offer::fits`] for the same terms on every GPU, the common case, in one tight pass
    /// over the GPUs: the count of GPUs of an accepted class whose price the bid meets, with the
    /// free GiB, whose limits allow the terms and that are unshared or already run them. The
    /// same answer as the staged rule of [`Offer::fit`] (a property test checks it).
    fn fits_uniform(&self, need: &Need, s: &OverclockTerms) -> Fits {
        let mut limits_ok = 0u32;
        for (i, (l, _)) in self.limits.iter().enumerate() {
            if settings_allowed(l, s) {
                limits_ok |= 1 << i;
            }
        }
        if limits_ok == 0 {
            return Fits::No;
        }
        let running = match self.running.iter().position(|r| r == s) {
            Some(i) => i as u8 + 1,
            None => 0,
        };
        let mut classes = 0u8;
        for (c, &p) in self.class_price.iter().enumerate() {
            if need.price >= p {
                classes |= 1 << c;
            }
        }
        classes &= need.accepted_classes;
        let mut count = 0u32;
        for g in 0..self.gpus.len().min(MAX) {
            let r = self.running_of[g];
            if (classes as u32) & 1u32.checked_shl(self.class_of[g] as u32).unwrap_or(0) != 0
                && self.free_of[g] >= need.gib_per_gpu
                && limits_ok & (1 << self.limits_of[g]) != 0
                && (r == 0 || r == running)
            {
                count += 1;
            }
        }
        if count >= need.gpu_count as u32 {
            Fits::Yes
        } else {
            Fits::No
        }
    }

    /// The GPUs `need` gets on this machine now, within one topology group whenever one can
    /// serve it; or the first reason it cannot run here.
    pub fn fit(&self, need: &Need) -> Result<Choice, Unfit> {
        match self.free(need)? {
            Free::Uniform(free) => Ok(self.choose_uniform(free, need.gpu_count)),
            Free::Exact(compat) => self
                .choose_exact(&compat[..need.gpu_count as usize])
                .ok_or(Unfit::Busy),
        }
    }

    /// `n` GPUs of `free` (at least `n`): the group with the fewest such GPUs that still has
    /// `n`, and there the GPUs with the least free GiB (best fit); else the groups with the
    /// most such GPUs first.
    fn choose_uniform(&self, free: u16, n: u8) -> Choice {
        let n = n as usize;
        let tightest = self
            .groups
            .iter()
            .map(|&grp| grp & free)
            .filter(|&m| count(m) as usize >= n)
            .min_by_key(|&m| count(m));
        let mut pool = [0u8; MAX];
        let mut len = 0;
        match tightest {
            Some(m) => len = push_mask(&mut pool, len, m),
            None => {
                let mut by_room = [0u16; MAX];
                let groups = self.groups.len().min(MAX);
                for (slot, &g) in by_room.iter_mut().zip(&self.groups) {
                    *slot = g & free;
                }
                let by_room = &mut by_room[..groups];
                insertion_sort_by_key(by_room, |&m| core::cmp::Reverse(count(m)));
                for &m in by_room.iter() {
                    len = push_mask(&mut pool, len, m);
                }
            }
        }
        let pool = &mut pool[..len];
        if tightest.is_some() {
            insertion_sort_by_key(pool, |&g| (self.gpus[g as usize].free_gib, g));
        }
        let mut gpus = [0u8; MAX];
        gpus[..n].copy_from_slice(&pool[..n]);
        insertion_sort_by_key(&mut gpus[..n], |&g| g);
        Choice { gpus, len: n as u8 }
    }

    /// An assignment for differing per-GPU terms: inside one group when one can take it.
    fn choose_exact(&self, compat: &[u16]) -> Option<Choice> {
        let n = compat.len();
        let mut within = [0u16; MAX];
        for &grp in &self.groups {
            for (w, &c) in within.iter_mut().zip(compat) {
                *w = c & grp;
            }
            if let Some(a) = matching::assign(&within[..n]) {
                return Some(Choice {
                    gpus: a,
                    len: n as u8,
                });
            }
        }
        matching::assign(compat).map(|gpus| Choice { gpus, len: n as u8 })
    }

    /// Checks GPUs an agent chose for `need` (which must fit): one per bid GPU, distinct, each
    /// able to serve its bid GPU, and inside one topology group whenever one could serve it.
    pub fn check_choice(&self, need: &Need, chosen: &[u8]) -> Result<(), ChoiceError> {
        self.free(need).map_err(ChoiceError::Unfit)?;
        let n = need.gpu_count as usize;
        let compat = self.exact_compat(need);
        let compat = &compat[..n];
        if let Some(i) = chosen.iter().position(|&g| g as usize >= self.gpus.len()) {
            return Err(ChoiceError::Assign(AssignError::Unknown(i)));
        }
        matching::check(compat, chosen).map_err(ChoiceError::Assign)?;
        let picked = chosen.iter().fold(0u16, |m, &g| m | 1 << g);
        if !self.groups.iter().any(|&grp| picked & !grp == 0) {
            let uniform = matches!(need.terms, Terms::Uniform(_));
            let one_group_fits = self.groups.iter().any(|&grp| {
                if uniform {
                    // Every bid GPU has the same mask: enough GPUs of it in the group suffice.
                    return count(compat[0] & grp) as usize >= n;
                }
                let mut within = [0u16; MAX];
                for (w, &c) in within.iter_mut().zip(compat) {
                    *w = c & grp;
                }
                matching::assign(&within[..n]).is_some()
            });
            if one_group_fits {
                return Err(ChoiceError::TopologySplit);
            }
        }
        Ok(())
    }

    /// For each of the bid's GPUs, the machine GPUs that can serve it now (exact terms only).
    fn exact_compat(&self, need: &Need) -> [u16; MAX] {
        let mut out = [0u16; MAX];
        let n = (need.gpu_count as usize).min(MAX);
        let base = self.class_mask(need.accepted_classes);
        let base = self.gib_mask(base, need.gib_per_gpu, true);
        let base = self.price_mask(base, need.price, true);
        let unshared = base & !self.shared;
        for (i, slot) in out.iter_mut().enumerate().take(n) {
            let s = match need.terms {
                Terms::Uniform(s) => s,
                Terms::PerGpu(t) => match t.get(i) {
                    Some(s) => *s,
                    None => continue,
                },
                Terms::Range { .. } => continue,
            };
            let fits = self.limits_mask(|l| settings_allowed(l, &s));
            *slot = (unshared | self.running_mask(base, |r| *r == s)) & fits;
        }
        out
    }
}

/// Limits that allow nothing (a machine without GPUs).
const EMPTY_LIMITS: GpuLimits = GpuLimits {
    power_w: crate::overclock::Range { min: 1, max: 0 },
    core_lock_mhz: crate::overclock::Range { min: 1, max: 0 },
    mem_lock_mhz: crate::overclock::Range { min: 1, max: 0 },
    core_offset_mhz: crate::overclock::Range { min: 1, max: 0 },
    mem_offset_mhz: crate::overclock::Range { min: 1, max: 0 },
};

fn hull_of<T: Ord + Copy>(
    a: crate::overclock::Range<T>,
    b: crate::overclock::Range<T>,
) -> crate::overclock::Range<T> {
    crate::overclock::Range {
        min: a.min.min(b.min),
        max: a.max.max(b.max),
    }
}

/// A stable sort for at most 16 items: the SBF target's stack cannot hold the standard
/// library's sort scratch space.
fn insertion_sort_by_key<T: Copy, K: Ord>(items: &mut [T], key: impl Fn(&T) -> K) {
    for i in 1..items.len() {
        let mut j = i;
        while j > 0 && key(&items[j - 1]) > key(&items[j]) {
            items.swap(j - 1, j);
            j -= 1;
        }
    }
}

fn push_mask(pool: &mut [u8; MAX], mut len: usize, mut m: u16) -> usize {
    while m != 0 && len < MAX {
        pool[len] = m.trailing_zeros() as u8;
        len += 1;
        m &= m - 1;
    }
    len
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::overclock::Range;
    use proptest::prelude::*;

    fn limits(power: (u16, u16)) -> GpuLimits {
        GpuLimits {
            power_w: Range {
                min: power.0,
                max: power.1,
            },
            core_lock_mhz: Range {
                min: 200,
                max: 2_000,
            },
            mem_lock_mhz: Range { min: 0, max: 0 },
            core_offset_mhz: Range {
                min: -100,
                max: 100,
            },
            mem_offset_mhz: Range { min: 0, max: 0 },
        }
    }

    fn gpu(class: u8, group: u8) -> GpuOffer {
        GpuOffer {
            class,
            topology_group: group,
            memory_gib: 80,
            free_gib: 80,
            limits: limits((100, 400)),
            running: None,
        }
    }

    fn power(w: u16) -> OverclockTerms {
        OverclockTerms {
            power_limit_w: w,
            ..OverclockTerms::default()
        }
    }

    /// What the test machines give each lease (ports, scratch) and their leases (CPU, memory).
    const ROOM: Room = Room {
        ports: 2,
        scratch_gib: 8,
        host: Host {
            cpu_milli: 16_000,
            memory_mib: 65_536,
        },
    };
    /// What running leases leave of the test machines' CPU and memory.
    const FREE: Host = Host {
        cpu_milli: 8_000,
        memory_mib: 32_768,
    };

    fn need(n: u8, terms: Terms) -> Need {
        Need {
            room: Room {
                ports: 1,
                scratch_gib: 8,
                host: Host {
                    cpu_milli: 4_000,
                    memory_mib: 16_384,
                },
            },
            regions: Regions::Any,
            gpu_count: n,
            gib_per_gpu: 40,
            accepted_classes: 0b1,
            price: 100,
            deadline: 1_000,
            terms,
        }
    }

    /// Two regions, distinct in their filter bits.
    const REGIONS: [Region; 2] = [*b"eu-central\0\0\0\0\0\0", *b"us-east\0\0\0\0\0\0\0\0\0"];

    #[test]
    fn a_book_entry_tells_a_region_it_does_not_accept_and_leaves_the_rest_to_the_bid() {
        assert_ne!(region_bit(&REGIONS[0]), region_bit(&REGIONS[1]));
        let base = need(1, Terms::Uniform(power(300)));
        let in_eu = offer(vec![gpu(0, 0)]).in_region(REGIONS[0]);
        let us_only = &REGIONS[1..];
        let listed = Need {
            regions: Regions::of(us_only),
            ..base
        };
        assert_eq!(in_eu.fit(&listed), Err(Unfit::RegionNotAccepted));
        assert_eq!(in_eu.fits(&listed), Fits::No);
        let entry = Need {
            regions: Regions::from_filter(Regions::filter(us_only)),
            ..base
        };
        assert_eq!(in_eu.fit(&entry), Err(Unfit::RegionNotAccepted));
        assert_eq!(in_eu.fits(&entry), Fits::No);
        // The machine's region's bit is set: it may be accepted, and only the list can tell;
        // a later stage that fails still says no.
        let in_us = offer(vec![gpu(0, 0)]).in_region(REGIONS[1]);
        assert_eq!(in_us.fit(&entry), Err(Unfit::Undecided));
        assert_eq!(in_us.fits(&entry), Fits::Undecided);
        assert_eq!(in_us.fits(&Need { price: 1, ..entry }), Fits::No);
        assert!(in_us.fit(&listed).is_ok());
        assert_eq!(in_us.fits(&listed), Fits::Yes);
        // No list: any region, the empty label's included.
        assert_eq!(Regions::from_filter(Regions::filter(&[])), Regions::Any);
        assert!(offer(vec![gpu(0, 0)]).fit(&base).is_ok());
    }

    fn offer(gpus: Vec<GpuOffer>) -> Offer {
        let mut reserve = [0; GPU_CLASSES];
        reserve[1] = 500;
        Offer::new(gpus, true, ROOM, FREE, 10, 50, reserve)
    }

    #[test]
    fn reasons_come_most_basic_first() {
        let o = offer(vec![gpu(0, 0), gpu(0, 0), gpu(1, 1)]);
        let base = need(2, Terms::Uniform(power(300)));
        assert_eq!(o.fit(&base).unwrap().gpus(), &[0, 1]);
        let host = |cpu_milli, memory_mib| Need {
            room: Room {
                host: Host {
                    cpu_milli,
                    memory_mib,
                },
                ..base.room
            },
            ..base
        };
        let cases: [(Need, Unfit); 14] = [
            (
                Need {
                    deadline: 10,
                    ..base
                },
                Unfit::Expired,
            ),
            (
                Need {
                    regions: Regions::Listed(&REGIONS),
                    room: Room {
                        ports: 3,
                        ..base.room
                    },
                    ..base
                },
                Unfit::RegionNotAccepted,
            ),
            (
                Need {
                    room: Room {
                        ports: 3,
                        ..base.room
                    },
                    ..base
                },
                Unfit::NoRoom,
            ),
            (
                Need {
                    room: Room {
                        scratch_gib: 9,
                        ..base.room
                    },
                    ..base
                },
                Unfit::NoRoom,
            ),
            // More CPU or memory than the machine gives its leases in all: no room.
            (host(16_001, 1), Unfit::NoRoom),
            (host(1, 65_537), Unfit::NoRoom),
            // Within that, but more than running leases leave: busy.
            (host(8_001, 1), Unfit::Busy),
            (host(1, 32_769), Unfit::Busy),
            (need(3, Terms::Uniform(power(300))), Unfit::NoAcceptedClass),
            (
                Need {
                    gib_per_gpu: 81,
                    ..base
                },
                Unfit::TooLittleMemory,
            ),
            (
                need(2, Terms::Uniform(power(401))),
                Unfit::OverclockOutOfRange,
            ),
            (Need { price: 49, ..base }, Unfit::PriceBelowFloor),
            (
                Need {
                    accepted_classes: 0b10,
                    gpu_count: 1,
                    ..base
                },
                Unfit::PriceBelowReserve,
            ),
            (
                Need {
                    deadline: 11,
                    gpu_count: 4,
                    accepted_classes: 0b11,
                    ..base
                },
                Unfit::NoAcceptedClass,
            ),
        ];
        for (n, want) in cases {
            assert_eq!(o.fit(&n), Err(want), "{n:?}");
        }
        let paused = Offer::new(vec![gpu(0, 0)], false, ROOM, FREE, 10, 0, [0; GPU_CLASSES]);
        assert_eq!(
            paused.fit(&need(1, Terms::Uniform(power(300)))),
            Err(Unfit::MachineInactive)
        );
    }

    #[test]
    fn shared_gpus_take_only_equal_terms_and_free_gib() {
        let mut g0 = gpu(0, 0);
        g0.free_gib = 40;
        g0.running = Some(power(250));
        let o = offer(vec![g0, gpu(0, 0)]);
        assert_eq!(
            o.fit(&need(2, Terms::Uniform(power(250)))).unwrap().gpus(),
            &[0, 1]
        );
        assert_eq!(
            o.fit(&need(2, Terms::Uniform(power(300)))),
            Err(Unfit::Busy)
        );
        assert_eq!(
            o.fit(&need(1, Terms::Uniform(power(300)))).unwrap().gpus(),
            &[1]
        );
        let more = Need {
            gib_per_gpu: 41,
            ..need(2, Terms::Uniform(power(250)))
        };
        assert_eq!(o.fit(&more), Err(Unfit::Busy));
    }

    #[test]
    fn one_topology_group_when_one_can_serve() {
        let o = offer(vec![gpu(0, 0), gpu(0, 1), gpu(0, 1), gpu(0, 0), gpu(0, 0)]);
        let two = need(2, Terms::Uniform(power(300)));
        // Group 1 has exactly two: the tightest group that fits.
        assert_eq!(o.fit(&two).unwrap().gpus(), &[1, 2]);
        assert_eq!(o.check_choice(&two, &[1, 2]), Ok(()));
        assert_eq!(
            o.check_choice(&two, &[0, 1]),
            Err(ChoiceError::TopologySplit)
        );
        assert_eq!(
            o.check_choice(&two, &[1, 1]),
            Err(ChoiceError::Assign(AssignError::Duplicate(1)))
        );
        assert_eq!(
            o.check_choice(&two, &[1, 9]),
            Err(ChoiceError::Assign(AssignError::Unknown(1)))
        );
        // Four spans groups: allowed, as no group holds four.
        let four = need(4, Terms::Uniform(power(300)));
        let c = o.fit(&four).unwrap();
        assert_eq!(c.gpus().len(), 4);
        assert_eq!(o.check_choice(&four, c.gpus()), Ok(()));
    }

    #[test]
    fn a_range_decides_when_the_gpus_agree() {
        let terms = [power(150), power(350)];
        let (lo, hi) = Terms::range_of(&terms);
        let range = need(2, Terms::Range { lo, hi });
        // Every GPU takes 100..=400 W: the whole range fits.
        let o = offer(vec![gpu(0, 0), gpu(0, 0)]);
        assert!(o.fit(&range).is_ok());
        // No GPU takes any of 150..=350 W.
        let mut low = gpu(0, 0);
        low.limits = limits((50, 100));
        let o = offer(vec![low, low]);
        assert_eq!(o.fit(&range), Err(Unfit::OverclockOutOfRange));
        // One GPU takes 150, the other 350: only the bid account can tell.
        let mut a = gpu(0, 0);
        a.limits = limits((100, 200));
        let mut b = gpu(0, 0);
        b.limits = limits((300, 400));
        let o = offer(vec![a, b]);
        assert_eq!(o.fit(&range), Err(Unfit::Undecided));
        assert_eq!(
            o.fit(&need(2, Terms::PerGpu(&terms))).unwrap().gpus(),
            &[0, 1]
        );
        let swapped = [power(350), power(150)];
        assert_eq!(
            o.fit(&need(2, Terms::PerGpu(&swapped))).unwrap().gpus(),
            &[1, 0]
        );
    }

    fn arb_settings() -> impl Strategy<Value = OverclockTerms> {
        (
            prop_oneof![Just(90u16), Just(150), Just(250), Just(350), Just(450)],
            prop_oneof![Just(None), Just(Some(150u16)), Just(Some(1_500))],
            prop_oneof![Just(None), Just(Some(-150i16)), Just(Some(50))],
        )
            .prop_map(|(p, cl, co)| OverclockTerms {
                power_limit_w: p,
                core_lock_mhz: cl,
                mem_lock_mhz: None,
                core_offset_mhz: co,
                mem_offset_mhz: None,
            })
    }

    fn arb_gpu() -> impl Strategy<Value = GpuOffer> {
        (
            0u8..2,
            0u8..2,
            prop_oneof![Just((100u16, 200u16)), Just((100, 400)), Just((300, 500))],
            prop_oneof![Just(80u16), Just(40), Just(0)],
            prop::option::of(arb_settings()),
        )
            .prop_map(|(class, group, power, free, running)| {
                let mut g = gpu(class, group);
                g.limits = limits(power);
                g.free_gib = if running.is_some() { free.min(40) } else { 80 };
                g.running = running;
                g
            })
    }

    proptest! {
        /// What a book entry decides from the range agrees with the exact rule on the bid's
        /// terms; and whatever the exact rule chooses passes `check_choice`.
        #[test]
        fn range_agrees_with_exact(
            gpus in prop::collection::vec(arb_gpu(), 1..6),
            terms in prop::collection::vec(arb_settings(), 1..4),
            classes in 1u8..4,
            price in prop_oneof![Just(40u64), Just(100), Just(600)],
            ports in 0u8..4,
            scratch_gib in prop_oneof![Just(0u16), Just(8), Just(9)],
            cpu_milli in prop_oneof![Just(0u32), Just(8_000), Just(8_001), Just(16_001)],
            machine_region in 0usize..2,
            accepted in 0usize..4,
        ) {
            let o = offer(gpus).in_region(REGIONS[machine_region]);
            let accepted: &[Region] = match accepted {
                0 => &[],
                1 => &REGIONS[..1],
                2 => &REGIONS[1..],
                _ => &REGIONS,
            };
            let n = terms.len() as u8;
            let exact = Need {
                gpu_count: n,
                gib_per_gpu: 40,
                accepted_classes: classes,
                price,
                deadline: 1_000,
                terms: Terms::of(&terms),
                room: Room {
                    ports,
                    scratch_gib,
                    host: Host {
                        cpu_milli,
                        memory_mib: 1_024,
                    },
                },
                regions: Regions::of(accepted),
            };
            let (lo, hi) = Terms::range_of(&terms);
            let summary = Need {
                terms: Terms::Range { lo, hi },
                regions: Regions::from_filter(Regions::filter(accepted)),
                ..exact
            };
            let truth = o.fit(&exact);
            match o.fit(&summary) {
                Ok(_) => prop_assert!(truth.is_ok()),
                Err(Unfit::Undecided) => {}
                Err(e) => {
                    prop_assert!(truth.is_err());
                    // Stages before the terms are the same; later ones may name an earlier one.
                    if matches!(e, Unfit::NoAcceptedClass | Unfit::TooLittleMemory) {
                        prop_assert_eq!(truth, Err(e));
                    }
                }
            }
            if let Ok(choice) = truth {
                prop_assert_eq!(o.check_choice(&exact, choice.gpus()), Ok(()));
            }
            // The fast answer agrees with the full rule, on the exact terms and on the range.
            let fast = |r: Result<Choice, Unfit>| match r {
                Ok(_) => Fits::Yes,
                Err(Unfit::Undecided) => Fits::Undecided,
                Err(_) => Fits::No,
            };
            prop_assert_eq!(o.fits(&exact), fast(truth));
            prop_assert_eq!(o.fits(&summary), fast(o.fit(&summary)));
        }
    }
}
