//! One SPIR-V kernel as a compute pipeline: shader module, descriptor set layout (one
//! storage buffer per binding the module declares, the error words last), pipeline layout.
//!
//! Invariants: the module is a whole number of little-endian words starting with the SPIR-V
//! magic; it declares bindings `0..n` of descriptor set 0 with the error words at `n - 1`
//! (poot-codegen-spirv's binding model), so a dispatch binds exactly `n - 1` buffers; the
//! work-group fits the device's limits. Objects are destroyed on drop unless the context is
//! poisoned.

use super::ctx::Ctx;
use crate::error::DeviceError;
use ash::vk;
use poot_bundle::KernelCode;
use std::ffi::CString;
use std::sync::Arc;

/// A loaded kernel.
pub struct VulkanKernel {
    ctx: Arc<Ctx>,
    /// The kernel's name.
    pub(super) name: String,
    /// Storage buffer bindings, the error words included.
    pub(super) bindings: u32,
    pub(super) set_layout: vk::DescriptorSetLayout,
    pub(super) layout: vk::PipelineLayout,
    pub(super) pipeline: vk::Pipeline,
    module: vk::ShaderModule,
}

impl VulkanKernel {
    /// Builds the pipeline of `code`.
    pub(super) fn load(ctx: &Arc<Ctx>, code: &KernelCode) -> Result<VulkanKernel, DeviceError> {
        ctx.live()?;
        let (words, bindings) = crate::devices::spirv::parse(code)?;
        let l = &ctx.props.limits;
        let [x, y, z] = code.workgroup;
        let fits = x <= l.max_compute_work_group_size[0]
            && y <= l.max_compute_work_group_size[1]
            && z <= l.max_compute_work_group_size[2]
            && u64::from(x) * u64::from(y) * u64::from(z)
                <= u64::from(l.max_compute_work_group_invocations);
        if !fits || code.shared_bytes > l.max_compute_shared_memory_size {
            return Err(DeviceError::Other(format!(
                "kernel {}: work-group {x}x{y}x{z} with {} shared bytes exceeds {} (at most {} \
                 threads, {:?} per dimension, {} shared bytes)",
                code.name,
                code.shared_bytes,
                ctx.props.name,
                l.max_compute_work_group_invocations,
                l.max_compute_work_group_size,
                l.max_compute_shared_memory_size
            )));
        }
        let mut k = VulkanKernel {
            ctx: ctx.clone(),
            name: code.name.clone(),
            bindings,
            set_layout: vk::DescriptorSetLayout::null(),
            layout: vk::PipelineLayout::null(),
            pipeline: vk::Pipeline::null(),
            module: vk::ShaderModule::null(),
        };
        let d = &ctx.device;
        let err = |what: &str| {
            let what = format!("kernel {}: {what}", code.name);
            move |r: vk::Result| DeviceError::Other(format!("{what}: {r:?}"))
        };
        let slots: Vec<_> = (0..bindings)
            .map(|i| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(i)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            })
            .collect();
        // SAFETY: valid create infos; `k` destroys whatever was made if a later step fails.
        unsafe {
            k.set_layout = d
                .create_descriptor_set_layout(
                    &vk::DescriptorSetLayoutCreateInfo::default().bindings(&slots),
                    None,
                )
                .map_err(err("vkCreateDescriptorSetLayout"))?;
            let layouts = [k.set_layout];
            k.layout = d
                .create_pipeline_layout(
                    &vk::PipelineLayoutCreateInfo::default().set_layouts(&layouts),
                    None,
                )
                .map_err(err("vkCreatePipelineLayout"))?;
            k.module = d
                .create_shader_module(&vk::ShaderModuleCreateInfo::default().code(&words), None)
                .map_err(err("vkCreateShaderModule"))?;
            let entry = CString::new(code.name.clone())
                .map_err(|_| DeviceError::Other(format!("kernel {}: NUL in name", code.name)))?;
            let stage = vk::PipelineShaderStageCreateInfo::default()
                .stage(vk::ShaderStageFlags::COMPUTE)
                .module(k.module)
                .name(&entry);
            let info = vk::ComputePipelineCreateInfo::default()
                .stage(stage)
                .layout(k.layout);
            k.pipeline = d
                .create_compute_pipelines(vk::PipelineCache::null(), &[info], None)
                .map_err(|(_, r)| err("vkCreateComputePipelines")(r))?[0];
        }
        Ok(k)
    }
}

impl Drop for VulkanKernel {
    fn drop(&mut self) {
        if !self.ctx.may_destroy() {
            return;
        }
        let d = &self.ctx.device;
        // SAFETY: recordings using the pipeline are dropped first (the engine's field order)
        // and nothing is pending on a live context when the engine drops kernels.
        unsafe {
            d.destroy_pipeline(self.pipeline, None);
            d.destroy_shader_module(self.module, None);
            d.destroy_pipeline_layout(self.layout, None);
            d.destroy_descriptor_set_layout(self.set_layout, None);
        }
    }
}
