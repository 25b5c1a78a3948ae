use anchor_lang::prelude::*;
use gpu_market_core::fit::{GpuOffer, Host, Offer, Room, GPU_CLASSES};
use gpu_market_core::overclock::{GpuLimits, Range};

use crate::errors::MarketError;
use crate::state::{BidKind, BookWalk, Market, Offers, OverclockTerms, Reservation};

/// Most GPUs one machine offers.
pub const MAX_GPUS: usize = 16;
/// Most image digests a machine advertises as cached (for data affinity).
pub const MAX_CACHED_IMAGES: usize = 8;
/// Bytes of a machine's free-form region label (e.g. "eu-central"): the fit rule's.
pub const REGION_LEN: usize = gpu_market_core::fit::REGION_LEN;

/// Bytes of a machine's public host name (a DNS name or an IP address).
pub const HOST_LEN: usize = 64;
/// Most entries of a machine's egress allow-list.
pub const MAX_ALLOW: usize = 4;

/// Where a lease's container may connect to. Never the host itself, cloud metadata
/// (169.254.0.0/16) or other leases, whatever the policy (the agent's firewall).
#[derive(
    AnchorSerialize, AnchorDeserialize, Clone, Copy, Debug, Default, PartialEq, Eq, InitSpace,
)]
pub enum Egress {
    /// No network: the container has a loopback interface only.
    #[default]
    None,
    /// Only the addresses of the allow-list.
    AllowList,
    /// Any public address (private, shared and link-local ranges stay closed).
    Open,
}

/// An IPv4 network of an egress allow-list, e.g. 203.0.113.0/24.
#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, Debug, PartialEq, Eq, InitSpace)]
pub struct Cidr {
    pub addr: [u8; 4],
    pub prefix: u8,
}

/// How clients reach a machine's leases and what those may reach: shown before bidding. The
/// default publishes nothing and gives leases no network and no scratch volume.
#[derive(AnchorSerialize, AnchorDeserialize, Clone, Debug, Default, PartialEq, Eq, InitSpace)]
pub struct MachineNetwork {
    /// The machine's public address for published ports and the agent's API: a DNS name or
    /// an IP address; empty when it publishes nothing.
    #[max_len(HOST_LEN)]
    pub host: String,
    /// The port of the agent's API (TLS under the agent's key; 0: none).
    pub api_port: u16,
    /// The most container ports one lease may publish.
    pub ports_per_lease: u8,
    /// The most GiB of scratch volume one lease gets at `/workspace`.
    pub scratch_gib: u16,
    pub egress: Egress,
    /// With [`Egress::AllowList`]: the networks leases may reach.
    #[max_len(MAX_ALLOW)]
    pub allow: Vec<Cidr>,
}

impl MachineNetwork {
    /// Checks the declaration: see [`MarketError::BadNetwork`].
    pub fn validate(&self) -> Result<()> {
        let host_ok = self.host.len() <= HOST_LEN
            && self.host.bytes().all(|b| b.is_ascii_graphic())
            && (!self.host.is_empty() || (self.api_port == 0 && self.ports_per_lease == 0));
        let allow_ok = self.allow.len() <= MAX_ALLOW
            && (self.egress == Egress::AllowList || self.allow.is_empty())
            && self.allow.iter().all(|c| c.prefix <= 32);
        require!(host_ok && allow_ok, MarketError::BadNetwork);
        Ok(())
    }

    /// What the machine gives one lease besides GPUs, with `host` for all its leases.
    pub fn room(&self, host: Host) -> Room {
        Room {
            ports: self.ports_per_lease,
            scratch_gib: self.scratch_gib,
            host,
        }
    }
}

/// Machine status. Stored as a `u8` so the layout is stable; `Retired` is final.
#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, Debug, PartialEq, Eq, InitSpace)]
pub enum MachineStatus {
    Active,
    Paused,
    Retired,
}

/// One GPU as its host declares it. Plain old data: Borsh reads and writes it as one copy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, InitSpace)]
#[cfg_attr(feature = "idl-build", derive(AnchorSerialize, AnchorDeserialize))]
#[repr(C)]
pub struct GpuSpec {
    /// The GPU's UUID as NVML reports it (128 bits); unique within a machine.
    pub uuid: [u8; 16],
    /// Index into the market's GPU class table (e.g. 0 = H100, 1 = A100, …).
    pub class: u8,
    /// GPUs in one NVLink island or under one PCIe switch share a group.
    pub topology_group: u8,
    pub memory_gib: u16,
    /// Power limit range in W: the card's minimum up to the host's maximum.
    pub power_w: [u16; 2],
    /// Allowed clock locks in MHz; `[0, 0]` means the host does not allow that lock.
    pub core_lock_mhz: [u16; 2],
    pub mem_lock_mhz: [u16; 2],
    /// Allowed clock offsets in MHz.
    pub core_offset_mhz: [i16; 2],
    pub mem_offset_mhz: [i16; 2],
}

// SAFETY: `repr(C)`, integers and byte arrays only, no padding (size pinned below): every bit
// pattern is a valid value.
unsafe impl anchor_lang::__private::bytemuck::Zeroable for GpuSpec {}
unsafe impl anchor_lang::__private::bytemuck::Pod for GpuSpec {}
const _: () = assert!(core::mem::size_of::<GpuSpec>() == 16 + 1 + 1 + 2 + 4 * 5);
crate::state::pod_borsh!(GpuSpec);

impl GpuSpec {
    pub fn limits(&self) -> GpuLimits {
        GpuLimits {
            power_w: Range {
                min: self.power_w[0],
                max: self.power_w[1],
            },
            core_lock_mhz: Range {
                min: self.core_lock_mhz[0],
                max: self.core_lock_mhz[1],
            },
            mem_lock_mhz: Range {
                min: self.mem_lock_mhz[0],
                max: self.mem_lock_mhz[1],
            },
            core_offset_mhz: Range {
                min: self.core_offset_mhz[0],
                max: self.core_offset_mhz[1],
            },
            mem_offset_mhz: Range {
                min: self.mem_offset_mhz[0],
                max: self.mem_offset_mhz[1],
            },
        }
    }
}

crate::state::pod_array!(
    GpuTable,
    GpuSpec,
    MAX_GPUS,
    "A machine's GPUs (its `gpu_count` first)."
);
crate::state::pod_array!(
    ImageTable,
    [u8; 32],
    MAX_CACHED_IMAGES,
    "sha256 digests of a machine's cached images (its `cached_image_count` first)."
);
crate::state::pod_array!(GibTable, u16, MAX_GPUS, "GiB of each of a machine's GPUs.");
crate::state::pod_array!(
    TermsTable,
    OverclockTerms,
    MAX_GPUS,
    "The overclock terms each of a machine's GPUs runs."
);

/// What a host declares about a machine: set at registration, changed by `update_machine`.
/// Its cached images are not among them: `set_cached_images` declares those, in a transaction
/// of their own, so that a machine of 16 GPUs with every network term registers in one packet.
#[derive(AnchorSerialize, AnchorDeserialize, Clone, Debug, PartialEq, Eq)]
pub struct MachineTerms {
    /// The hot key of the machine's agent: it signs heartbeats and usage proofs.
    pub agent: Pubkey,
    pub region: [u8; REGION_LEN],
    pub gpus: Vec<GpuSpec>,
    /// The host's floor, per GPU-hour, in payment-token base units.
    pub price_floor_per_gpu_hour: u64,
    /// The host's electricity cost per kWh, in payment-token base units (for spot profit).
    pub electricity_cost_per_kwh: u64,
    pub network: MachineNetwork,
    /// Thousandths of a CPU core the machine gives its leases in all (0: none; only bids that
    /// reserve no CPU fit).
    pub cpu_milli: u32,
    /// MiB of memory the machine gives its leases in all (0: none, as for CPU).
    pub memory_mib: u32,
}

/// A host's server in one market. Its fixed fields are [`MachineData`]'s (`machine.gpus`
/// reads through `Deref`); the declaration's variable parts and its status follow.
#[account]
#[derive(InitSpace, Debug)]
pub struct Machine {
    pub data: MachineData,
    pub status: MachineStatus,
    pub network: MachineNetwork,
    /// The fatal GPU fault its agent reported, which paused the machine; cleared when the owner
    /// resumes it (after servicing the GPU).
    pub fault: Option<MachineFault>,
}

/// A machine's fixed fields. Plain old data, keys first (the agent filters machines by
/// `market` at offset 8), then widest first so that `repr(C)` adds no padding: Borsh reads and
/// writes it as one copy (`pod_borsh!`), where the derived code took one call per field.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "idl-build", derive(AnchorSerialize, AnchorDeserialize))]
#[repr(C)]
pub struct MachineData {
    pub market: Pubkey,
    pub owner: Pubkey,
    pub agent: Pubkey,
    /// Chosen by the owner, so one owner can register several machines.
    pub id: u64,
    pub price_floor_per_gpu_hour: u64,
    pub electricity_cost_per_kwh: u64,
    pub registered_at: i64,
    pub last_heartbeat: i64,
    pub evidence_since: i64,
    /// The stake this machine bonds: the market's `min_host_stake` when it was registered,
    /// never changed after (a later rise of the parameter binds new machines only, so it cannot
    /// trap a host's stake), and what one slash of it takes its share of.
    pub bond: u64,
    /// What its leases' proofs accrued and `claim_pay` has not paid yet: the host's pay, and
    /// the protocol's fee on it (both still in the payment vault, counted in the market's
    /// `total_escrow`). Proofs write only the machine and its leases, never an account every
    /// machine shares.
    pub unclaimed_pay: u64,
    pub unclaimed_fee: u64,
    /// The machine's spot book (a `BidBook` account), set by `init_spot_book`.
    pub spot_book: Pubkey,
    /// The queue bid its GPUs are held for, if any (`reserve`).
    pub reservation: Reservation,
    /// How far its agent's walk of a book got (`walk_book`), for `allocate` to rely on.
    pub walk: BookWalk,
    /// Thousandths of a CPU core and MiB of memory the machine gives its leases in all.
    pub cpu_milli: u32,
    pub memory_mib: u32,
    /// Of those, what running leases hold.
    pub used_cpu_milli: u32,
    pub used_memory_mib: u32,
    /// Billing intervals of its leases it never proved (host silence), ever.
    pub missed_intervals: u32,
    /// Proofs whose peak power exceeded the agreed limit, ever.
    pub violations: u32,
    /// Evidence not yet used by a slash: skipped intervals and power-limit violations since
    /// `evidence_since` (evidence older than the market's window expires).
    pub unslashed_missed: u32,
    pub unslashed_violations: u32,
    pub gpus: GpuTable,
    /// GiB of each GPU held by running leases.
    pub used_gib: GibTable,
    /// The overclock terms each GPU runs while leases hold some of it: a GPU has one power
    /// limit and one set of clocks, so leases share a GPU only when they agree on them.
    pub gpu_terms: TermsTable,
    /// Bit `g`: GPU `g` is held by a spot lease (queue bids may preempt it).
    pub spot_gpus: u16,
    /// Leases running on the machine.
    pub leases: u16,
    pub region: [u8; REGION_LEN],
    pub gpu_count: u8,
    pub cached_image_count: u8,
    pub cached_images: ImageTable,
    pub bump: u8,
    /// 1: no GPU of the machine is shared between leases. Its agent cannot confine a lease to a
    /// GiB slice of a GPU (the host has no NVIDIA MPS) and said so (`set_whole_gpus`): a lease
    /// that asks less than a GPU's memory gets that GPU alone.
    pub whole_gpus: u8,
}

// SAFETY: see `account_data!`; the size is pinned here.
crate::state::account_data!(Machine, MachineData);
const _: () = assert!(
    core::mem::size_of::<MachineData>()
        == 4 * 32
            + 9 * 8
            + core::mem::size_of::<Reservation>()
            + core::mem::size_of::<BookWalk>()
            + 8 * 4
            + core::mem::size_of::<GpuTable>()
            + 2 * MAX_GPUS
            + core::mem::size_of::<TermsTable>()
            + 2 * 2
            + REGION_LEN
            + 2
            + 32 * MAX_CACHED_IMAGES
            + 2
);

/// A fatal GPU fault as the machine's agent reported it (`report_fault`).
#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, Debug, PartialEq, Eq, InitSpace)]
pub struct MachineFault {
    /// The machine's GPU (its index in the machine's GPU list).
    pub gpu: u8,
    /// The driver's Xid error code (NVIDIA's catalogue), or 0 where the driver gave none.
    pub xid: u32,
    /// When the report landed (the cluster's clock).
    pub at: i64,
}

impl Machine {
    /// Checks `terms` (its region one `market` lists, or none) and writes them into the account.
    pub fn apply_terms(&mut self, terms: &MachineTerms, market: &Market) -> Result<()> {
        market.region_bit(&terms.region)?;
        let n = terms.gpus.len();
        require!((1..=MAX_GPUS).contains(&n), MarketError::BadGpuCount);
        for (i, gpu) in terms.gpus.iter().enumerate() {
            require!(
                terms.gpus[..i].iter().all(|g| g.uuid != gpu.uuid),
                MarketError::DuplicateGpu
            );
            require!(
                (gpu.class as usize) < crate::state::GPU_CLASSES,
                MarketError::UnknownGpuClass
            );
            require!(gpu.memory_gib > 0, MarketError::BadGpuMemory);
            gpu.limits()
                .validate()
                .map_err(|_| error!(MarketError::BadOverclockRange))?;
        }
        self.agent = terms.agent;
        self.region = terms.region;
        self.gpu_count = n as u8;
        self.gpus = GpuTable::default();
        self.gpus[..n].copy_from_slice(&terms.gpus);
        self.price_floor_per_gpu_hour = terms.price_floor_per_gpu_hour;
        self.electricity_cost_per_kwh = terms.electricity_cost_per_kwh;
        terms.network.validate()?;
        self.network = terms.network.clone();
        // Lowering these below what leases hold leaves nothing free until those end.
        self.cpu_milli = terms.cpu_milli;
        self.memory_mib = terms.memory_mib;
        Ok(())
    }

    /// Declares `images` (sha256 digests, at most [`MAX_CACHED_IMAGES`]) as the images the
    /// machine has cached, in place of those it declared before.
    pub fn set_cached_images(&mut self, images: &[[u8; 32]]) -> Result<()> {
        require!(
            images.len() <= MAX_CACHED_IMAGES,
            MarketError::TooManyCachedImages
        );
        self.cached_image_count = images.len() as u8;
        self.cached_images = ImageTable::default();
        self.cached_images[..images.len()].copy_from_slice(images);
        Ok(())
    }

    /// The terms the machine declares now: what `update_machine` takes, changed where a host
    /// changes them.
    pub fn terms(&self) -> MachineTerms {
        MachineTerms {
            agent: self.agent,
            region: self.region,
            gpus: self.gpus().to_vec(),
            price_floor_per_gpu_hour: self.price_floor_per_gpu_hour,
            electricity_cost_per_kwh: self.electricity_cost_per_kwh,
            network: self.network.clone(),
            cpu_milli: self.cpu_milli,
            memory_mib: self.memory_mib,
        }
    }

    /// What the machine offers bids of `kind` at `now`, for the fit rule: each GPU's class,
    /// group, memory, free GiB and the terms it runs while shared (GiB held by the lease in
    /// `freed` count as free), the host's floor (per GPU-day for spot bids) and, for queue bids,
    /// the market's reserve price of each class on the machine.
    pub fn offer(&self, market: &Market, kind: BidKind, now: i64, freed: &Freed) -> Result<Offer> {
        self.offer_without(market, kind, now, freed, 0, self.host())
    }

    /// What the machine offers the bids of `kind` at `now` ([`Machine::offer`], with `freed`)
    /// and, while its reservation binds, what it offers those that would run past its start.
    pub fn offers(
        &self,
        market: &Market,
        kind: BidKind,
        now: i64,
        freed: &Freed,
    ) -> Result<Offers> {
        let reservation = &self.reservation;
        let after = if reservation.binds(now, market.silence_window_secs()) {
            let room = reservation.room_after(self.host());
            let after = self.offer_without(market, kind, now, freed, reservation.gpus, room)?;
            Some((reservation.bid, reservation.start, after))
        } else {
            None
        };
        Ok(Offers {
            now: self.offer(market, kind, now, freed)?,
            after,
        })
    }

    /// [`Machine::offer`] with GPUs `off` (a mask) taken out and at most `room` of CPU and
    /// memory free.
    fn offer_without(
        &self,
        market: &Market,
        kind: BidKind,
        now: i64,
        freed: &Freed,
        off: u16,
        room: Host,
    ) -> Result<Offer> {
        // Whole GPUs only: a GPU holding a lease offers nothing to another (a pass of its own,
        // so that the common case costs one test, not one per GPU).
        let off = match self.whole_gpus != 0 {
            true => (0..self.gpu_count as usize)
                .filter(|&g| self.used_gib(g, freed) > 0)
                .fold(off, |mask, g| mask | 1 << g),
            false => off,
        };
        let gpus = self
            .gpus()
            .iter()
            .enumerate()
            .map(|(g, gpu)| {
                let used = self.used_gib(g, freed);
                let free_gib = if off & (1 << g) != 0 {
                    0
                } else {
                    gpu.memory_gib.saturating_sub(used)
                };
                GpuOffer {
                    class: gpu.class,
                    topology_group: gpu.topology_group,
                    memory_gib: gpu.memory_gib,
                    free_gib,
                    limits: gpu.limits(),
                    running: (used > 0).then(|| self.gpu_terms[g].to_core()),
                }
            })
            .collect();
        let mut reserve = [0u64; GPU_CLASSES];
        let floor = match kind {
            BidKind::Queue => {
                let mut priced = 0u16;
                for gpu in self.gpus() {
                    if priced & (1 << gpu.class) == 0 {
                        reserve[gpu.class as usize] = market.reserve_price(gpu.class, now)?;
                        priced |= 1 << gpu.class;
                    }
                }
                self.price_floor_per_gpu_hour
            }
            BidKind::Spot => self.price_floor_per_gpu_hour.saturating_mul(24),
        };
        let free = self.host().less(self.host_used().less(freed.host));
        let free = Host {
            cpu_milli: free.cpu_milli.min(room.cpu_milli),
            memory_mib: free.memory_mib.min(room.memory_mib),
        };
        Ok(Offer::new(
            gpus,
            self.status == MachineStatus::Active,
            self.network.room(self.host()),
            free,
            now,
            floor,
            reserve,
        )
        .in_region(self.region, market.region_bit(&self.region).unwrap_or(0)))
    }

    /// GPUs this machine offers to the market: its count until it retires. A pause does not
    /// move the count, so a host cannot raise the reserve price by pausing machines.
    pub fn offered(&self) -> i64 {
        if self.status != MachineStatus::Retired {
            self.gpu_count as i64
        } else {
            0
        }
    }
}

impl MachineData {
    /// What a lease of `gpus` GPUs of `gib_per_gpu` that asked `asked` holds here:
    /// `Offer::held`, the rule the fit checked.
    pub fn lease_host(&self, asked: Host, gpus: u8, gib_per_gpu: u16) -> Host {
        let total_gib = self.gpus[..self.gpu_count as usize]
            .iter()
            .map(|g| g.memory_gib as u32)
            .sum();
        asked.or_share(self.host(), gpus as u32 * gib_per_gpu as u32, total_gib)
    }

    /// The CPU and memory the machine gives its leases in all.
    pub fn host(&self) -> Host {
        Host {
            cpu_milli: self.cpu_milli,
            memory_mib: self.memory_mib,
        }
    }

    /// Of [`Machine::host`], what running leases hold.
    pub fn host_used(&self) -> Host {
        Host {
            cpu_milli: self.used_cpu_milli,
            memory_mib: self.used_memory_mib,
        }
    }

    fn set_host_used(&mut self, used: Host) {
        self.used_cpu_milli = used.cpu_milli;
        self.used_memory_mib = used.memory_mib;
    }

    pub fn gpus(&self) -> &[GpuSpec] {
        &self.gpus[..self.gpu_count as usize]
    }

    /// GiB of GPU `g` that leases hold, not counting a lease in `freed` (about to end).
    fn used_gib(&self, g: usize, freed: &Freed) -> u16 {
        self.used_gib[g].saturating_sub(freed.gib_on(g))
    }

    /// Holds `gib` on each of `gpus` and `host` of the machine's CPU and memory for a lease (of
    /// kind spot when `spot`) whose `i`-th GPU runs `terms(i)`; a GPU already in use must run
    /// the same terms.
    pub fn take(
        &mut self,
        gpus: &[u8],
        gib: u16,
        host: Host,
        spot: bool,
        terms: impl Fn(usize) -> OverclockTerms,
    ) -> Result<()> {
        for (i, &g) in gpus.iter().enumerate() {
            let g_terms = &mut self.gpu_terms[g as usize];
            let used = &mut self.used_gib[g as usize];
            if *used == 0 {
                *g_terms = terms(i);
            }
            require!(*g_terms == terms(i), MarketError::GpuCannotServe);
            *used = used.checked_add(gib).ok_or(MarketError::Overflow)?;
            if spot {
                self.spot_gpus |= 1 << g;
            }
        }
        let used = self.host_used().checked_add(host);
        self.set_host_used(used.ok_or(MarketError::Overflow)?);
        self.leases = self.leases.checked_add(1).ok_or(MarketError::Overflow)?;
        Ok(())
    }

    /// Frees what `take` held.
    pub fn release(&mut self, gpus: &[u8], gib: u16, host: Host, spot: bool) -> Result<()> {
        for &g in gpus {
            let used = &mut self.used_gib[g as usize];
            *used = used.checked_sub(gib).ok_or(MarketError::Overflow)?;
            if *used == 0 {
                self.gpu_terms[g as usize] = OverclockTerms::default();
            }
            if spot {
                self.spot_gpus &= !(1 << g);
            }
        }
        let used = self.host_used().checked_sub(host);
        self.set_host_used(used.ok_or(MarketError::Overflow)?);
        self.leases = self.leases.checked_sub(1).ok_or(MarketError::Overflow)?;
        Ok(())
    }

    /// Counts intervals a client proved silent (`reclaim_escrow`, which slashes for them at
    /// once): a statistic, not evidence for `slash`.
    pub fn record_silence(&mut self, missed: u32) -> Result<()> {
        self.missed_intervals = self
            .missed_intervals
            .checked_add(missed)
            .ok_or(MarketError::Overflow)?;
        Ok(())
    }

    /// Drops evidence older than the market's window; what is left is current.
    pub fn expire_evidence(&mut self, now: i64, market: &Market) {
        if now
            > self
                .evidence_since
                .saturating_add(market.evidence_window_secs())
        {
            self.unslashed_missed = 0;
            self.unslashed_violations = 0;
        }
        if self.unslashed_missed == 0 && self.unslashed_violations == 0 {
            self.evidence_since = now;
        }
    }

    /// The pieces of evidence `slash` would use at `now` (skipped intervals and power-limit
    /// violations still inside the market's window), or `None` below the market's
    /// `slash_evidence`: what `slash` checks, for those who decide whether to send it.
    pub fn slashable_evidence(&self, now: i64, market: &Market) -> Option<u32> {
        let expired = now
            > self
                .evidence_since
                .saturating_add(market.evidence_window_secs());
        let units = if expired {
            0
        } else {
            self.unslashed_missed
                .saturating_add(self.unslashed_violations)
        };
        (units >= (market.params.slash_evidence as u32).max(1)).then_some(units)
    }

    /// Records intervals a proof skipped (never paid) as evidence for `slash`.
    pub fn record_missed(&mut self, missed: u32, now: i64, market: &Market) -> Result<()> {
        self.record_silence(missed)?;
        self.expire_evidence(now, market);
        self.unslashed_missed = self
            .unslashed_missed
            .checked_add(missed)
            .ok_or(MarketError::Overflow)?;
        Ok(())
    }

    /// Records a proof with power-limit violations as evidence for `slash`.
    pub fn record_violation(&mut self, now: i64, market: &Market) -> Result<()> {
        self.violations = self
            .violations
            .checked_add(1)
            .ok_or(MarketError::Overflow)?;
        self.expire_evidence(now, market);
        self.unslashed_violations = self
            .unslashed_violations
            .checked_add(1)
            .ok_or(MarketError::Overflow)?;
        Ok(())
    }
}

/// GPUs, CPU and memory that a check may treat as free: those of a lease that is about to end.
#[derive(Default)]
pub struct Freed {
    pub gpus: u16,
    pub gib: u16,
    pub host: Host,
}

impl Freed {
    /// Everything: the machine as it is with no lease running.
    pub fn all() -> Freed {
        Freed {
            gpus: u16::MAX,
            gib: u16::MAX,
            host: Host {
                cpu_milli: u32::MAX,
                memory_mib: u32::MAX,
            },
        }
    }

    fn gib_on(&self, g: usize) -> u16 {
        if self.gpus & (1 << g) != 0 {
            self.gib
        } else {
            0
        }
    }
}

#[cfg(all(test, not(feature = "idl-build")))]
mod tests {
    use super::*;
    use anchor_lang::prelude::borsh;

    /// The one-copy encoding is byte for byte what Borsh writes field by field.
    #[test]
    fn pod_borsh_is_the_derived_encoding() {
        let gpu = GpuSpec {
            uuid: [7; 16],
            class: 3,
            topology_group: 1,
            memory_gib: 80,
            power_w: [100, 700],
            core_lock_mhz: [210, 1_980],
            mem_lock_mhz: [0, 0],
            core_offset_mhz: [-200, 300],
            mem_offset_mhz: [-1, 1_500],
        };
        let fields = (
            gpu.uuid,
            gpu.class,
            gpu.topology_group,
            gpu.memory_gib,
            gpu.power_w,
            gpu.core_lock_mhz,
            gpu.mem_lock_mhz,
            gpu.core_offset_mhz,
            gpu.mem_offset_mhz,
        );
        let bytes = borsh::to_vec(&gpu).unwrap();
        assert_eq!(bytes, borsh::to_vec(&fields).unwrap());
        assert_eq!(borsh::from_slice::<GpuSpec>(&bytes).unwrap(), gpu);
        let terms = OverclockTerms {
            power_limit_w: 350,
            core_lock_mhz: 1_500,
            mem_lock_mhz: 0,
            core_offset_mhz: -100,
            mem_offset_mhz: 200,
        };
        let fields = (350u16, 1_500u16, 0u16, -100i16, 200i16);
        let bytes = borsh::to_vec(&terms).unwrap();
        assert_eq!(bytes, borsh::to_vec(&fields).unwrap());
        assert_eq!(borsh::from_slice::<OverclockTerms>(&bytes).unwrap(), terms);
        // A table is its elements one after another, as Borsh writes an array of them.
        let mut gpus = GpuTable::default();
        gpus[1] = gpu;
        let elements: Vec<_> = gpus
            .iter()
            .flat_map(|g| borsh::to_vec(g).unwrap())
            .collect();
        assert_eq!(borsh::to_vec(&gpus).unwrap(), elements);
        assert_eq!(borsh::from_slice::<GpuTable>(&elements).unwrap(), gpus);
        let mut gib = GibTable::default();
        gib[15] = 0x1234;
        let elements: Vec<_> = gib.iter().flat_map(|g| g.to_le_bytes()).collect();
        assert_eq!(borsh::to_vec(&gib).unwrap(), elements);
        assert_eq!(borsh::from_slice::<GibTable>(&elements).unwrap(), gib);
    }
}
