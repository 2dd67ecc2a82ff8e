//! Buffers and their memory: one `VkBuffer` with its own allocation per arena, per
//! recording's error words and per staging copy.
//!
//! Invariants: a buffer's memory type is chosen by what it is for ([`Use`]); a buffer whose
//! memory is host-visible and coherent stays mapped for its whole life, so host writes and
//! reads need no flush and no copy (the caller waits for pending work first); every buffer
//! is a storage buffer and a transfer source and destination.

use super::ctx::Ctx;
use crate::error::DeviceError;
use ash::vk;

/// What a buffer is for, which decides its memory type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Use {
    /// Read and written by kernels (weights, state, scratch): device-local; mapped too where
    /// that memory is host-visible (lavapipe, resizable BAR).
    Device,
    /// Written by the host every step, read by kernels (slots).
    Upload,
    /// Written by kernels, read by the host every step (readback).
    Readback,
    /// Host memory the device reaches (staging copies, error words).
    Host,
}

/// A buffer and its memory.
pub(super) struct Buffer {
    pub buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    /// Usable bytes (the allocation may be larger).
    pub size: u64,
    mapped: *mut u8,
}

// SAFETY: the mapping is only touched through `&mut` access of the owner.
unsafe impl Send for Buffer {}

const COHERENT: vk::MemoryPropertyFlags = vk::MemoryPropertyFlags::from_raw(
    vk::MemoryPropertyFlags::HOST_VISIBLE.as_raw()
        | vk::MemoryPropertyFlags::HOST_COHERENT.as_raw(),
);

fn preferences(u: Use) -> Vec<vk::MemoryPropertyFlags> {
    use vk::MemoryPropertyFlags as F;
    match u {
        Use::Device => vec![F::DEVICE_LOCAL, COHERENT],
        Use::Upload => vec![F::DEVICE_LOCAL | COHERENT, COHERENT],
        Use::Readback => vec![F::HOST_CACHED | COHERENT, COHERENT],
        Use::Host => vec![COHERENT],
    }
}

impl Buffer {
    /// A buffer of at least `size` bytes (zero-sized arenas get 256).
    pub fn new(ctx: &Ctx, size: u64, what: Use) -> Result<Buffer, DeviceError> {
        let size = size.max(256).div_ceil(4) * 4;
        let d = &ctx.device;
        let usage = vk::BufferUsageFlags::STORAGE_BUFFER
            | vk::BufferUsageFlags::TRANSFER_SRC
            | vk::BufferUsageFlags::TRANSFER_DST;
        let info = vk::BufferCreateInfo::default().size(size).usage(usage);
        // SAFETY: a valid create info; destroyed on every error path.
        let buffer = unsafe { d.create_buffer(&info, None) }
            .map_err(|r| DeviceError::Other(format!("vkCreateBuffer of {size} bytes: {r:?}")))?;
        // SAFETY: a live buffer.
        let req = unsafe { d.get_buffer_memory_requirements(buffer) };
        let mem = &ctx.props.memory;
        let mut last = vk::Result::ERROR_OUT_OF_DEVICE_MEMORY;
        for want in preferences(what) {
            for i in 0..mem.memory_type_count {
                let flags = mem.memory_types[i as usize].property_flags;
                if req.memory_type_bits & (1 << i) == 0 || !flags.contains(want) {
                    continue;
                }
                let alloc = vk::MemoryAllocateInfo::default()
                    .allocation_size(req.size)
                    .memory_type_index(i);
                // SAFETY: a valid allocation of an allowed type.
                let memory = match unsafe { d.allocate_memory(&alloc, None) } {
                    Ok(m) => m,
                    Err(r) => {
                        last = r;
                        continue;
                    }
                };
                // SAFETY: fresh buffer and memory of a type the buffer allows.
                let bound = unsafe { d.bind_buffer_memory(buffer, memory, 0) };
                let mapped = match bound {
                    Ok(()) if flags.contains(COHERENT) => {
                        // SAFETY: host-visible memory, mapped once for its whole life.
                        unsafe {
                            d.map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty())
                        }
                        .map(|p| p as *mut u8)
                    }
                    Ok(()) => Ok(std::ptr::null_mut()),
                    Err(r) => Err(r),
                };
                match mapped {
                    Ok(mapped) => {
                        return Ok(Buffer {
                            buffer,
                            memory,
                            size,
                            mapped,
                        });
                    }
                    Err(r) => {
                        // SAFETY: unused memory.
                        unsafe { d.free_memory(memory, None) };
                        last = r;
                    }
                }
            }
        }
        // SAFETY: the buffer was never bound.
        unsafe { d.destroy_buffer(buffer, None) };
        Err(DeviceError::Other(format!(
            "allocating {size} bytes of {what:?} memory on {}: {last:?}",
            ctx.props.name
        )))
    }

    /// The host mapping, when the memory is host-visible.
    pub fn mapped(&self) -> Option<*mut u8> {
        (!self.mapped.is_null()).then_some(self.mapped)
    }

    /// Frees the buffer; the caller guarantees no pending work references it.
    pub fn destroy(&mut self, ctx: &Ctx) {
        // SAFETY: per the caller's guarantee; destroyed once (handles are nulled).
        unsafe {
            if !self.mapped.is_null() {
                ctx.device.unmap_memory(self.memory);
            }
            ctx.device.destroy_buffer(self.buffer, None);
            ctx.device.free_memory(self.memory, None);
        }
        self.buffer = vk::Buffer::null();
        self.memory = vk::DeviceMemory::null();
        self.mapped = std::ptr::null_mut();
    }
}
