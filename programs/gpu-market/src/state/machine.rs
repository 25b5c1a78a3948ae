use anchor_lang::prelude::*;
use gpu_market_core::overclock::{GpuLimits, Range};

use crate::errors::MarketError;

/// Most GPUs one machine offers.
pub const MAX_GPUS: usize = 16;
/// Most image digests a machine advertises as cached (for data affinity).
pub const MAX_CACHED_IMAGES: usize = 8;
/// Bytes of a machine's free-form region label (e.g. "eu-central").
pub const REGION_LEN: usize = 16;

/// Machine status. Stored as a `u8` so the layout is stable; `Retired` is final.
#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, Debug, PartialEq, Eq, InitSpace)]
pub enum MachineStatus {
    Active,
    Paused,
    Retired,
}

/// One GPU as its host declares it.
#[derive(
    AnchorSerialize, AnchorDeserialize, Clone, Copy, Debug, Default, PartialEq, Eq, InitSpace,
)]
pub struct GpuSpec {
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

/// What a host declares about a machine: set at registration, changed by `update_machine`.
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
    /// sha256 digests of the images the machine has cached.
    pub cached_images: Vec<[u8; 32]>,
}

/// A host's server in one market.
#[account]
#[derive(InitSpace, Debug)]
pub struct Machine {
    pub market: Pubkey,
    pub owner: Pubkey,
    pub agent: Pubkey,
    /// Chosen by the owner, so one owner can register several machines.
    pub id: u64,
    pub region: [u8; REGION_LEN],
    pub status: MachineStatus,
    pub gpu_count: u8,
    pub gpus: [GpuSpec; MAX_GPUS],
    pub price_floor_per_gpu_hour: u64,
    pub electricity_cost_per_kwh: u64,
    pub cached_image_count: u8,
    pub cached_images: [[u8; 32]; MAX_CACHED_IMAGES],
    /// The machine's spot book (a `BidBook` account), set by `init_spot_book`.
    pub spot_book: Pubkey,
    pub registered_at: i64,
    pub last_heartbeat: i64,
    pub bump: u8,
}

impl Machine {
    /// Checks `terms` and writes them into the account.
    pub fn apply_terms(&mut self, terms: &MachineTerms) -> Result<()> {
        let n = terms.gpus.len();
        require!((1..=MAX_GPUS).contains(&n), MarketError::BadGpuCount);
        require!(
            terms.cached_images.len() <= MAX_CACHED_IMAGES,
            MarketError::TooManyCachedImages
        );
        for gpu in &terms.gpus {
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
        self.gpus = [GpuSpec::default(); MAX_GPUS];
        self.gpus[..n].copy_from_slice(&terms.gpus);
        self.price_floor_per_gpu_hour = terms.price_floor_per_gpu_hour;
        self.electricity_cost_per_kwh = terms.electricity_cost_per_kwh;
        self.cached_image_count = terms.cached_images.len() as u8;
        self.cached_images = [[0; 32]; MAX_CACHED_IMAGES];
        self.cached_images[..terms.cached_images.len()].copy_from_slice(&terms.cached_images);
        Ok(())
    }

    pub fn gpus(&self) -> &[GpuSpec] {
        &self.gpus[..self.gpu_count as usize]
    }
}
