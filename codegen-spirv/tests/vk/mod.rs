//! A minimal Vulkan compute runner (ash) for the execution tests: one dispatch of one module
//! over host-visible storage buffers bound as the crate documents (set 0, binding `i` =
//! buffer `i`, the last buffer the error words). Test code: errors are strings.

use ash::vk;
use std::ffi::CString;

/// A Vulkan device and its compute queue.
pub struct Gpu {
    _entry: ash::Entry,
    instance: ash::Instance,
    device: ash::Device,
    queue: vk::Queue,
    family: u32,
    memory: vk::PhysicalDeviceMemoryProperties,
    /// The device name.
    pub name: String,
}

impl Gpu {
    /// The first device whose name contains `want` (lavapipe calls itself `llvmpipe`), or
    /// `None` when there is no Vulkan loader or no such device.
    pub fn find(want: &str) -> Option<Gpu> {
        // SAFETY: loading the system Vulkan loader; every call below follows the spec's
        // valid usage for a single-threaded, one-dispatch-at-a-time user.
        unsafe {
            let entry = ash::Entry::load().ok()?;
            let app = vk::ApplicationInfo::default().api_version(vk::make_api_version(0, 1, 2, 0));
            let instance = entry
                .create_instance(
                    &vk::InstanceCreateInfo::default().application_info(&app),
                    None,
                )
                .ok()?;
            let (pd, name) = instance
                .enumerate_physical_devices()
                .ok()?
                .into_iter()
                .map(|pd| {
                    let p = instance.get_physical_device_properties(pd);
                    let name = p
                        .device_name_as_c_str()
                        .map(|c| c.to_string_lossy().into_owned());
                    (pd, name.unwrap_or_default())
                })
                .find(|(_, n)| n.contains(want))?;
            let family = instance
                .get_physical_device_queue_family_properties(pd)
                .iter()
                .position(|q| q.queue_flags.contains(vk::QueueFlags::COMPUTE))?
                as u32;
            let prio = [1.0f32];
            let queues = [vk::DeviceQueueCreateInfo::default()
                .queue_family_index(family)
                .queue_priorities(&prio)];
            let exts = [c"VK_EXT_shader_atomic_float".as_ptr()];
            let mut atomic_float = vk::PhysicalDeviceShaderAtomicFloatFeaturesEXT::default()
                .shader_buffer_float32_atomic_add(true);
            let features = vk::PhysicalDeviceFeatures::default().robust_buffer_access(true);
            let info = vk::DeviceCreateInfo::default()
                .queue_create_infos(&queues)
                .enabled_extension_names(&exts)
                .enabled_features(&features)
                .push_next(&mut atomic_float);
            let device = instance.create_device(pd, &info, None).ok()?;
            let queue = device.get_device_queue(family, 0);
            let memory = instance.get_physical_device_memory_properties(pd);
            Some(Gpu {
                _entry: entry,
                instance,
                device,
                queue,
                family,
                memory,
                name,
            })
        }
    }

    fn host_memory(&self, bits: u32) -> Option<u32> {
        let want = vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
        (0..self.memory.memory_type_count).find(|&i| {
            bits & (1 << i) != 0
                && self.memory.memory_types[i as usize]
                    .property_flags
                    .contains(want)
        })
    }

    /// Runs `grid` work-groups of entry point `entry` of `words` over `buffers` (read back in
    /// place).
    pub fn run(
        &self,
        words: &[u32],
        entry: &str,
        grid: [u32; 3],
        buffers: &mut [Vec<u32>],
    ) -> Result<(), String> {
        let d = &self.device;
        let e = |what: &str| {
            let what = what.to_string();
            move |r: vk::Result| format!("{what}: {r:?}")
        };
        // SAFETY: as in `find`; every object is destroyed before returning, after the fence.
        unsafe {
            let mut bufs = Vec::new();
            for b in buffers.iter() {
                let size = (4 * b.len().max(1)) as u64;
                let info = vk::BufferCreateInfo::default()
                    .size(size)
                    .usage(vk::BufferUsageFlags::STORAGE_BUFFER);
                let buf = d.create_buffer(&info, None).map_err(e("buffer"))?;
                let req = d.get_buffer_memory_requirements(buf);
                let ty = self
                    .host_memory(req.memory_type_bits)
                    .ok_or("no host memory")?;
                let alloc = vk::MemoryAllocateInfo::default()
                    .allocation_size(req.size)
                    .memory_type_index(ty);
                let mem = d.allocate_memory(&alloc, None).map_err(e("memory"))?;
                d.bind_buffer_memory(buf, mem, 0).map_err(e("bind"))?;
                let p = d
                    .map_memory(mem, 0, size, vk::MemoryMapFlags::empty())
                    .map_err(e("map"))? as *mut u32;
                std::ptr::copy_nonoverlapping(b.as_ptr(), p, b.len());
                d.unmap_memory(mem);
                bufs.push((buf, mem, size));
            }
            let bindings: Vec<_> = (0..buffers.len() as u32)
                .map(|i| {
                    vk::DescriptorSetLayoutBinding::default()
                        .binding(i)
                        .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                        .descriptor_count(1)
                        .stage_flags(vk::ShaderStageFlags::COMPUTE)
                })
                .collect();
            let dsl = d
                .create_descriptor_set_layout(
                    &vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings),
                    None,
                )
                .map_err(e("set layout"))?;
            let layouts = [dsl];
            let pl = d
                .create_pipeline_layout(
                    &vk::PipelineLayoutCreateInfo::default().set_layouts(&layouts),
                    None,
                )
                .map_err(e("pipeline layout"))?;
            let module = d
                .create_shader_module(&vk::ShaderModuleCreateInfo::default().code(words), None)
                .map_err(e("shader module"))?;
            let name = CString::new(entry).map_err(|x| x.to_string())?;
            let stage = vk::PipelineShaderStageCreateInfo::default()
                .stage(vk::ShaderStageFlags::COMPUTE)
                .module(module)
                .name(&name);
            let pipeline = d
                .create_compute_pipelines(
                    vk::PipelineCache::null(),
                    &[vk::ComputePipelineCreateInfo::default()
                        .stage(stage)
                        .layout(pl)],
                    None,
                )
                .map_err(|(_, r)| format!("pipeline: {r:?}"))?[0];
            let sizes = [vk::DescriptorPoolSize::default()
                .ty(vk::DescriptorType::STORAGE_BUFFER)
                .descriptor_count(buffers.len() as u32)];
            let pool = d
                .create_descriptor_pool(
                    &vk::DescriptorPoolCreateInfo::default()
                        .max_sets(1)
                        .pool_sizes(&sizes),
                    None,
                )
                .map_err(e("descriptor pool"))?;
            let set = d
                .allocate_descriptor_sets(
                    &vk::DescriptorSetAllocateInfo::default()
                        .descriptor_pool(pool)
                        .set_layouts(&layouts),
                )
                .map_err(e("descriptor set"))?[0];
            let infos: Vec<[vk::DescriptorBufferInfo; 1]> = bufs
                .iter()
                .map(|&(b, _, size)| [vk::DescriptorBufferInfo::default().buffer(b).range(size)])
                .collect();
            let writes: Vec<_> = infos
                .iter()
                .enumerate()
                .map(|(i, info)| {
                    vk::WriteDescriptorSet::default()
                        .dst_set(set)
                        .dst_binding(i as u32)
                        .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                        .buffer_info(info)
                })
                .collect();
            d.update_descriptor_sets(&writes, &[]);
            let cpool = d
                .create_command_pool(
                    &vk::CommandPoolCreateInfo::default().queue_family_index(self.family),
                    None,
                )
                .map_err(e("command pool"))?;
            let cb = d
                .allocate_command_buffers(
                    &vk::CommandBufferAllocateInfo::default()
                        .command_pool(cpool)
                        .command_buffer_count(1),
                )
                .map_err(e("command buffer"))?[0];
            d.begin_command_buffer(cb, &vk::CommandBufferBeginInfo::default())
                .map_err(e("begin"))?;
            d.cmd_bind_pipeline(cb, vk::PipelineBindPoint::COMPUTE, pipeline);
            d.cmd_bind_descriptor_sets(cb, vk::PipelineBindPoint::COMPUTE, pl, 0, &[set], &[]);
            d.cmd_dispatch(cb, grid[0], grid[1], grid[2]);
            d.end_command_buffer(cb).map_err(e("end"))?;
            let fence = d
                .create_fence(&vk::FenceCreateInfo::default(), None)
                .map_err(e("fence"))?;
            let cbs = [cb];
            d.queue_submit(
                self.queue,
                &[vk::SubmitInfo::default().command_buffers(&cbs)],
                fence,
            )
            .map_err(e("submit"))?;
            d.wait_for_fences(&[fence], true, 120_000_000_000)
                .map_err(e("wait"))?;
            for (b, &(_, mem, size)) in buffers.iter_mut().zip(&bufs) {
                let p = d
                    .map_memory(mem, 0, size, vk::MemoryMapFlags::empty())
                    .map_err(e("map"))? as *const u32;
                std::ptr::copy_nonoverlapping(p, b.as_mut_ptr(), b.len());
                d.unmap_memory(mem);
            }
            d.destroy_fence(fence, None);
            d.destroy_command_pool(cpool, None);
            d.destroy_descriptor_pool(pool, None);
            d.destroy_pipeline(pipeline, None);
            d.destroy_shader_module(module, None);
            d.destroy_pipeline_layout(pl, None);
            d.destroy_descriptor_set_layout(dsl, None);
            for (b, m, _) in bufs {
                d.destroy_buffer(b, None);
                d.free_memory(m, None);
            }
        }
        Ok(())
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        // SAFETY: nothing created from the device outlives `run`.
        unsafe {
            let _ = self.device.device_wait_idle();
            self.device.destroy_device(None);
            self.instance.destroy_instance(None);
        }
    }
}
