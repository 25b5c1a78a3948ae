//! Per-GPU overclock terms: what a host allows and what a bid asks for.
//!
//! The power limit is mandatory (GigaSPOT takes it as the workload's power draw); clock locks and
//! offsets are optional. A host declares an inclusive range for each; a range of `0..=0` for a
//! lock means the host does not allow that lock.

/// An inclusive range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Range<T> {
    pub min: T,
    pub max: T,
}

impl<T: PartialOrd + Copy> Range<T> {
    pub fn contains(&self, v: T) -> bool {
        self.min <= v && v <= self.max
    }
    pub fn is_ordered(&self) -> bool {
        self.min <= self.max
    }
}

/// What a host allows on one GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GpuLimits {
    pub power_w: Range<u16>,
    pub core_lock_mhz: Range<u16>,
    pub mem_lock_mhz: Range<u16>,
    pub core_offset_mhz: Range<i16>,
    pub mem_offset_mhz: Range<i16>,
}

/// What a bid asks of one GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct OverclockTerms {
    pub power_limit_w: u16,
    pub core_lock_mhz: Option<u16>,
    pub mem_lock_mhz: Option<u16>,
    pub core_offset_mhz: Option<i16>,
    pub mem_offset_mhz: Option<i16>,
}

/// A bid's terms for one GPU however they are kept: the fit rule reads them through this, so a
/// book entry's stored terms (0 for an absent lock or offset) are checked as stored, without a
/// conversion per entry (`allocate` reads up to 4,095 of them).
pub trait Settings {
    fn power_limit_w(&self) -> u16;
    fn core_lock_mhz(&self) -> Option<u16>;
    fn mem_lock_mhz(&self) -> Option<u16>;
    fn core_offset_mhz(&self) -> Option<i16>;
    fn mem_offset_mhz(&self) -> Option<i16>;

    /// The terms as one number, equal exactly when the terms are (each optional setting takes
    /// 17 bits: whether it is there, and its value): how a machine's offer finds the GPUs
    /// already running them in a few steps, whatever way the terms are kept.
    fn key(&self) -> u128 {
        fn opt(v: Option<u16>) -> u128 {
            v.map_or(0, |v| 1 << 16 | v as u128)
        }
        self.power_limit_w() as u128
            | opt(self.core_lock_mhz()) << 16
            | opt(self.mem_lock_mhz()) << 33
            | opt(self.core_offset_mhz().map(|v| v as u16)) << 50
            | opt(self.mem_offset_mhz().map(|v| v as u16)) << 67
    }

    /// Whether these terms are inside `limits` (an absent lock or offset always is).
    fn allowed_by(&self, limits: &GpuLimits) -> bool {
        fn opt_in<T: PartialOrd + Copy>(v: Option<T>, r: Range<T>) -> bool {
            v.is_none_or(|v| r.contains(v))
        }
        limits.power_w.contains(self.power_limit_w())
            && opt_in(self.core_lock_mhz(), limits.core_lock_mhz)
            && opt_in(self.mem_lock_mhz(), limits.mem_lock_mhz)
            && opt_in(self.core_offset_mhz(), limits.core_offset_mhz)
            && opt_in(self.mem_offset_mhz(), limits.mem_offset_mhz)
    }

    /// The terms themselves.
    fn terms(&self) -> OverclockTerms {
        OverclockTerms {
            power_limit_w: self.power_limit_w(),
            core_lock_mhz: self.core_lock_mhz(),
            mem_lock_mhz: self.mem_lock_mhz(),
            core_offset_mhz: self.core_offset_mhz(),
            mem_offset_mhz: self.mem_offset_mhz(),
        }
    }
}

impl Settings for OverclockTerms {
    fn power_limit_w(&self) -> u16 {
        self.power_limit_w
    }
    fn core_lock_mhz(&self) -> Option<u16> {
        self.core_lock_mhz
    }
    fn mem_lock_mhz(&self) -> Option<u16> {
        self.mem_lock_mhz
    }
    fn core_offset_mhz(&self) -> Option<i16> {
        self.core_offset_mhz
    }
    fn mem_offset_mhz(&self) -> Option<i16> {
        self.mem_offset_mhz
    }
    fn terms(&self) -> OverclockTerms {
        *self
    }
}

/// The first term that is out of range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverclockError {
    /// A host's range whose minimum is above its maximum, or a zero power limit.
    BadRange,
    PowerLimit,
    CoreLock,
    MemLock,
    CoreOffset,
    MemOffset,
}

impl core::fmt::Display for OverclockError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            OverclockError::BadRange => "a declared range has its minimum above its maximum",
            OverclockError::PowerLimit => "the power limit is outside the GPU's range",
            OverclockError::CoreLock => "the core clock lock is outside the GPU's range",
            OverclockError::MemLock => "the memory clock lock is outside the GPU's range",
            OverclockError::CoreOffset => "the core clock offset is outside the GPU's range",
            OverclockError::MemOffset => "the memory clock offset is outside the GPU's range",
        })
    }
}

impl std::error::Error for OverclockError {}

impl GpuLimits {
    /// A GPU whose clocks cannot be set (no lock, no offset), only its power limit within
    /// `power_w`.
    pub const fn power_only(power_w: Range<u16>) -> GpuLimits {
        GpuLimits {
            power_w,
            core_lock_mhz: Range { min: 0, max: 0 },
            mem_lock_mhz: Range { min: 0, max: 0 },
            core_offset_mhz: Range { min: 0, max: 0 },
            mem_offset_mhz: Range { min: 0, max: 0 },
        }
    }

    /// A host's declaration is usable: every range ordered, the power range above zero watts.
    pub fn validate(&self) -> Result<(), OverclockError> {
        let ordered = self.power_w.is_ordered()
            && self.core_lock_mhz.is_ordered()
            && self.mem_lock_mhz.is_ordered()
            && self.core_offset_mhz.is_ordered()
            && self.mem_offset_mhz.is_ordered();
        if !ordered || self.power_w.min == 0 {
            return Err(OverclockError::BadRange);
        }
        Ok(())
    }

    /// Whether `s` can be applied on this GPU; the first offending term otherwise.
    pub fn check(&self, s: &OverclockTerms) -> Result<(), OverclockError> {
        fn opt<T: PartialOrd + Copy>(
            v: Option<T>,
            r: Range<T>,
            e: OverclockError,
        ) -> Result<(), OverclockError> {
            match v {
                Some(v) if !r.contains(v) => Err(e),
                _ => Ok(()),
            }
        }
        if !self.power_w.contains(s.power_limit_w) {
            return Err(OverclockError::PowerLimit);
        }
        opt(
            s.core_lock_mhz,
            self.core_lock_mhz,
            OverclockError::CoreLock,
        )?;
        opt(s.mem_lock_mhz, self.mem_lock_mhz, OverclockError::MemLock)?;
        opt(
            s.core_offset_mhz,
            self.core_offset_mhz,
            OverclockError::CoreOffset,
        )?;
        opt(
            s.mem_offset_mhz,
            self.mem_offset_mhz,
            OverclockError::MemOffset,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rtx4090() -> GpuLimits {
        GpuLimits {
            power_w: Range { min: 150, max: 450 },
            core_lock_mhz: Range {
                min: 210,
                max: 2_520,
            },
            mem_lock_mhz: Range {
                min: 405,
                max: 10_501,
            },
            core_offset_mhz: Range {
                min: -200,
                max: 200,
            },
            mem_offset_mhz: Range { min: 0, max: 1_500 },
        }
    }

    #[test]
    fn settings_inside_every_range_pass() {
        let s = OverclockTerms {
            power_limit_w: 280,
            core_lock_mhz: Some(1_800),
            mem_lock_mhz: None,
            core_offset_mhz: Some(-100),
            mem_offset_mhz: Some(1_000),
        };
        assert_eq!(rtx4090().check(&s), Ok(()));
        assert_eq!(rtx4090().validate(), Ok(()));
    }

    #[test]
    fn the_first_term_out_of_range_is_named() {
        let base = OverclockTerms {
            power_limit_w: 300,
            ..Default::default()
        };
        let l = rtx4090();
        assert_eq!(
            l.check(&OverclockTerms {
                power_limit_w: 451,
                ..base
            }),
            Err(OverclockError::PowerLimit)
        );
        assert_eq!(
            l.check(&OverclockTerms {
                power_limit_w: 0,
                ..base
            }),
            Err(OverclockError::PowerLimit)
        );
        assert_eq!(
            l.check(&OverclockTerms {
                core_lock_mhz: Some(3_000),
                ..base
            }),
            Err(OverclockError::CoreLock)
        );
        assert_eq!(
            l.check(&OverclockTerms {
                mem_lock_mhz: Some(1),
                ..base
            }),
            Err(OverclockError::MemLock)
        );
        assert_eq!(
            l.check(&OverclockTerms {
                core_offset_mhz: Some(-201),
                ..base
            }),
            Err(OverclockError::CoreOffset)
        );
        assert_eq!(
            l.check(&OverclockTerms {
                mem_offset_mhz: Some(-1),
                ..base
            }),
            Err(OverclockError::MemOffset)
        );
        // A lock the host does not allow (range 0..=0) refuses any lock but allows none.
        let no_locks = GpuLimits {
            core_lock_mhz: Range { min: 0, max: 0 },
            ..l
        };
        assert_eq!(
            no_locks.check(&OverclockTerms {
                core_lock_mhz: Some(1_000),
                ..base
            }),
            Err(OverclockError::CoreLock)
        );
        assert_eq!(no_locks.check(&base), Ok(()));
    }

    #[test]
    fn bad_declarations_are_refused() {
        let l = rtx4090();
        assert_eq!(
            GpuLimits {
                power_w: Range { min: 500, max: 450 },
                ..l
            }
            .validate(),
            Err(OverclockError::BadRange)
        );
        assert_eq!(
            GpuLimits {
                power_w: Range { min: 0, max: 450 },
                ..l
            }
            .validate(),
            Err(OverclockError::BadRange)
        );
        assert_eq!(
            GpuLimits {
                core_offset_mhz: Range { min: 10, max: -10 },
                ..l
            }
            .validate(),
            Err(OverclockError::BadRange)
        );
    }

    proptest! {
        #[test]
        fn a_passing_power_limit_is_inside_the_declared_range(min in 1u16..1000, span in 0u16..1000, p: u16) {
            let l = GpuLimits { power_w: Range { min, max: min.saturating_add(span) }, ..rtx4090() };
            let ok = l.check(&OverclockTerms { power_limit_w: p, ..Default::default() }).is_ok();
            prop_assert_eq!(ok, p >= l.power_w.min && p <= l.power_w.max);
        }
    }
}
