//! Recording an entry: descriptor sets baked once, command buffers recorded once, and the
//! error words each dispatch's traps land in.
//!
//! Invariants: dispatch `i` binds its buffers as arena ranges (checked against the arena, the
//! device's offset alignment and its storage range) and its error binding at word
//! `i * stride / 4` of the recording's error buffer; a global memory barrier (compute to
//! compute) follows every dispatch, and one from compute to the transfer and host stages ends
//! every command buffer (for the staged copies and host reads of later submissions); with a
//! watchdog budget the dispatches are cut into consecutive segments whose summed work weight
//! stays within it (a single heavier dispatch gets a segment of its own), without one the
//! entry is one command buffer. Nothing is destroyed while a submission of it may be pending.

use super::ctx::Ctx;
use super::kernel::VulkanKernel;
use super::memory::{Buffer, Use};
use crate::devices::spirv::binding_range;
use crate::error::DeviceError;
use ash::vk;
use poot_bundle::{Arena, Dispatch};
use std::ops::Range;
use std::rc::Rc;
use std::sync::Arc;

/// One command buffer of a recording and the fence its submission signals.
pub(super) struct Segment {
    pub cb: vk::CommandBuffer,
    pub fence: vk::Fence,
}

/// Each dispatch's error word, host-visible, and the kernel names that report it.
pub(super) struct ErrorWords {
    ctx: Arc<Ctx>,
    buffer: Buffer,
    stride: usize,
    kernels: Vec<String>,
}

impl ErrorWords {
    /// The first set error word as a fault (zeroing the words); the caller has waited
    /// for the submissions that write them.
    pub fn take_fault(&self) -> Option<DeviceError> {
        let base = self.buffer.mapped()?;
        let len = self.buffer.size as usize;
        // SAFETY: the whole mapped buffer; no submission that writes it is pending.
        let words = unsafe { std::slice::from_raw_parts_mut(base, len) };
        let fault = crate::devices::spirv::first_fault(words, self.stride, &self.kernels)?;
        words.fill(0);
        Some(fault)
    }
}

impl Drop for ErrorWords {
    fn drop(&mut self) {
        if self.ctx.may_destroy() {
            self.buffer.destroy(&self.ctx);
        }
    }
}

/// A recorded entry.
pub struct VulkanRecording {
    ctx: Arc<Ctx>,
    descriptors: vk::DescriptorPool,
    commands: vk::CommandPool,
    pub(super) segments: Vec<Segment>,
    pub(super) errors: Rc<ErrorWords>,
}

impl Drop for VulkanRecording {
    fn drop(&mut self) {
        if !self.ctx.may_destroy() {
            return;
        }
        let d = &self.ctx.device;
        // SAFETY: no submission of these command buffers is pending: the device waits for
        // every submission before it returns from `synchronize`, the engine synchronizes
        // every step and drops recordings only between steps, and a failed wait poisons.
        unsafe {
            for s in &self.segments {
                d.destroy_fence(s.fence, None);
            }
            d.destroy_command_pool(self.commands, None);
            d.destroy_descriptor_pool(self.descriptors, None);
        }
    }
}

/// Consecutive ranges of dispatches whose work stays within `budget`.
pub(super) fn segments(dispatches: &[Dispatch], budget: Option<u64>) -> Vec<Range<usize>> {
    let Some(budget) = budget else {
        return std::iter::once(0..dispatches.len()).collect();
    };
    let mut out = Vec::new();
    let (mut start, mut sum) = (0, 0u64);
    for (i, d) in dispatches.iter().enumerate() {
        if i > start && sum.saturating_add(d.work) > budget {
            out.push(start..i);
            (start, sum) = (i, 0);
        }
        sum = sum.saturating_add(d.work);
    }
    out.push(start..dispatches.len());
    out
}

fn other(what: &'static str) -> impl Fn(vk::Result) -> DeviceError {
    move |r| DeviceError::Other(format!("{what}: {r:?}"))
}

/// Checks every dispatch against the kernels, the arenas and the device's limits.
fn check(
    ctx: &Ctx,
    arenas: &[(Arena, &Buffer)],
    kernels: &[VulkanKernel],
    dispatches: &[Dispatch],
) -> Result<(), DeviceError> {
    let l = &ctx.props.limits;
    for (i, d) in dispatches.iter().enumerate() {
        let k = kernels
            .get(d.kernel as usize)
            .ok_or_else(|| DeviceError::Other(format!("dispatch {i}: no kernel {}", d.kernel)))?;
        let bad = |why: String| DeviceError::Other(format!("dispatch {i} ({}): {why}", k.name));
        if d.bindings.len() as u32 + 1 != k.bindings {
            return Err(bad(format!(
                "{} buffers bound, the module declares {} besides its error words",
                d.bindings.len(),
                k.bindings - 1
            )));
        }
        if (0..3).any(|a| d.grid[a] > l.max_compute_work_group_count[a]) {
            return Err(bad(format!(
                "grid {:?} exceeds the device's {:?}",
                d.grid, l.max_compute_work_group_count
            )));
        }
        for b in &d.bindings {
            let size = arenas
                .iter()
                .find(|(a, _)| *a == b.arena)
                .map_or(0, |(_, buf)| buf.size);
            if b.offset.checked_add(b.len).is_none_or(|end| end > size) {
                return Err(bad(format!(
                    "{} bytes at {} leave the {:?} arena of {size} bytes",
                    b.len, b.offset, b.arena
                )));
            }
            if b.offset % l.min_storage_buffer_offset_alignment != 0 {
                return Err(bad(format!(
                    "offset {} is not a multiple of the device's storage alignment {}",
                    b.offset, l.min_storage_buffer_offset_alignment
                )));
            }
            if b.len > u64::from(l.max_storage_buffer_range) {
                return Err(bad(format!(
                    "a {}-byte binding exceeds the device's storage range of {} bytes",
                    b.len, l.max_storage_buffer_range
                )));
            }
        }
    }
    Ok(())
}

/// Records `dispatches` over `arenas`; with `timestamps` (a pool of one query more than
/// dispatches, profiling only) each dispatch is bracketed by timestamps.
pub(super) fn record(
    ctx: &Arc<Ctx>,
    arenas: &[(Arena, &Buffer)],
    kernels: &[VulkanKernel],
    dispatches: &[Dispatch],
    budget: Option<u64>,
    timestamps: Option<vk::QueryPool>,
) -> Result<VulkanRecording, DeviceError> {
    ctx.live()?;
    check(ctx, arenas, kernels, dispatches)?;
    let d = &ctx.device;
    let align = ctx.props.limits.min_storage_buffer_offset_alignment.max(4) as usize;
    let errors = ErrorWords {
        ctx: ctx.clone(),
        buffer: Buffer::new(ctx, (dispatches.len().max(1) * align) as u64, Use::Host)?,
        stride: align,
        kernels: dispatches
            .iter()
            .map(|x| kernels[x.kernel as usize].name.clone())
            .collect(),
    };
    if let Some(p) = errors.buffer.mapped() {
        // SAFETY: the whole fresh mapping.
        unsafe { std::ptr::write_bytes(p, 0, errors.buffer.size as usize) };
    }
    let ranges = segments(dispatches, budget);
    let mut rec = VulkanRecording {
        ctx: ctx.clone(),
        descriptors: vk::DescriptorPool::null(),
        commands: vk::CommandPool::null(),
        segments: Vec::new(),
        errors: Rc::new(errors),
    };
    let descriptors: u32 = kernels_bindings(kernels, dispatches);
    // SAFETY: valid create infos; `rec` frees what was made if a later step fails.
    unsafe {
        let sizes = [vk::DescriptorPoolSize::default()
            .ty(vk::DescriptorType::STORAGE_BUFFER)
            .descriptor_count(descriptors.max(1))];
        rec.descriptors = d
            .create_descriptor_pool(
                &vk::DescriptorPoolCreateInfo::default()
                    .max_sets(dispatches.len().max(1) as u32)
                    .pool_sizes(&sizes),
                None,
            )
            .map_err(other("vkCreateDescriptorPool"))?;
        rec.commands = d
            .create_command_pool(
                &vk::CommandPoolCreateInfo::default().queue_family_index(ctx.family),
                None,
            )
            .map_err(other("vkCreateCommandPool"))?;
        let cbs = d
            .allocate_command_buffers(
                &vk::CommandBufferAllocateInfo::default()
                    .command_pool(rec.commands)
                    .command_buffer_count(ranges.len() as u32),
            )
            .map_err(other("vkAllocateCommandBuffers"))?;
        for cb in cbs {
            let fence = d
                .create_fence(&vk::FenceCreateInfo::default(), None)
                .map_err(other("vkCreateFence"))?;
            rec.segments.push(Segment { cb, fence });
        }
    }
    let sets = bake_sets(ctx, &rec, arenas, kernels, dispatches)?;
    for (range, seg) in ranges.iter().zip(&rec.segments) {
        // SAFETY: a fresh command buffer; every handle recorded lives as long as `rec`.
        unsafe {
            d.begin_command_buffer(seg.cb, &vk::CommandBufferBeginInfo::default())
                .map_err(other("vkBeginCommandBuffer"))?;
            if let Some(q) = timestamps {
                d.cmd_reset_query_pool(seg.cb, q, 0, dispatches.len() as u32 + 1);
                d.cmd_write_timestamp(seg.cb, vk::PipelineStageFlags::BOTTOM_OF_PIPE, q, 0);
            }
            let mut bound = vk::Pipeline::null();
            for i in range.clone() {
                let x = &dispatches[i];
                let k = &kernels[x.kernel as usize];
                if bound != k.pipeline {
                    d.cmd_bind_pipeline(seg.cb, vk::PipelineBindPoint::COMPUTE, k.pipeline);
                    bound = k.pipeline;
                }
                d.cmd_bind_descriptor_sets(
                    seg.cb,
                    vk::PipelineBindPoint::COMPUTE,
                    k.layout,
                    0,
                    &[sets[i]],
                    &[],
                );
                d.cmd_dispatch(seg.cb, x.grid[0], x.grid[1], x.grid[2]);
                barrier(
                    d,
                    seg.cb,
                    vk::PipelineStageFlags::COMPUTE_SHADER,
                    vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE,
                );
                if let Some(q) = timestamps {
                    let at = i as u32 + 1;
                    d.cmd_write_timestamp(seg.cb, vk::PipelineStageFlags::BOTTOM_OF_PIPE, q, at);
                }
            }
            barrier(
                d,
                seg.cb,
                vk::PipelineStageFlags::TRANSFER | vk::PipelineStageFlags::HOST,
                vk::AccessFlags::TRANSFER_READ
                    | vk::AccessFlags::TRANSFER_WRITE
                    | vk::AccessFlags::HOST_READ,
            );
            d.end_command_buffer(seg.cb)
                .map_err(other("vkEndCommandBuffer"))?;
        }
    }
    Ok(rec)
}

fn kernels_bindings(kernels: &[VulkanKernel], dispatches: &[Dispatch]) -> u32 {
    dispatches
        .iter()
        .map(|x| kernels[x.kernel as usize].bindings)
        .sum()
}

/// A global memory barrier (every buffer, not a range) from the compute work before to
/// `dst` work. A recording holds only dispatches, so the compute stage and shader writes
/// cover all of it. `ALL_COMMANDS` with `MEMORY_*` access instead cost the H200 about 2.8 us
/// more per dispatch (SmolLM2 decode: 444 instead of 605 tok/s, BENCHMARKS.md).
///
/// # Safety
/// `cb` is recording.
unsafe fn barrier(
    d: &ash::Device,
    cb: vk::CommandBuffer,
    dst: vk::PipelineStageFlags,
    access: vk::AccessFlags,
) {
    let m = [vk::MemoryBarrier::default()
        .src_access_mask(vk::AccessFlags::SHADER_WRITE)
        .dst_access_mask(access)];
    // SAFETY: per the caller.
    unsafe {
        d.cmd_pipeline_barrier(
            cb,
            vk::PipelineStageFlags::COMPUTE_SHADER,
            dst,
            vk::DependencyFlags::empty(),
            &m,
            &[],
            &[],
        )
    };
}

/// One descriptor set per dispatch, written once.
fn bake_sets(
    ctx: &Ctx,
    rec: &VulkanRecording,
    arenas: &[(Arena, &Buffer)],
    kernels: &[VulkanKernel],
    dispatches: &[Dispatch],
) -> Result<Vec<vk::DescriptorSet>, DeviceError> {
    if dispatches.is_empty() {
        return Ok(Vec::new());
    }
    let d = &ctx.device;
    let layouts: Vec<_> = dispatches
        .iter()
        .map(|x| kernels[x.kernel as usize].set_layout)
        .collect();
    // SAFETY: the pool was sized for one set per dispatch and all their bindings.
    let sets = unsafe {
        d.allocate_descriptor_sets(
            &vk::DescriptorSetAllocateInfo::default()
                .descriptor_pool(rec.descriptors)
                .set_layouts(&layouts),
        )
    }
    .map_err(other("vkAllocateDescriptorSets"))?;
    let stride = rec.errors.stride as u64;
    let mut infos: Vec<vk::DescriptorBufferInfo> = Vec::new();
    let mut at: Vec<(vk::DescriptorSet, u32)> = Vec::new();
    for (i, x) in dispatches.iter().enumerate() {
        for (j, b) in x.bindings.iter().enumerate() {
            let (buf, size) = arenas
                .iter()
                .find(|(a, _)| *a == b.arena)
                .map(|(_, buf)| (buf.buffer, buf.size))
                .unwrap_or_default();
            infos.push(
                vk::DescriptorBufferInfo::default()
                    .buffer(buf)
                    .offset(b.offset)
                    .range(binding_range(b.offset, b.len, size)),
            );
            at.push((sets[i], j as u32));
        }
        infos.push(
            vk::DescriptorBufferInfo::default()
                .buffer(rec.errors.buffer.buffer)
                .offset(i as u64 * stride)
                .range(4),
        );
        at.push((sets[i], x.bindings.len() as u32));
    }
    let writes: Vec<_> = at
        .iter()
        .zip(&infos)
        .map(|(&(set, binding), info)| {
            vk::WriteDescriptorSet::default()
                .dst_set(set)
                .dst_binding(binding)
                .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                .buffer_info(std::slice::from_ref(info))
        })
        .collect();
    // SAFETY: every set, binding and buffer range is valid (checked in `check`).
    unsafe { d.update_descriptor_sets(&writes, &[]) };
    Ok(sets)
}
