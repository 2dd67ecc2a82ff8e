//! What a Vulkan (or wgpu) device offers, as data: the renderer consults these fields instead
//! of branching on a device name, so a new device is a new constructor.
//!
//! Invariant: [`SpirvTarget::check`] accepts a verified kernel only if every whole-kernel
//! property (SPIR-V version, threads, shared bytes with the subgroup fallback's scratch,
//! storage buffers, subgroup width) fits the target; per-instruction capabilities (f32
//! atomics) are checked by the writer as it meets them.

use crate::analysis;
use crate::error::{Result, SpirvError};
use poot_kir::Kernel;

/// The most scratch words a thread of the subgroup fallback has: with eight, the tiny
/// llama's 4-token q/k/v kernel (48 reductions, 128 threads, 4 KiB of scratch) takes 6
/// pairs of barriers instead of 48 (99 barriers in all to 15, in its SPIR-V golden).
const MAX_SCRATCH_WORDS: u32 = 8;

/// Bytes of `k`'s own shared arrays.
fn arrays_bytes(k: &Kernel) -> u64 {
    k.shared.iter().map(|s| 4 * u64::from(s.len.max(1))).sum()
}

/// A SPIR-V target and its capabilities.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SpirvTarget {
    /// A name for diagnostics (`vulkan1.2`, `lavapipe`).
    pub name: &'static str,
    /// The SPIR-V version written in the header, `(1, 3)` to `(1, 6)`: 1.3 is the first with
    /// subgroup operations and `StorageBuffer` in the core; from 1.4 on every global variable
    /// is listed in the entry point's interface.
    pub spirv_version: (u8, u8),
    /// The device's subgroup size when it has the `basic`, `arithmetic` and `shuffle` subgroup
    /// operations in compute shaders, and lays subgroups out over consecutive local invocation
    /// indices (full subgroups: `VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT`
    /// or a fixed-size device). A kernel whose `subgroup` equals it uses the native
    /// instructions; any other width (or `None`) uses the shared-memory fallback.
    pub subgroup: Option<u32>,
    /// Native f32 `add` reductions use `OpGroupNonUniformFAdd`, whose order of additions the
    /// device chooses; `false` uses the reference device's butterfly through
    /// `OpGroupNonUniformShuffleXor` instead, bit-exact with it and with the PTX renderer.
    pub native_float_add: bool,
    /// The device has 16-bit storage access (`storageBuffer16BitAccess`). This renderer reads
    /// half-precision data as `u32` words and does not need it; recorded for the planner.
    pub storage16: bool,
    /// The device can add f32 atomically in storage buffers (`shaderBufferFloat32AtomicAdd`
    /// of `VK_EXT_shader_atomic_float`); without it an f32 atomic add on a parameter is
    /// refused.
    pub atomic_float_add: bool,
    /// The same in shared memory (`shaderSharedFloat32AtomicAdd`). naga (the wgpu path)
    /// refuses f32 atomics on work-group memory, so a target whose modules also go through
    /// wgpu leaves this off even where the Vulkan device has it.
    pub shared_atomic_float_add: bool,
    /// Threads per work-group (`maxComputeWorkGroupInvocations`).
    pub max_threads: u32,
    /// Bytes of work-group shared memory (`maxComputeSharedMemorySize`).
    pub max_shared: u32,
    /// Storage buffers one compute shader may bind (`maxPerStageDescriptorStorageBuffers`).
    pub max_storage_buffers: u32,
}

/// How a kernel's subgroup operations and `lane` are rendered on a target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SubgroupMode {
    /// The kernel declares subgroup 1: no subgroup operations, `lane` is 0.
    Single,
    /// The device's subgroups are the kernel's: `GroupNonUniform*` instructions.
    Native(u32),
    /// Subgroups of this width emulated through a shared scratch array and barriers.
    Fallback(u32),
}

impl SpirvTarget {
    /// A desktop Vulkan 1.2 device with 32-wide subgroups (NVIDIA; AMD RDNA and Intel with
    /// a required subgroup size of 32): SPIR-V 1.5, 1024 threads, 32 KiB of shared memory
    /// (the common floor of those vendors), no f32 atomics (an extension).
    pub const fn vulkan12() -> SpirvTarget {
        SpirvTarget {
            name: "vulkan1.2",
            spirv_version: (1, 5),
            subgroup: Some(32),
            native_float_add: true,
            storage16: true,
            atomic_float_add: false,
            shared_atomic_float_add: false,
            max_threads: 1024,
            max_shared: 32 * 1024,
            max_storage_buffers: 1 << 20,
        }
    }

    /// Any Vulkan 1.1 device of desktop class: SPIR-V 1.3, subgroups emulated in shared
    /// memory (so the subgroup width the device happens to have does not matter), 1024
    /// threads, 32 KiB of shared memory, 32 storage buffers per stage (lavapipe's limit, the
    /// smallest among the devices poot runs on), no f32 atomics. The `spirv` bundle target.
    pub const fn portable() -> SpirvTarget {
        SpirvTarget {
            name: "portable",
            spirv_version: (1, 3),
            subgroup: None,
            native_float_add: false,
            storage16: false,
            atomic_float_add: false,
            shared_atomic_float_add: false,
            max_threads: 1024,
            max_shared: 32 * 1024,
            max_storage_buffers: 32,
        }
    }

    /// Mesa's lavapipe (llvmpipe's Vulkan driver) on an AVX2 host, as `vulkaninfo` reports
    /// it (Mesa 22.3): subgroups of 8 (the 256-bit vector width; min = max, so it cannot be
    /// changed), so poot's 32-wide kernels use the shared-memory fallback; SPIR-V 1.3, 1024
    /// threads, 32 KiB of shared memory, 32 storage buffers per stage, f32 atomic add on
    /// buffers (the device has it on shared memory too; see `shared_atomic_float_add`).
    pub const fn lavapipe() -> SpirvTarget {
        SpirvTarget {
            name: "lavapipe",
            spirv_version: (1, 3),
            subgroup: Some(8),
            native_float_add: true,
            storage16: true,
            atomic_float_add: true,
            shared_atomic_float_add: false,
            max_threads: 1024,
            max_shared: 32 * 1024,
            max_storage_buffers: 32,
        }
    }

    /// How `k`'s subgroup operations are rendered here.
    pub(crate) fn mode(&self, k: &Kernel) -> SubgroupMode {
        match (k.subgroup, self.subgroup) {
            (0 | 1, _) => SubgroupMode::Single,
            (w, Some(n)) if w == n => SubgroupMode::Native(w),
            (w, _) => SubgroupMode::Fallback(w),
        }
    }

    /// True when `k`'s subgroup operations use the shared-memory fallback on this target.
    pub fn uses_fallback(&self, k: &Kernel) -> bool {
        matches!(self.mode(k), SubgroupMode::Fallback(_)) && analysis::has_sync(&k.body)
    }

    /// Words of the fallback's scratch each thread of `k` has (0 without the fallback): one
    /// for each value of `k`'s widest run of subgroup operations (`analysis::sync_run`), up
    /// to `MAX_SCRATCH_WORDS` and to what the shared memory left by `k`'s arrays holds, and at
    /// least one. A run publishes as many of its values as there are words behind each pair
    /// of barriers.
    pub fn scratch_words(&self, k: &Kernel) -> u32 {
        if !self.uses_fallback(k) {
            return 0;
        }
        let free = u64::from(self.max_shared).saturating_sub(arrays_bytes(k))
            / (4 * u64::from(k.threads().max(1)));
        let free = u32::try_from(free).unwrap_or(u32::MAX);
        analysis::widest_run(k)
            .min(MAX_SCRATCH_WORDS)
            .min(free)
            .max(1)
    }

    /// Bytes of shared memory `k` takes here: its arrays plus, with the fallback, its scratch
    /// (`scratch_words` a thread).
    pub fn shared_bytes(&self, k: &Kernel) -> u64 {
        arrays_bytes(k) + 4 * u64::from(self.scratch_words(k)) * u64::from(k.threads())
    }

    /// Checks the whole-kernel limits of a verified kernel.
    pub(crate) fn check(&self, k: &Kernel) -> Result<()> {
        let kernel = || k.name.clone();
        let target = || self.name.to_string();
        if !((1, 3)..=(1, 6)).contains(&self.spirv_version) {
            let (major, minor) = self.spirv_version;
            return Err(SpirvError::Unsupported {
                kernel: kernel(),
                what: format!("SPIR-V {major}.{minor} (1.3 to 1.6 are)"),
                target: target(),
            });
        }
        if k.threads() > self.max_threads {
            return Err(SpirvError::Threads {
                kernel: kernel(),
                threads: k.threads(),
                max: self.max_threads,
                target: target(),
            });
        }
        if let SubgroupMode::Fallback(w) = self.mode(k)
            && !w.is_power_of_two()
        {
            return Err(SpirvError::Subgroup {
                kernel: kernel(),
                subgroup: w,
                why: "is not a power of two, which the shared-memory fallback needs".into(),
                target: target(),
            });
        }
        let bytes = self.shared_bytes(k);
        if bytes > u64::from(self.max_shared) {
            return Err(SpirvError::Shared {
                kernel: kernel(),
                bytes,
                max: self.max_shared,
                target: target(),
            });
        }
        let bindings = k.params.len() + 1;
        if bindings > self.max_storage_buffers as usize {
            return Err(SpirvError::Bindings {
                kernel: kernel(),
                params: k.params.len(),
                bindings,
                max: self.max_storage_buffers,
                target: target(),
            });
        }
        Ok(())
    }
}
