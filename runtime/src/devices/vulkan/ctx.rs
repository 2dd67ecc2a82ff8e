//! The Vulkan context that the device, its kernels and its recordings share: loader,
//! instance, logical device, compute queue, what the physical device offers, and the poison
//! flag.
//!
//! Invariants: the loader is opened at run time (a machine without `libvulkan` gets
//! `Unavailable`, never a panic); a device without `robustBufferAccess` is never chosen; every
//! fence wait is bounded by `timeout` (it polls for at most `SPIN` of it, then blocks); a
//! failed submission or wait (device loss included) poisons the context, and from then on no
//! call touches the device; objects that pending work could reference are destroyed only once
//! every submission not waited for has signalled its fence (polled for at most `GRACE`, the
//! first time `may_destroy` is asked on the poisoned context), and are leaked otherwise
//! (device loss, or work that does not finish). Destroying them ends the driver's threads
//! for the device: lavapipe crashed at process exit with the device of a timed-out step left
//! alive.

use crate::error::DeviceError;
use ash::vk;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long a fence wait polls before it blocks: about three decode steps of the models we
/// measure (SmolLM2 takes 0.74 ms on the H200). Longer waits, such as a prefill chunk, stop
/// polling after it and sleep in the driver.
const SPIN: Duration = Duration::from_millis(2);

/// How long dropping an object of a poisoned context waits for the submissions that were not
/// waited for (the one that timed out) to finish, before leaking instead of destroying.
const GRACE: Duration = Duration::from_secs(10);

/// What the chosen physical device offers.
pub(super) struct Props {
    pub name: String,
    pub api: u32,
    pub limits: vk::PhysicalDeviceLimits,
    pub memory: vk::PhysicalDeviceMemoryProperties,
    pub subgroup: u32,
    /// A CPU implementation (lavapipe, SwiftShader).
    pub cpu: bool,
    /// Compute shaders get 32-wide subgroups with basic, arithmetic and shuffle operations:
    /// the device runs `spirv-sg32` kernels.
    pub native32: bool,
}

/// The shared context.
pub(super) struct Ctx {
    _entry: ash::Entry,
    instance: ash::Instance,
    pub device: ash::Device,
    pub queue: vk::Queue,
    pub family: u32,
    pub props: Props,
    pub timeout: Duration,
    poisoned: Mutex<Option<String>>,
    /// Fences of submissions not yet waited for successfully.
    inflight: Mutex<Vec<vk::Fence>>,
    /// On a poisoned context: whether every submission finished (decided once, by `quiet`).
    settled: OnceLock<bool>,
}

fn kind_rank(t: vk::PhysicalDeviceType) -> u32 {
    match t {
        vk::PhysicalDeviceType::DISCRETE_GPU => 0,
        vk::PhysicalDeviceType::INTEGRATED_GPU => 1,
        vk::PhysicalDeviceType::VIRTUAL_GPU => 2,
        vk::PhysicalDeviceType::CPU => 3,
        _ => 4,
    }
}

fn unavailable(what: &str, r: vk::Result) -> DeviceError {
    DeviceError::Unavailable(format!("{what}: {r:?}"))
}

impl Ctx {
    /// Opens the best Vulkan device whose name contains `want` (any when `None`): a discrete
    /// GPU before an integrated one before a CPU implementation such as lavapipe.
    pub fn open(want: Option<&str>, timeout: Duration) -> Result<Ctx, DeviceError> {
        // SAFETY: loads the system loader; a missing library is an error, not a crash.
        let entry = unsafe { ash::Entry::load() }.map_err(|e| {
            DeviceError::Unavailable(format!(
                "no Vulkan loader ({e}); install a Vulkan driver (on a CPU-only machine: \
                 apt-get install mesa-vulkan-drivers libvulkan1)"
            ))
        })?;
        let app = vk::ApplicationInfo::default()
            .application_name(c"poot")
            .api_version(vk::make_api_version(0, 1, 2, 0));
        // SAFETY: a valid create info; the instance is destroyed on every error path below.
        let instance = unsafe {
            entry.create_instance(
                &vk::InstanceCreateInfo::default().application_info(&app),
                None,
            )
        }
        .map_err(|r| match r {
            vk::Result::ERROR_INCOMPATIBLE_DRIVER => DeviceError::Unavailable(format!(
                "no Vulkan driver was found (vkCreateInstance: {r:?}); on a CPU-only machine \
                 install one with apt-get install mesa-vulkan-drivers"
            )),
            _ => unavailable("vkCreateInstance", r),
        })?;
        let chosen = choose(&instance, want);
        let (pd, props, family) = match chosen {
            Ok(c) => c,
            Err(e) => {
                // SAFETY: nothing was created from the instance.
                unsafe { instance.destroy_instance(None) };
                return Err(e);
            }
        };
        let prio = [1.0f32];
        let queues = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(family)
            .queue_priorities(&prio)];
        let features = vk::PhysicalDeviceFeatures::default().robust_buffer_access(true);
        let info = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queues)
            .enabled_features(&features);
        // SAFETY: `pd` came from this instance; the feature was checked in `choose`.
        let device = match unsafe { instance.create_device(pd, &info, None) } {
            Ok(d) => d,
            Err(r) => {
                // SAFETY: as above.
                unsafe { instance.destroy_instance(None) };
                return Err(unavailable("vkCreateDevice", r));
            }
        };
        // SAFETY: the family was created with one queue.
        let queue = unsafe { device.get_device_queue(family, 0) };
        Ok(Ctx {
            _entry: entry,
            instance,
            device,
            queue,
            family,
            props,
            timeout,
            poisoned: Mutex::new(None),
            inflight: Mutex::new(Vec::new()),
            settled: OnceLock::new(),
        })
    }

    /// `Ok` while the context is usable; `Lost` naming the first failure afterwards.
    pub fn live(&self) -> Result<(), DeviceError> {
        match self.poisoned.lock().map(|p| p.clone()) {
            Ok(None) => Ok(()),
            Ok(Some(why)) => Err(DeviceError::Lost(format!(
                "the Vulkan device is poisoned by an earlier failure: {why}"
            ))),
            Err(_) => Err(DeviceError::Lost(
                "the Vulkan context lock is poisoned".into(),
            )),
        }
    }

    /// Marks the context unusable because of `e`, and returns `e`.
    pub fn poison(&self, e: DeviceError) -> DeviceError {
        if let Ok(mut p) = self.poisoned.lock()
            && p.is_none()
        {
            *p = Some(e.to_string());
        }
        e
    }

    /// Submits `cb`, signalling `fence`; a failure poisons.
    pub fn submit(&self, cb: vk::CommandBuffer, fence: vk::Fence) -> Result<(), DeviceError> {
        self.live()?;
        let cbs = [cb];
        let submit = [vk::SubmitInfo::default().command_buffers(&cbs)];
        // SAFETY: `cb` is a recorded, not pending command buffer (callers wait for its last
        // submission first) and `fence` is unsignalled.
        unsafe { self.device.queue_submit(self.queue, &submit, fence) }.map_err(|r| {
            self.poison(DeviceError::Lost(format!(
                "vkQueueSubmit on {}: {r:?}",
                self.props.name
            )))
        })?;
        if let Ok(mut f) = self.inflight.lock() {
            f.push(fence);
        }
        Ok(())
    }

    /// Waits for every fence, at most `timeout`; a timeout or failure poisons. The first
    /// `SPIN` of the wait polls the fences instead of sleeping in the driver: a blocking
    /// `vkWaitForFences` wakes tens of microseconds after the device finishes (H200, SmolLM2
    /// decode: 797-848 us per step blocking, 742-747 polling; BENCHMARKS.md), as much as a
    /// tenth of a decode step.
    pub fn wait(&self, fences: &[vk::Fence]) -> Result<(), DeviceError> {
        self.wait_all(fences)?;
        if let Ok(mut f) = self.inflight.lock() {
            f.retain(|x| !fences.contains(x));
        }
        Ok(())
    }

    fn wait_all(&self, fences: &[vk::Fence]) -> Result<(), DeviceError> {
        if fences.is_empty() {
            return Ok(());
        }
        self.live()?;
        let start = Instant::now();
        while start.elapsed() < SPIN.min(self.timeout) {
            let mut done = true;
            for &f in fences {
                // SAFETY: a fence of this device.
                match unsafe { self.device.get_fence_status(f) } {
                    Ok(true) => {}
                    Ok(false) => done = false,
                    Err(r) => {
                        return Err(self.poison(DeviceError::Lost(format!(
                            "vkGetFenceStatus on {}: {r:?}",
                            self.props.name
                        ))));
                    }
                }
            }
            if done {
                return Ok(());
            }
            std::hint::spin_loop();
        }
        let ns = u64::try_from(self.timeout.saturating_sub(start.elapsed()).as_nanos())
            .unwrap_or(u64::MAX);
        // SAFETY: fences of this device.
        match unsafe { self.device.wait_for_fences(fences, true, ns) } {
            Ok(()) => Ok(()),
            Err(vk::Result::TIMEOUT) => Err(self.poison(DeviceError::Timeout(self.timeout))),
            Err(r) => Err(self.poison(DeviceError::Lost(format!(
                "vkWaitForFences on {}: {r:?}",
                self.props.name
            )))),
        }
    }

    /// Resets signalled fences before their next submission.
    pub fn reset(&self, fences: &[vk::Fence]) -> Result<(), DeviceError> {
        // SAFETY: fences of this device, none pending (waited for).
        unsafe { self.device.reset_fences(fences) }
            .map_err(|r| DeviceError::Other(format!("vkResetFences: {r:?}")))
    }

    /// True when objects may be destroyed: the context is live, or it is poisoned and every
    /// submission has finished (`quiet`).
    pub fn may_destroy(&self) -> bool {
        self.live().is_ok() || self.quiet()
    }

    /// On a poisoned context: whether every submission not waited for has signalled its
    /// fence, polled (without the poison check) for at most `GRACE`, decided once. Device loss
    /// or a fence still unsignalled after `GRACE` means no.
    fn quiet(&self) -> bool {
        *self.settled.get_or_init(|| {
            let Ok(fences) = self.inflight.lock().map(|f| f.clone()) else {
                return false;
            };
            let start = Instant::now();
            loop {
                let mut all = true;
                for &f in &fences {
                    // SAFETY: a fence of this device, not destroyed while it is in flight.
                    match unsafe { self.device.get_fence_status(f) } {
                        Ok(true) => {}
                        Ok(false) => all = false,
                        Err(_) => return false,
                    }
                }
                if all {
                    return true;
                }
                if start.elapsed() >= GRACE {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        if !self.may_destroy() {
            // Pending work may still reference the device: leak it.
            return;
        }
        // SAFETY: every object made from the device holds an `Arc<Ctx>`, so they are gone;
        // nothing is pending after the idle wait.
        unsafe {
            let _ = self.device.device_wait_idle();
            self.device.destroy_device(None);
            self.instance.destroy_instance(None);
        }
    }
}

/// The physical device, its properties and its compute queue family.
fn choose(
    instance: &ash::Instance,
    want: Option<&str>,
) -> Result<(vk::PhysicalDevice, Props, u32), DeviceError> {
    // SAFETY: a live instance.
    let devices = unsafe { instance.enumerate_physical_devices() }
        .map_err(|r| unavailable("vkEnumeratePhysicalDevices", r))?;
    let mut refused = Vec::new();
    let mut found = Vec::new();
    for pd in devices {
        // SAFETY: `pd` came from this instance.
        let p = unsafe { instance.get_physical_device_properties(pd) };
        let name = p
            .device_name_as_c_str()
            .map(|c| c.to_string_lossy().into_owned())
            .unwrap_or_default();
        if want.is_some_and(|w| !name.contains(w)) {
            continue;
        }
        // SAFETY: as above.
        let features = unsafe { instance.get_physical_device_features(pd) };
        let family = unsafe { instance.get_physical_device_queue_family_properties(pd) }
            .iter()
            .position(|q| q.queue_flags.contains(vk::QueueFlags::COMPUTE));
        let why = if p.api_version < vk::make_api_version(0, 1, 1, 0) {
            Some("supports only Vulkan 1.0 (1.1 is needed)")
        } else if features.robust_buffer_access == vk::FALSE {
            Some("lacks robustBufferAccess, which trapping kernels rely on")
        } else if family.is_none() {
            Some("has no compute queue")
        } else {
            None
        };
        if let Some(why) = why {
            refused.push(format!("{name} {why}"));
            continue;
        }
        let mut sub = vk::PhysicalDeviceSubgroupProperties::default();
        let mut p2 = vk::PhysicalDeviceProperties2::default().push_next(&mut sub);
        // SAFETY: Vulkan 1.1 core, checked above.
        unsafe { instance.get_physical_device_properties2(pd, &mut p2) };
        let ops = vk::SubgroupFeatureFlags::BASIC
            | vk::SubgroupFeatureFlags::ARITHMETIC
            | vk::SubgroupFeatureFlags::SHUFFLE;
        let native32 = sub.subgroup_size == 32
            && sub.supported_stages.contains(vk::ShaderStageFlags::COMPUTE)
            && sub.supported_operations.contains(ops)
            && p.api_version >= vk::make_api_version(0, 1, 2, 0);
        let subgroup = sub.subgroup_size;
        // SAFETY: as above.
        let memory = unsafe { instance.get_physical_device_memory_properties(pd) };
        let props = Props {
            name,
            api: p.api_version,
            limits: p.limits,
            memory,
            subgroup,
            cpu: p.device_type == vk::PhysicalDeviceType::CPU,
            native32,
        };
        found.push((
            kind_rank(p.device_type),
            pd,
            props,
            family.unwrap_or(0) as u32,
        ));
    }
    found.sort_by_key(|f| f.0);
    match found.into_iter().next() {
        Some((_, pd, props, family)) => Ok((pd, props, family)),
        None => Err(DeviceError::Unavailable(match (want, refused.is_empty()) {
            (_, false) => format!("no usable Vulkan device: {}", refused.join("; ")),
            (Some(w), true) => format!("no Vulkan device named like `{w}`"),
            (None, true) => "the Vulkan loader lists no device".into(),
        })),
    }
}
