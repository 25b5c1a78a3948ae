//! `gpu-market-agent detect`: the GPUs file (`gpu_market_sdk::gpus`) for the GPUs the backend
//! finds, ready for `gpu-market host register --gpus` (or `host update`).

use std::collections::BTreeMap;

use gpu_market_sdk::gpus::{format_uuid, GpuClassRef, GpuEntry, GpusFile};

use crate::gpu::GpuInfo;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DetectError {
    #[error("no GPU found")]
    NoGpu,
    #[error("GPU {index} ({name}): its market class is unknown; add \"{name}\" = <class> under [gpu.classes] in the configuration")]
    UnknownClass { index: u32, name: String },
}

/// The GPUs file for `gpus`: classes from the backend or, by model name, from `classes`;
/// topology groups from the backend, else 0 (one group), which the text's header asks the
/// operator to check.
pub fn gpus_file(gpus: &[GpuInfo], classes: &BTreeMap<String, u8>) -> Result<String, DetectError> {
    if gpus.is_empty() {
        return Err(DetectError::NoGpu);
    }
    let mut grouped = true;
    let gpu = gpus
        .iter()
        .map(|g| {
            let class = g
                .class
                .or_else(|| classes.get(&g.name).copied())
                .ok_or_else(|| DetectError::UnknownClass {
                    index: g.index,
                    name: g.name.clone(),
                })?;
            grouped &= g.topology_group.is_some();
            let l = &g.limits;
            Ok(GpuEntry {
                uuid: format_uuid(&g.uuid),
                class: GpuClassRef::Number(class),
                memory_gib: g.memory_gib(),
                topology_group: g.topology_group.unwrap_or(0),
                power_w: [l.power_w.min, l.power_w.max],
                core_lock_mhz: [l.core_lock_mhz.min, l.core_lock_mhz.max],
                mem_lock_mhz: [l.mem_lock_mhz.min, l.mem_lock_mhz.max],
                core_offset_mhz: [l.core_offset_mhz.min, l.core_offset_mhz.max],
                mem_offset_mhz: [l.mem_offset_mhz.min, l.mem_offset_mhz.max],
            })
        })
        .collect::<Result<Vec<_>, DetectError>>()?;
    let header = if grouped {
        "# GPUs as the agent detected them.\n"
    } else {
        "# GPUs as the agent detected them. topology_group is 0 for all: give the GPUs of one\n\
         # NVLink island or PCIe switch (see `nvidia-smi topo -m`) the same group number, and\n\
         # lower the power_w maximum to what the host allows.\n"
    };
    let body = toml::to_string(&GpusFile { gpu }).expect("a GPUs file serialises");
    Ok(format!("{header}{body}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SimulatedGpuConfig;
    use crate::gpu::simulated::{SimulatedGpu, TokioTime};
    use crate::gpu::GpuBackend;
    use gpu_market_core::overclock::{GpuLimits, Range};
    use std::sync::Arc;

    fn simulated(class: u8, topology_group: u8) -> SimulatedGpuConfig {
        SimulatedGpuConfig {
            class,
            memory_gib: 24,
            topology_group,
            limits: GpuLimits {
                power_w: Range { min: 150, max: 450 },
                core_lock_mhz: Range {
                    min: 210,
                    max: 2_520,
                },
                mem_lock_mhz: Range { min: 0, max: 0 },
                core_offset_mhz: Range {
                    min: -200,
                    max: 200,
                },
                mem_offset_mhz: Range { min: 0, max: 0 },
            },
            default_power_w: 350,
        }
    }

    #[tokio::test]
    async fn the_file_round_trips_into_the_programs_gpu_specs() {
        let gpus = SimulatedGpu::new(
            &[simulated(0, 0), simulated(1, 1)],
            Arc::new(TokioTime::new()),
        );
        let text = gpus_file(&gpus.gpus(), &BTreeMap::new()).unwrap();
        let file: GpusFile = toml::from_str(&text).unwrap();
        let classes: Vec<_> = file.gpu.iter().map(|g| g.class.clone()).collect();
        assert_eq!(classes, [GpuClassRef::Number(0), GpuClassRef::Number(1)]);
        let specs: Vec<_> = file.gpu.iter().map(|g| g.spec(0).unwrap()).collect();
        assert_eq!(specs.len(), 2);
        assert_eq!(specs[1].topology_group, 1);
        assert_eq!(specs[0].memory_gib, 24);
        assert_eq!(specs[0].power_w, [150, 450]);
        assert_eq!(specs[0].core_offset_mhz, [-200, 200]);
        assert_eq!(specs[0].uuid, gpus.gpus()[0].uuid);
        assert!(!text.contains("nvidia-smi topo"));
    }

    #[tokio::test]
    async fn nvml_gpus_take_their_class_by_model_name_or_fail_clearly() {
        let gpus = SimulatedGpu::new(&[simulated(0, 0)], Arc::new(TokioTime::new()));
        let mut info = gpus.gpus();
        // What NVML reports: a model name, no class, no group.
        info[0].class = None;
        info[0].topology_group = None;
        info[0].name = "NVIDIA H100 80GB HBM3".into();
        let e = gpus_file(&info, &BTreeMap::new()).unwrap_err();
        assert!(
            matches!(e, DetectError::UnknownClass { index: 0, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("[gpu.classes]"));
        let classes = [("NVIDIA H100 80GB HBM3".to_string(), 3)].into();
        let text = gpus_file(&info, &classes).unwrap();
        assert!(text.contains("nvidia-smi topo"), "asks for the groups");
        let file: GpusFile = toml::from_str(&text).unwrap();
        assert_eq!(file.gpu[0].class, GpuClassRef::Number(3));
        assert_eq!(gpus_file(&[], &classes), Err(DetectError::NoGpu));
    }
}
