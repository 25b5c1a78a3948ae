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
//! A book entry decides exactly, whatever its bidder chose: it keeps a bid's per-GPU overclock
//! terms as at most two distinct sets with their counts ([`Terms::Split`]; fit does not depend on
//! which of the bid's GPUs asks which), and the regions it accepts as indices into its market's
//! region table ([`Regions::Filter`]). So `allocate` never needs a bid account above the chosen
//! bid, and its transaction does not grow with what other bidders chose.

use crate::matching::{self, AssignError, MAX};
use crate::overclock::{GpuLimits, OverclockTerms, Settings};

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
    /// What a book entry keeps of a list: bit `i` accepts the market's `i`-th region. Exact, as
    /// a machine's [`Offer::in_region`] bit comes from the same table.
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

    /// What a book entry's `filter` says.
    pub fn from_filter(filter: u32) -> Regions<'static> {
        if filter == 0 {
            Regions::Any
        } else {
            Regions::Filter(filter)
        }
    }

    /// Whether a machine in `region` (bit `bit` of its market's region table, 0 for none) is
    /// accepted.
    fn accepts(self, region: &Region, bit: u32) -> bool {
        match self {
            Regions::Any => true,
            Regions::Listed(list) => list.contains(region),
            Regions::Filter(f) => f & bit != 0,
        }
    }
}

/// One of the machine's GPUs, as the fit rule sees it now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
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

    /// What a lease holding `gib` GiB of GPU memory, of the `of` GiB a machine's GPUs have,
    /// holds of a machine giving `pool` when it asked `self`: what it asked, and of CPU or memory
    /// it asked none of, its GPU memory's share of the pool (a whole GPU's share for a lease of
    /// one whole GPU, a third of it for one taking a third of a GPU). So leases that reserve
    /// nothing cannot together take more than the machine gives, and each gets a limit (a
    /// machine that gives none leaves its agent's per-GPU default).
    pub fn or_share(self, pool: Host, gib: u32, of: u32) -> Host {
        let share = |asked: u32, total: u32| match (asked, of) {
            (0, 1..) => (total as u64 * gib.min(of) as u64 / of as u64) as u32,
            _ => asked,
        };
        Host {
            cpu_milli: share(self.cpu_milli, pool.cpu_milli),
            memory_mib: share(self.memory_mib, pool.memory_mib),
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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Room {
    /// Container ports published on the machine's address.
    pub ports: u8,
    /// GiB of scratch volume at the container's `/workspace`.
    pub scratch_gib: u16,
    /// CPU and memory reserved for the lease (0: its GPU memory's share, [`Host::or_share`]).
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
    /// The machine's region label and its bit in the market's region table (0: none).
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
    /// Each distinct set of terms shared GPUs run ([`Settings::key`]), with those GPUs, by key:
    /// tenants choose them, so a lookup is a binary search, not a pass over the GPUs.
    running: Vec<(u128, u16)>,
    /// Cheap bounds for [`Offer::fits`]: GPUs with any free GiB, the most free GiB on one GPU,
    /// the least price any class takes, and the union of every GPU's limits.
    free_gpus: u32,
    /// Free GiB of each GPU, most first.
    free_desc: [u16; MAX],
    /// `free_first[k]`: the `k` GPUs first in `free_desc`'s order, as a mask (all of them from
    /// the machine's GPU count on): with a search of `free_desc`, the GPUs with some free GiB
    /// in a few steps, whatever the machine's size ([`Offer::free_at_least`]).
    free_first: [u16; MAX + 1],
    /// GiB of all its GPUs: what a lease's share of CPU and memory is counted against.
    total_gib: u32,
    min_price: u64,
    hull: GpuLimits,
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
    /// The latest time the bid may start (its deadline less the shortest run its client
    /// accepts): it cannot start after it.
    pub latest_start: i64,
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
    /// What a book entry keeps of differing per-GPU terms: `second_count` of the bid's GPUs ask
    /// `second`, the others `first` (see [`Terms::summarise`]).
    Split {
        first: OverclockTerms,
        second: OverclockTerms,
        second_count: u8,
    },
}

/// Most distinct sets of overclock terms one bid asks of its GPUs: what a book entry holds.
pub const MAX_TERM_SETS: usize = 2;

/// Why a bid cannot run on a machine now; the first stage that fails, most basic first (the
/// order of the variants, so the greatest of several is the nearest miss).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Unfit {
    /// The machine is paused or retired.
    MachineInactive,
    /// The bid's latest start has passed.
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
}

impl Unfit {
    /// One sentence for people (the CLI's `bid explain`).
    pub fn describe(self) -> &'static str {
        match self {
            Unfit::MachineInactive => "machine paused or retired",
            Unfit::Expired => "the bid's latest start has passed",
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

impl Terms<'_> {
    /// `Uniform` when every entry is the same, else `PerGpu`.
    pub fn of(terms: &[OverclockTerms]) -> Terms<'_> {
        match terms {
            [first, rest @ ..] if rest.iter().all(|t| t == first) => Terms::Uniform(*first),
            _ => Terms::PerGpu(terms),
        }
    }

    /// What a book entry keeps of `terms` (one per GPU of a bid): `Uniform` for one distinct
    /// set, `Split` for two; `None` for more than [`MAX_TERM_SETS`], which a bid may not ask.
    pub fn summarise(terms: &[OverclockTerms]) -> Option<Terms<'static>> {
        let (&first, rest) = terms.split_first()?;
        let mut second = None;
        let mut second_count = 0u8;
        for t in rest.iter().filter(|t| **t != first) {
            match second {
                None => second = Some(*t),
                Some(s) if s != *t => return None,
                Some(_) => {}
            }
            second_count += 1;
        }
        Some(match second {
            None => Terms::Uniform(first),
            Some(second) => Terms::Split {
                first,
                second,
                second_count,
            },
        })
    }

    /// The terms of each of `n` GPUs, written into `buf` where the terms do not list them;
    /// `None` for uniform terms (one mask serves every GPU) or a list of another length.
    fn per_gpu<'b>(
        &'b self,
        n: usize,
        buf: &'b mut [OverclockTerms; MAX],
    ) -> Option<&'b [OverclockTerms]> {
        match *self {
            Terms::Uniform(_) => None,
            Terms::PerGpu(t) => (t.len() == n && n <= MAX).then_some(t),
            Terms::Split {
                first,
                second,
                second_count,
            } => {
                let second_count = second_count as usize;
                if n > MAX || second_count > n {
                    return None;
                }
                let (a, b) = buf[..n].split_at_mut(n - second_count);
                a.fill(first);
                b.fill(second);
                Some(&buf[..n])
            }
        }
    }
}

/// The least price each class takes (the `floor`, or its `reserve` price when higher), and the
/// least any class of the machine's (`classes`) takes.
fn prices(floor: u64, classes: u8, reserve: &[u64; GPU_CLASSES]) -> ([u64; GPU_CLASSES], u64) {
    let class_price = reserve.map(|r| floor.max(r));
    // The least reserve price of a class on the machine (0: none).
    let min_reserve = (0..GPU_CLASSES)
        .filter(|&c| classes & (1 << c) != 0)
        .map(|c| reserve[c])
        .min()
        .unwrap_or(0);
    (class_price, floor.max(min_reserve))
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
        // One pass over the GPUs for every mask and bound.
        let mut class_gpus = [0u16; GPU_CLASSES];
        let mut limits: Vec<(GpuLimits, u16)> = Vec::new();
        let mut groups: Vec<(u8, u16)> = Vec::new();
        let mut shared = 0u16;
        let mut running: Vec<(u128, u16)> = Vec::new();
        let mut free_gpus = 0u32;
        let mut total_gib = 0u32;
        let mut by_free = [0u8; MAX];
        for (g, gpu) in gpus.iter().enumerate().take(MAX) {
            by_free[g] = g as u8;
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
            if let Some(terms) = &gpu.running {
                shared |= bit;
                let key = terms.key();
                match running.iter_mut().find(|(k, _)| *k == key) {
                    Some((_, m)) => *m |= bit,
                    None => running.push((key, bit)),
                }
            }
            free_gpus += u32::from(gpu.free_gib > 0);
            total_gib += u32::from(gpu.memory_gib);
        }
        let classes = class_gpus
            .iter()
            .enumerate()
            .fold(0u8, |c, (i, &m)| if m != 0 { c | 1 << i } else { c });
        let (class_price, min_price) = prices(floor, classes, &reserve);
        running.sort_unstable_by_key(|&(k, _)| k);
        let len = gpus.len().min(MAX);
        insertion_sort_by_key(&mut by_free[..len], |&g| {
            core::cmp::Reverse(gpus[g as usize].free_gib)
        });
        let mut free_desc = [0u16; MAX];
        let mut free_first = [0u16; MAX + 1];
        for (k, &g) in by_free[..len].iter().enumerate() {
            free_desc[k] = gpus[g as usize].free_gib;
            free_first[k + 1] = free_first[k] | 1 << g;
        }
        for k in len + 1..=MAX {
            free_first[k] = free_first[len];
        }
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
            region_bit: 0,
            room,
            free,
            now,
            floor,
            reserve,
            class_gpus,
            classes,
            limits,
            shared,
            running,
            free_gpus,
            free_desc,
            free_first,
            total_gib,
            min_price,
            hull,
            class_price,
            groups: groups.into_iter().map(|(_, m)| m).collect(),
        }
    }
    /// The same offer at `now`, the market's reserve price of each class being `reserve` (those
    /// of classes the machine lacks are not kept, as the machine's own offer prices only its
    /// classes): what the clock and the market's demand move while the machine stays as it is.
    pub fn reprice(&mut self, now: i64, reserve: &[u64; GPU_CLASSES]) {
        for (c, r) in self.reserve.iter_mut().enumerate() {
            *r = if self.classes & (1 << c) != 0 {
                reserve[c]
            } else {
                0
            };
        }
        (self.class_price, self.min_price) = prices(self.floor, self.classes, &self.reserve);
        self.now = now;
    }

    /// The same offer, taking no work: what a machine already holding a part of a gang offers
    /// the gang's other parts.
    pub fn closed(self) -> Self {
        Offer {
            active: false,
            ..self
        }
    }

    /// The offer of a machine in `region`, bit `bit` of its market's region table (a machine
    /// without one is in the empty label's, with no bit).
    pub fn in_region(mut self, region: Region, bit: u32) -> Self {
        self.region = region;
        self.region_bit = bit;
        self
    }

    pub fn gpus(&self) -> &[GpuOffer] {
        &self.gpus
    }

    /// The market's reserve price of each of the machine's classes (0 for the others).
    pub fn reserve(&self) -> &[u64; GPU_CLASSES] {
        &self.reserve
    }

    /// Feeds `h` everything that decides which bids fit here except the clock and the market's
    /// reserve prices: the GPUs as they are now, whether the machine takes work, its region,
    /// room and free CPU and memory, and its host's floor. Two offers that hash alike at
    /// reserve prices no lower and a later clock fit no bid the first did not: what a walk of
    /// a book spread over several transactions (`walk_book`) relies on. Every other field is
    /// derived from these.
    pub fn hash_state<H: core::hash::Hasher>(&self, h: &mut H) {
        use core::hash::Hash;
        self.gpus.hash(h);
        self.active.hash(h);
        self.region.hash(h);
        self.region_bit.hash(h);
        self.room.hash(h);
        self.free.hash(h);
        self.floor.hash(h);
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

    /// GPUs among `among` whose memory is at least `gib`.
    fn memory_mask(&self, among: u16, gib: u16) -> u16 {
        let mut out = 0;
        for (g, gpu) in self.gpus.iter().enumerate().take(MAX) {
            if among & (1 << g) != 0 && gpu.memory_gib >= gib {
                out |= 1 << g;
            }
        }
        out
    }

    /// GPUs with at least `gib` free GiB: a binary search of `free_desc` (most first), not a
    /// pass over the GPUs, as `allocate` asks it of each book entry it passes.
    fn free_at_least(&self, gib: u16) -> u16 {
        let len = self.gpus.len().min(MAX);
        self.free_first[self.free_desc[..len].partition_point(|&f| f >= gib)]
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

    /// Shared GPUs among `among` that run `terms`.
    fn running_mask(&self, among: u16, terms: &impl Settings) -> u16 {
        if among & self.shared == 0 {
            return 0;
        }
        match self.running.binary_search_by_key(&terms.key(), |&(k, _)| k) {
            Ok(i) => among & self.running[i].1,
            Err(_) => 0,
        }
    }

    /// The machine GPUs that can serve `need` once every check has passed, or the first check
    /// that fails.
    fn free(&self, need: &Need) -> Result<Free, Unfit> {
        if !self.active {
            return Err(Unfit::MachineInactive);
        }
        if self.now > need.latest_start {
            return Err(Unfit::Expired);
        }
        if !need.regions.accepts(&self.region, self.region_bit) {
            return Err(Unfit::RegionNotAccepted);
        }
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
            self.memory_mask(by_class, need.gib_per_gpu),
            Unfit::TooLittleMemory,
        )?;
        // Per bid GPU masks where the terms differ; one mask serves every GPU of a uniform bid.
        let mut buf = [OverclockTerms::default(); MAX];
        let listed = match need.terms {
            Terms::Uniform(_) => None,
            _ => Some(
                need.terms
                    .per_gpu(need.gpu_count as usize, &mut buf)
                    .ok_or(Unfit::OverclockOutOfRange)?,
            ),
        };
        let allowed = match (need.terms, listed) {
            (Terms::Uniform(s), _) => self.limits_mask(|l| s.allowed_by(l)),
            (_, Some(terms)) => {
                let mut compat = [0u16; MAX];
                for (c, s) in compat.iter_mut().zip(terms) {
                    *c = by_memory & self.limits_mask(|l| s.allowed_by(l));
                }
                if matching::assign(&compat[..terms.len()]).is_none() {
                    return Err(Unfit::OverclockOutOfRange);
                }
                compat.iter().fold(0, |m, c| m | c)
            }
            (_, None) => return Err(Unfit::OverclockOutOfRange),
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
        if !self
            .free
            .holds(self.held(need.room.host, need.gpu_count, need.gib_per_gpu))
        {
            return Err(Unfit::Busy);
        }
        let roomy = by_price & self.free_at_least(need.gib_per_gpu);
        let unshared = roomy & !self.shared;
        match (need.terms, listed) {
            (Terms::Uniform(s), _) => {
                let free = unshared | self.running_mask(roomy, &s);
                Ok(Free::Uniform(enough(free, Unfit::Busy)?))
            }
            (_, terms) => {
                let terms = terms.unwrap_or_default();
                let mut compat = [0u16; MAX];
                for (i, s) in terms.iter().enumerate() {
                    let fits = self.limits_mask(|l| s.allowed_by(l));
                    compat[i] = (unshared | self.running_mask(roomy, s)) & fits;
                }
                match matching::assign(&compat[..terms.len()]) {
                    Some(_) => Ok(Free::Exact(compat)),
                    None => Err(Unfit::Busy),
                }
            }
        }
    }

    /// The CPU and memory a lease of `gpus` GPUs of `gib_per_gpu` asking `asked` holds here
    /// ([`Host::or_share`] of the machine's pools).
    pub fn held(&self, asked: Host, gpus: u8, gib_per_gpu: u16) -> Host {
        asked.or_share(
            self.room.host,
            gpus as u32 * gib_per_gpu as u32,
            self.total_gib,
        )
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
        latest_start: i64,
        room: Room,
    ) -> bool {
        let n = gpu_count as usize;
        !self.active
            || self.now > latest_start
            || !self.room.holds(room)
            || n as u32 > self.free_gpus
            || price < self.min_price
            || accepted_classes & self.classes == 0
            // The n-th most free GPU must have the GiB (n ≤ free GPUs ≤ 16 here).
            || (n > 0 && self.free_desc[n - 1] < gib_per_gpu)
            || !self.free.holds(self.held(room.host, gpu_count, gib_per_gpu))
    }

    /// Whether `need` can run on this machine now: [`Offer::fit`] without choosing the GPUs
    /// and without the reason, what `allocate` asks of every book entry above the chosen bid.
    /// Bounds that hold for the whole machine turn most bids away in a few steps; the terms a
    /// book entry keeps (one or two sets) take one pass over the GPUs; only a bid account's
    /// own per-GPU list takes the full rule. Never allocates.
    pub fn fits(&self, need: &Need) -> bool {
        self.accepts(need.regions)
            && !self.rules_out(
                need.gpu_count,
                need.gib_per_gpu,
                need.accepted_classes,
                need.price,
                need.latest_start,
                need.room,
            )
            && match need.terms {
                Terms::Uniform(s) => self.sets_fit(
                    need.gpu_count,
                    need.gib_per_gpu,
                    need.accepted_classes,
                    need.price,
                    &s,
                    None::<(&OverclockTerms, u8)>,
                ),
                Terms::Split {
                    first,
                    second,
                    second_count,
                } => self.sets_fit(
                    need.gpu_count,
                    need.gib_per_gpu,
                    need.accepted_classes,
                    need.price,
                    &first,
                    Some((&second, second_count)),
                ),
                Terms::PerGpu(t) => {
                    t.iter().all(|s| s.allowed_by(&self.hull)) && self.free(need).is_ok()
                }
            }
    }

    /// Whether the machine is in a region `regions` accepts: one comparison, so a caller
    /// holding a book entry can skip the rest.
    pub fn accepts(&self, regions: Regions) -> bool {
        regions.accepts(&self.region, self.region_bit)
    }

    /// [`Offer::fits`] for one set of terms on every GPU, or two sets (`second` on
    /// `second.1` of the bid's GPUs), for a bid the caller has already found in an accepted
    /// region and not ruled out by [`Offer::rules_out`] (a book entry, checked on its stored
    /// numbers, which it passes here without building a [`Need`]). In bit masks: a GPU can
    /// serve a set when it is of an accepted class whose price the bid meets, has the free GiB,
    /// allows the terms and is unshared or already runs them. With two sets the bid fits
    /// exactly when enough GPUs serve each set and enough serve either (Hall's condition for
    /// two kinds of demand); the same condition on the limits alone turns most misfits away
    /// first. The same answer as the staged rule of [`Offer::fit`] (a property test checks it).
    pub fn sets_fit(
        &self,
        gpu_count: u8,
        gib_per_gpu: u16,
        accepted_classes: u8,
        price: u64,
        first: &impl Settings,
        second: Option<(&impl Settings, u8)>,
    ) -> bool {
        let n_b = second.map_or(0, |(_, n)| n as u32);
        if n_b >= gpu_count as u32 && n_b > 0 {
            return false;
        }
        let n_a = gpu_count as u32 - n_b;
        let hall = |a: u16, b: u16| match second {
            None => count(a) >= n_a,
            Some(_) => count(a) >= n_a && count(b) >= n_b && count(a | b) >= n_a + n_b,
        };
        let limits_a = self.limits_mask(|l| first.allowed_by(l));
        let limits_b = second.map_or(0, |(s, _)| self.limits_mask(|l| s.allowed_by(l)));
        if !hall(limits_a, limits_b) {
            return false;
        }
        // The GPUs of the machine's accepted classes whose least price the bid meets.
        let mut priced = 0u16;
        let mut left = accepted_classes & self.classes;
        while left != 0 {
            let c = left.trailing_zeros() as usize;
            if price >= self.class_price[c] {
                priced |= self.class_gpus[c];
            }
            left &= left - 1;
        }
        let base = priced & self.free_at_least(gib_per_gpu);
        let unshared = base & !self.shared;
        // A shared GPU serves a set it already runs (read only where some GPU is shared).
        let a = (unshared | self.running_mask(base, first)) & limits_a;
        let b = second.map_or(0, |(s, _)| {
            (unshared | self.running_mask(base, s)) & limits_b
        });
        hall(a, b)
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
        let base = base & self.free_at_least(need.gib_per_gpu);
        let base = self.price_mask(base, need.price, true);
        let unshared = base & !self.shared;
        let mut buf = [OverclockTerms::default(); MAX];
        let listed = need.terms.per_gpu(n, &mut buf);
        for (i, slot) in out.iter_mut().enumerate().take(n) {
            let s = match (need.terms, listed) {
                (Terms::Uniform(s), _) => s,
                (_, Some(t)) => t[i],
                (_, None) => continue,
            };
            let fits = self.limits_mask(|l| s.allowed_by(l));
            *slot = (unshared | self.running_mask(base, &s)) & fits;
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
            latest_start: 1_000,
            terms,
        }
    }

    /// Two regions, the market's table in this order.
    const REGIONS: [Region; 2] = [*b"eu-central\0\0\0\0\0\0", *b"us-east\0\0\0\0\0\0\0\0\0"];

    /// A machine in the market's `i`-th region.
    fn in_region(o: Offer, i: usize) -> Offer {
        o.in_region(REGIONS[i], 1 << i)
    }

    /// What a book entry keeps of `accepted`: its indices in the market's table.
    fn filter(accepted: &[Region]) -> Regions<'static> {
        let bits = accepted
            .iter()
            .map(|r| 1 << REGIONS.iter().position(|x| x == r).unwrap())
            .fold(0, |f, b| f | b);
        Regions::from_filter(bits)
    }

    #[test]
    fn a_book_entry_decides_a_region_exactly() {
        let base = need(1, Terms::Uniform(power(300)));
        let in_eu = in_region(offer(vec![gpu(0, 0)]), 0);
        let us_only = &REGIONS[1..];
        let listed = Need {
            regions: Regions::of(us_only),
            ..base
        };
        assert_eq!(in_eu.fit(&listed), Err(Unfit::RegionNotAccepted));
        assert!(!in_eu.fits(&listed));
        let entry = Need {
            regions: filter(us_only),
            ..base
        };
        assert_eq!(in_eu.fit(&entry), Err(Unfit::RegionNotAccepted));
        assert!(!in_eu.fits(&entry));
        let in_us = in_region(offer(vec![gpu(0, 0)]), 1);
        assert!(in_us.fit(&entry).is_ok());
        assert!(in_us.fits(&entry));
        assert!(!in_us.fits(&Need { price: 1, ..entry }));
        assert!(in_us.fit(&listed).is_ok());
        assert!(in_us.fits(&listed));
        // A machine whose label is in no table has no bit: only a bid for any region runs.
        let unlisted = offer(vec![gpu(0, 0)]).in_region(*b"elsewhere\0\0\0\0\0\0\0", 0);
        assert!(!unlisted.fits(&Need {
            regions: filter(&REGIONS),
            ..base
        }));
        // No list: any region, the empty label's included.
        assert_eq!(Regions::from_filter(0), Regions::Any);
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
                // A second after its latest start.
                Need {
                    latest_start: 9,
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
                // At its latest start a bid may still start.
                Need {
                    latest_start: 10,
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
    fn two_term_sets_decide_exactly_where_a_range_could_not() {
        // The former undecidable entry: 150 W and 350 W on GPUs taking 100..=200 and 300..=400.
        let terms = [power(150), power(350)];
        let split = Terms::summarise(&terms).unwrap();
        assert_eq!(
            split,
            Terms::Split {
                first: power(150),
                second: power(350),
                second_count: 1
            }
        );
        let mut a = gpu(0, 0);
        a.limits = limits((100, 200));
        let mut b = gpu(0, 0);
        b.limits = limits((300, 400));
        let o = offer(vec![a, b]);
        assert!(o.fits(&need(2, split)));
        assert!(o.fit(&need(2, split)).is_ok());
        // Two GPUs that each take only 150 W: the 350 W GPU of the bid has none.
        let o = offer(vec![a, a]);
        assert!(!o.fits(&need(2, split)));
        assert_eq!(o.fit(&need(2, split)), Err(Unfit::OverclockOutOfRange));
        // 50 W and 300 W on GPUs of 100..=400 W: no GPU takes 50 W, so no.
        let low = Terms::summarise(&[power(50), power(300)]).unwrap();
        let o = offer(vec![gpu(0, 0), gpu(0, 0)]);
        assert!(!o.fits(&need(2, low)));
        // The exact per-GPU list still decides which GPU serves which.
        let o = offer(vec![a, b]);
        assert_eq!(
            o.fit(&need(2, Terms::PerGpu(&terms))).unwrap().gpus(),
            &[0, 1]
        );
        let swapped = [power(350), power(150)];
        assert_eq!(
            o.fit(&need(2, Terms::PerGpu(&swapped))).unwrap().gpus(),
            &[1, 0]
        );
        // Three distinct sets do not fit an entry: a bid may not ask them.
        assert_eq!(
            Terms::summarise(&[power(150), power(250), power(350)]),
            None
        );
        assert_eq!(
            Terms::summarise(&[power(150), power(150)]),
            Some(Terms::Uniform(power(150)))
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
        /// However a machine's GPUs are split among leases that reserve nothing, their shares
        /// together stay within what the machine gives; a lease that asked keeps what it asked.
        #[test]
        fn leases_that_reserve_nothing_never_share_out_more_than_the_pool(
            cpu: u32,
            memory: u32,
            of in 0u32..=16 * 192,
            cuts in proptest::collection::vec(1u32..=16 * 192, 0..40),
            asked in 1u32..,
        ) {
            let pool = Host { cpu_milli: cpu, memory_mib: memory };
            let (mut left, mut total) = (of, Host::default());
            for gib in cuts {
                let gib = gib.min(left);
                left -= gib;
                let held = Host::default().or_share(pool, gib, of);
                total = total.checked_add(held).expect("no overflow below the pool");
            }
            prop_assert!(pool.holds(total));
            let own = Host { cpu_milli: asked, memory_mib: asked };
            prop_assert_eq!(own.or_share(pool, of, of), own);
        }
    }

    proptest! {
        /// What a book entry decides from its summary (two term sets, region indices) is what
        /// the exact rule decides on the bid's own terms and labels; whatever the exact rule
        /// chooses passes `check_choice`.
        #[test]
        fn an_entry_decides_as_its_bid(
            gpus in prop::collection::vec(arb_gpu(), 1..6),
            sets in prop::collection::vec(arb_settings(), 1..3),
            picks in prop::collection::vec(0usize..2, 1..5),
            classes in 1u8..4,
            price in prop_oneof![Just(40u64), Just(100), Just(600)],
            ports in 0u8..4,
            scratch_gib in prop_oneof![Just(0u16), Just(8), Just(9)],
            cpu_milli in prop_oneof![Just(0u32), Just(8_000), Just(8_001), Just(16_001)],
            machine_region in 0usize..2,
            accepted in 0usize..4,
        ) {
            let o = in_region(offer(gpus), machine_region);
            let accepted: &[Region] = match accepted {
                0 => &[],
                1 => &REGIONS[..1],
                2 => &REGIONS[1..],
                _ => &REGIONS,
            };
            let terms: Vec<_> = picks.iter().map(|&i| sets[i % sets.len()]).collect();
            let exact = Need {
                gpu_count: terms.len() as u8,
                gib_per_gpu: 40,
                accepted_classes: classes,
                price,
                latest_start: 1_000,
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
            let summary = Need {
                terms: Terms::summarise(&terms).unwrap(),
                regions: filter(accepted),
                ..exact
            };
            let truth = o.fit(&exact);
            prop_assert_eq!(o.fit(&summary).is_ok(), truth.is_ok());
            if let Err(e) = truth {
                prop_assert_eq!(o.fit(&summary), Err(e));
            }
            if let Ok(choice) = truth {
                prop_assert_eq!(o.check_choice(&exact, choice.gpus()), Ok(()));
            }
            // The fast answer agrees with the full rule, on the exact terms and on the entry.
            prop_assert_eq!(o.fits(&exact), truth.is_ok());
            prop_assert_eq!(o.fits(&summary), truth.is_ok());
        }
    }
}
