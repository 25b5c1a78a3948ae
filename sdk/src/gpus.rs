//! The GPUs file: how a host describes a machine's GPUs to `gpu-market host register --gpus`,
//! and what `gpu-market-agent detect` writes from the GPUs it finds. TOML (or JSON), a `gpu`
//! list whose entries mirror the program's `GpuSpec`, a GPU's class given by number or by the
//! model name its market gives it (`class = "H100"`).

use gpu_market::state::GpuSpec;
use serde::{Deserialize, Serialize};

/// One GPU. Ranges are `[min, max]`; a `[0, 0]` lock range forbids that lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuEntry {
    /// As NVML prints it (`GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`) or 32 hex digits.
    pub uuid: String,
    pub class: GpuClassRef,
    pub memory_gib: u16,
    #[serde(default)]
    pub topology_group: u8,
    pub power_w: [u16; 2],
    #[serde(default)]
    pub core_lock_mhz: [u16; 2],
    #[serde(default)]
    pub mem_lock_mhz: [u16; 2],
    #[serde(default)]
    pub core_offset_mhz: [i16; 2],
    #[serde(default)]
    pub mem_offset_mhz: [i16; 2],
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpusFile {
    pub gpu: Vec<GpuEntry>,
}

/// A GPU UUID in NVML's text form, or 32 hex digits (dashes ignored).
pub fn parse_uuid(text: &str) -> Option<[u8; 16]> {
    let trimmed = text.trim();
    let hex: String = trimmed
        .strip_prefix("GPU-")
        .unwrap_or(trimmed)
        .chars()
        .filter(|c| *c != '-')
        .collect();
    if hex.len() != 32 || !hex.is_ascii() {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// NVML's text form of a GPU UUID.
pub fn format_uuid(uuid: &[u8; 16]) -> String {
    let h: String = uuid.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// A GPU's class as a GPUs file gives it: its number (`class = 0`), or the model name the market
/// gives that class (`class = "H100"`: `gpu-market market name-class`), which `host register`
/// and `host update` look up in the market, in any case.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum GpuClassRef {
    Number(u8),
    Name(String),
}

impl GpuEntry {
    /// The program's form, its class `class` (the entry's, looked up by the caller); `None`
    /// when the UUID is not one.
    pub fn spec(&self, class: u8) -> Option<GpuSpec> {
        Some(GpuSpec {
            uuid: parse_uuid(&self.uuid)?,
            class,
            topology_group: self.topology_group,
            memory_gib: self.memory_gib,
            power_w: self.power_w,
            core_lock_mhz: self.core_lock_mhz,
            mem_lock_mhz: self.mem_lock_mhz,
            core_offset_mhz: self.core_offset_mhz,
            mem_offset_mhz: self.mem_offset_mhz,
        })
    }
}

impl From<&GpuSpec> for GpuEntry {
    fn from(g: &GpuSpec) -> Self {
        GpuEntry {
            uuid: format_uuid(&g.uuid),
            class: GpuClassRef::Number(g.class),
            memory_gib: g.memory_gib,
            topology_group: g.topology_group,
            power_w: g.power_w,
            core_lock_mhz: g.core_lock_mhz,
            mem_lock_mhz: g.mem_lock_mhz,
            core_offset_mhz: g.core_offset_mhz,
            mem_offset_mhz: g.mem_offset_mhz,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_round_trip_in_nvml_form_and_bad_ones_are_refused() {
        let text = "GPU-01234567-89ab-cdef-0123-456789abcdef";
        let uuid = parse_uuid(text).unwrap();
        assert_eq!(uuid[..2], [0x01, 0x23]);
        assert_eq!(format_uuid(&uuid), text);
        assert_eq!(parse_uuid("0123456789abcdef0123456789abcdef"), Some(uuid));
        assert_eq!(parse_uuid("GPU-0123"), None);
        assert_eq!(parse_uuid(&"zz".repeat(16)), None);
    }

    #[test]
    fn entries_and_specs_convert_both_ways() {
        let spec = GpuSpec {
            uuid: [7; 16],
            class: 2,
            topology_group: 1,
            memory_gib: 80,
            power_w: [150, 700],
            core_lock_mhz: [210, 1_980],
            mem_lock_mhz: [0, 0],
            core_offset_mhz: [-200, 200],
            mem_offset_mhz: [0, 0],
        };
        let entry = GpuEntry::from(&spec);
        assert_eq!(entry.class, GpuClassRef::Number(2));
        assert_eq!(entry.spec(2), Some(spec));
        // A class by name, as a host may write it.
        let named: GpusFile = toml::from_str(
            "[[gpu]]\nuuid = \"GPU-07070707-0707-0707-0707-070707070707\"\nclass = \"H100\"\n\
             memory_gib = 80\npower_w = [150, 700]\n",
        )
        .unwrap();
        assert_eq!(named.gpu[0].class, GpuClassRef::Name("H100".into()));
    }
}
