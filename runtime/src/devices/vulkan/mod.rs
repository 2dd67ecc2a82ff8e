//! The raw Vulkan device (ash, loader opened at run time): SPIR-V kernels as compute
//! pipelines, one set of recorded command buffers per entry, resubmitted verbatim.
//!
//! Invariants:
//! - Arenas are one buffer each; slots and readback live in host-visible coherent memory
//!   and are written and read in place through their mapping, so a step copies nothing but
//!   the slot bytes in and the readback bytes out. Weights, state and scratch are
//!   device-local, reached through a staging buffer where that memory is not host-visible.
//! - `record` bakes descriptor sets and records command buffers once; `replay` submits them
//!   in order, waiting (bounded) for each before the next, and leaves the last one's wait to
//!   `synchronize`; `eager` records afresh and submits the same way (capture versus eager).
//! - Host access to any arena first waits for pending submissions.
//! - A set error word becomes, at `synchronize`, a `Fault` naming the kernel and trap code;
//!   a failed submission or wait poisons the device (`ctx`), and every later call refuses.

mod ctx;
mod kernel;
mod memory;
mod record;

pub use kernel::VulkanKernel;
pub use record::VulkanRecording;

use crate::device::{ARENAS, Device, arena_index, arena_sizes};
use crate::error::DeviceError;
use ash::vk;
use ctx::Ctx;
use memory::{Buffer, Use};
use poot_bundle::{Arena, ArenaSizes, Dispatch, KernelCode, Target};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// How to open a Vulkan device.
#[derive(Clone, Debug)]
pub struct VulkanOptions {
    /// Use the first device whose name contains this (`llvmpipe`, `H200`); the best kind
    /// (discrete, integrated, virtual, CPU) when `None`.
    pub name: Option<String>,
    /// Bound on every wait for the device.
    pub timeout: Duration,
    /// Watchdog budget in the planner's work units per command buffer: a replay becomes
    /// several submissions, each waited for; `None` records an entry as one command buffer.
    pub watchdog: Option<u64>,
}

impl Default for VulkanOptions {
    fn default() -> VulkanOptions {
        VulkanOptions {
            name: None,
            timeout: Duration::from_secs(600),
            watchdog: None,
        }
    }
}

/// Staging copies move at most this many bytes at a time.
const STAGING: u64 = 64 << 20;

fn usage(a: Arena) -> Use {
    match a {
        Arena::Slots => Use::Upload,
        Arena::Readback => Use::Readback,
        Arena::Weights | Arena::State | Arena::Scratch => Use::Device,
    }
}

/// One Vulkan device.
pub struct VulkanDevice {
    arenas: Vec<Buffer>,
    transfer: vk::CommandPool,
    transfer_cb: vk::CommandBuffer,
    transfer_fence: vk::Fence,
    /// Fences of submitted, not yet waited for work.
    pending: Vec<vk::Fence>,
    /// Staging buffers of copies that failed on a poisoned context, destroyed with the
    /// arenas once nothing is pending.
    orphans: Vec<Buffer>,
    /// Error words to check at the next `synchronize`.
    checks: Vec<Rc<record::ErrorWords>>,
    /// Eager recordings, freed at the next `synchronize`.
    transient: Vec<VulkanRecording>,
    watchdog: Option<u64>,
    submitted: u64,
    ctx: Arc<Ctx>,
}

impl VulkanDevice {
    /// Opens a device; `Unavailable` without a loader, a usable device, or robust buffer
    /// access.
    pub fn new(opts: &VulkanOptions) -> Result<VulkanDevice, DeviceError> {
        let ctx = Arc::new(Ctx::open(opts.name.as_deref(), opts.timeout)?);
        let d = &ctx.device;
        let other =
            |what: &'static str| move |r: vk::Result| DeviceError::Other(format!("{what}: {r:?}"));
        // SAFETY: valid create infos on a live device; freed in `drop`.
        let (transfer, transfer_cb, transfer_fence) = unsafe {
            let pool = d
                .create_command_pool(
                    &vk::CommandPoolCreateInfo::default()
                        .queue_family_index(ctx.family)
                        .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER),
                    None,
                )
                .map_err(other("vkCreateCommandPool"))?;
            let cb = d
                .allocate_command_buffers(
                    &vk::CommandBufferAllocateInfo::default()
                        .command_pool(pool)
                        .command_buffer_count(1),
                )
                .map_err(other("vkAllocateCommandBuffers"))?[0];
            let fence = d
                .create_fence(&vk::FenceCreateInfo::default(), None)
                .map_err(other("vkCreateFence"))?;
            (pool, cb, fence)
        };
        Ok(VulkanDevice {
            arenas: Vec::new(),
            transfer,
            transfer_cb,
            transfer_fence,
            pending: Vec::new(),
            orphans: Vec::new(),
            checks: Vec::new(),
            transient: Vec::new(),
            watchdog: opts.watchdog,
            submitted: 0,
            ctx,
        })
    }

    /// Command buffers submitted so far (a replay under a watchdog budget submits several).
    pub fn submissions(&self) -> u64 {
        self.submitted
    }

    /// Whether the device is a CPU implementation (lavapipe).
    pub fn is_cpu(&self) -> bool {
        self.ctx.props.cpu
    }

    /// Waits for pending submissions (their error words stay to be checked).
    fn settle(&mut self) -> Result<(), DeviceError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        self.ctx.wait(&self.pending)?;
        self.ctx.reset(&self.pending)?;
        self.pending.clear();
        Ok(())
    }

    fn arena(&self, a: Arena, offset: u64, len: u64) -> Result<&Buffer, DeviceError> {
        let b = self
            .arenas
            .get(arena_index(a))
            .ok_or_else(|| DeviceError::Other(format!("the {a:?} arena is not allocated")))?;
        if offset.checked_add(len).is_none_or(|end| end > b.size) {
            return Err(DeviceError::Other(format!(
                "{len} bytes at {offset} leave the {a:?} arena of {} bytes",
                b.size
            )));
        }
        Ok(b)
    }

    /// Records one transfer command buffer with `f`, submits it and waits.
    fn one_shot(
        &mut self,
        f: impl FnOnce(&ash::Device, vk::CommandBuffer),
    ) -> Result<(), DeviceError> {
        self.ctx.live()?;
        self.settle()?;
        let (d, cb) = (&self.ctx.device, self.transfer_cb);
        let other =
            |what: &'static str| move |r: vk::Result| DeviceError::Other(format!("{what}: {r:?}"));
        // SAFETY: the transfer command buffer is not pending (its last submission was waited).
        unsafe {
            d.reset_command_buffer(cb, vk::CommandBufferResetFlags::empty())
                .map_err(other("vkResetCommandBuffer"))?;
            d.begin_command_buffer(
                cb,
                &vk::CommandBufferBeginInfo::default()
                    .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT),
            )
            .map_err(other("vkBeginCommandBuffer"))?;
            f(d, cb);
            let m = [vk::MemoryBarrier::default()
                .src_access_mask(vk::AccessFlags::MEMORY_WRITE)
                .dst_access_mask(vk::AccessFlags::MEMORY_READ | vk::AccessFlags::MEMORY_WRITE)];
            d.cmd_pipeline_barrier(
                cb,
                vk::PipelineStageFlags::ALL_COMMANDS,
                vk::PipelineStageFlags::ALL_COMMANDS | vk::PipelineStageFlags::HOST,
                vk::DependencyFlags::empty(),
                &m,
                &[],
                &[],
            );
            d.end_command_buffer(cb)
                .map_err(other("vkEndCommandBuffer"))?;
        }
        self.ctx.submit(cb, self.transfer_fence)?;
        self.submitted += 1;
        self.ctx.wait(&[self.transfer_fence])?;
        self.ctx.reset(&[self.transfer_fence])
    }

    /// Copies between host bytes and an arena without a mapping, through staging buffers.
    fn staged(
        &mut self,
        arena: Arena,
        offset: u64,
        mut host: HostBytes<'_>,
    ) -> Result<(), DeviceError> {
        let total = host.len() as u64;
        let mut staging = Buffer::new(&self.ctx, total.min(STAGING), Use::Host)?;
        let result = (|| {
            let p = staging
                .mapped()
                .ok_or_else(|| DeviceError::Other("staging memory is not mapped".into()))?;
            let target = self.arena(arena, offset, total)?.buffer;
            let mut done = 0u64;
            while done < total {
                let n = (total - done).min(STAGING);
                let (src, dst, at) = match &mut host {
                    HostBytes::In(data) => {
                        // SAFETY: `n` bytes fit the staging mapping; nothing is pending.
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                data[done as usize..].as_ptr(),
                                p,
                                n as usize,
                            )
                        };
                        (staging.buffer, target, (0, offset + done))
                    }
                    HostBytes::Out(_) => (target, staging.buffer, (offset + done, 0)),
                };
                let region = [vk::BufferCopy::default()
                    .src_offset(at.0)
                    .dst_offset(at.1)
                    .size(n)];
                // SAFETY: both ranges lie in their buffers.
                self.one_shot(|d, cb| unsafe { d.cmd_copy_buffer(cb, src, dst, &region) })?;
                if let HostBytes::Out(out) = &mut host {
                    // SAFETY: the copy completed; `n` bytes lie in the mapping.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            p,
                            out[done as usize..].as_mut_ptr(),
                            n as usize,
                        )
                    };
                }
                done += n;
            }
            Ok(())
        })();
        if self.ctx.live().is_ok() {
            staging.destroy(&self.ctx);
        } else {
            // A copy that timed out may still read or write it.
            self.orphans.push(staging);
        }
        result
    }

    fn submit_recording(&mut self, rec: &VulkanRecording) -> Result<(), DeviceError> {
        self.ctx.live()?;
        self.settle()?;
        let last = rec.segments.len().saturating_sub(1);
        for (i, s) in rec.segments.iter().enumerate() {
            self.ctx.submit(s.cb, s.fence)?;
            self.submitted += 1;
            if i < last {
                self.ctx.wait(&[s.fence])?;
                self.ctx.reset(&[s.fence])?;
            } else {
                self.pending.push(s.fence);
            }
        }
        self.checks.push(rec.errors.clone());
        Ok(())
    }

    fn arena_list(&self) -> Vec<(Arena, &Buffer)> {
        ARENAS.iter().copied().zip(self.arenas.iter()).collect()
    }
}

/// Host bytes going into or out of an arena.
enum HostBytes<'a> {
    In(&'a [u8]),
    Out(&'a mut [u8]),
}

impl HostBytes<'_> {
    fn len(&self) -> usize {
        match self {
            HostBytes::In(d) => d.len(),
            HostBytes::Out(d) => d.len(),
        }
    }
}

impl Device for VulkanDevice {
    type Kernel = VulkanKernel;
    type Recording = VulkanRecording;

    fn describe(&self) -> String {
        let p = &self.ctx.props;
        format!(
            "{} (Vulkan {}.{}, subgroup {})",
            p.name,
            vk::api_version_major(p.api),
            vk::api_version_minor(p.api),
            p.subgroup
        )
    }

    fn accepts(&self) -> Vec<Target> {
        let mut t = Vec::new();
        if self.ctx.props.native32 {
            t.push(Target::Spirv {
                native_subgroups: true,
            });
        }
        t.push(Target::Spirv {
            native_subgroups: false,
        });
        t
    }

    fn alloc(&mut self, s: &ArenaSizes) -> Result<(), DeviceError> {
        self.ctx.live()?;
        self.free();
        for (a, size) in ARENAS.into_iter().zip(arena_sizes(s)) {
            let b = Buffer::new(&self.ctx, size, usage(a))?;
            self.arenas.push(b);
            self.zero(a)?;
        }
        Ok(())
    }

    fn write(&mut self, arena: Arena, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        self.ctx.live()?;
        self.settle()?;
        match self.arena(arena, offset, data.len() as u64)?.mapped() {
            Some(p) => {
                // SAFETY: the range lies in the mapped arena; no submission is pending.
                unsafe {
                    std::ptr::copy_nonoverlapping(data.as_ptr(), p.add(offset as usize), data.len())
                };
                Ok(())
            }
            None => self.staged(arena, offset, HostBytes::In(data)),
        }
    }

    fn read(&mut self, arena: Arena, offset: u64, out: &mut [u8]) -> Result<(), DeviceError> {
        self.ctx.live()?;
        self.settle()?;
        match self.arena(arena, offset, out.len() as u64)?.mapped() {
            Some(p) => {
                // SAFETY: as for `write`.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        p.add(offset as usize),
                        out.as_mut_ptr(),
                        out.len(),
                    )
                };
                Ok(())
            }
            None => self.staged(arena, offset, HostBytes::Out(out)),
        }
    }

    fn zero(&mut self, arena: Arena) -> Result<(), DeviceError> {
        self.ctx.live()?;
        self.settle()?;
        let b = self.arena(arena, 0, 0)?;
        match b.mapped() {
            Some(p) => {
                // SAFETY: the whole mapped arena; no submission is pending.
                unsafe { std::ptr::write_bytes(p, 0, b.size as usize) };
                Ok(())
            }
            None => {
                let buf = b.buffer;
                // SAFETY: the whole buffer, a multiple of 4 bytes.
                self.one_shot(|d, cb| unsafe { d.cmd_fill_buffer(cb, buf, 0, vk::WHOLE_SIZE, 0) })
            }
        }
    }

    fn load_kernel(&mut self, code: &KernelCode) -> Result<VulkanKernel, DeviceError> {
        VulkanKernel::load(&self.ctx, code)
    }

    fn record(
        &mut self,
        kernels: &[VulkanKernel],
        dispatches: &[Dispatch],
    ) -> Result<VulkanRecording, DeviceError> {
        let arenas = self.arena_list();
        record::record(&self.ctx, &arenas, kernels, dispatches, self.watchdog, None)
    }

    fn replay(&mut self, _: &[VulkanKernel], rec: &VulkanRecording) -> Result<(), DeviceError> {
        self.submit_recording(rec)
    }

    fn eager(
        &mut self,
        kernels: &[VulkanKernel],
        dispatches: &[Dispatch],
    ) -> Result<(), DeviceError> {
        let rec = self.record(kernels, dispatches)?;
        let sent = self.submit_recording(&rec);
        self.transient.push(rec);
        sent
    }

    fn synchronize(&mut self) -> Result<(), DeviceError> {
        self.ctx.live()?;
        self.settle()?;
        self.transient.clear();
        let mut fault = None;
        for c in self.checks.drain(..) {
            if let Some(f) = c.take_fault() {
                fault.get_or_insert(f);
            }
        }
        fault.map_or(Ok(()), Err)
    }

    fn profile(
        &mut self,
        kernels: &[VulkanKernel],
        dispatches: &[Dispatch],
    ) -> Result<Option<Vec<f64>>, DeviceError> {
        let period = f64::from(self.ctx.props.limits.timestamp_period) * 1e-9;
        if self.ctx.props.limits.timestamp_compute_and_graphics == vk::FALSE || period <= 0.0 {
            return Ok(None);
        }
        self.ctx.live()?;
        let d = &self.ctx.device;
        let n = dispatches.len() as u32 + 1;
        let info = vk::QueryPoolCreateInfo::default()
            .query_type(vk::QueryType::TIMESTAMP)
            .query_count(n);
        // SAFETY: a valid create info; destroyed below once its submission completed.
        let pool = unsafe { d.create_query_pool(&info, None) }
            .map_err(|r| DeviceError::Other(format!("vkCreateQueryPool: {r:?}")))?;
        let arenas = self.arena_list();
        let ran = record::record(&self.ctx, &arenas, kernels, dispatches, None, Some(pool))
            .and_then(|rec| {
                let sent = self.submit_recording(&rec);
                self.transient.push(rec);
                sent.and_then(|()| self.synchronize())
            });
        let mut stamps = vec![0u64; n as usize];
        let read = ran.and_then(|()| {
            // SAFETY: every query was written by the completed submission.
            unsafe {
                self.ctx.device.get_query_pool_results(
                    pool,
                    0,
                    &mut stamps,
                    vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
                )
            }
            .map_err(|r| DeviceError::Other(format!("vkGetQueryPoolResults: {r:?}")))
        });
        if self.ctx.may_destroy() {
            // SAFETY: the submission using the pool completed (or never happened).
            unsafe { self.ctx.device.destroy_query_pool(pool, None) };
        }
        read?;
        Ok(Some(
            stamps
                .windows(2)
                .map(|w| w[1].wrapping_sub(w[0]) as f64 * period)
                .collect(),
        ))
    }

    fn free(&mut self) {
        // A live context waits for its pending work; a poisoned one may destroy only once all
        // of it finished (`Ctx::may_destroy`).
        let idle = if self.ctx.live().is_ok() {
            self.settle().is_ok()
        } else {
            self.ctx.may_destroy()
        };
        if idle {
            for mut b in self.arenas.drain(..).chain(self.orphans.drain(..)) {
                b.destroy(&self.ctx);
            }
        }
        self.arenas.clear();
    }
}

impl Drop for VulkanDevice {
    fn drop(&mut self) {
        self.transient.clear();
        self.checks.clear();
        self.free();
        if self.ctx.may_destroy() {
            // SAFETY: the transfer objects are idle (every one-shot submission was waited).
            unsafe {
                self.ctx.device.destroy_fence(self.transfer_fence, None);
                self.ctx.device.destroy_command_pool(self.transfer, None);
            }
        }
    }
}
