//! Reading a bundle's SPIR-V kernel code, for the Vulkan and wgpu devices.
//!
//! Invariant: a kernel's module is a whole number of little-endian words starting with the
//! SPIR-V magic, and declares bindings `0..n` of descriptor set 0 with its error words at
//! `n - 1` (poot-codegen-spirv's binding model); anything else is refused with the kernel's
//! name.

use crate::error::DeviceError;
use poot_bundle::KernelCode;

const MAGIC: u32 = 0x0723_0203;
const OP_DECORATE: u32 = 71;
const DECORATION_BINDING: u32 = 33;

fn bad(name: &str, why: impl std::fmt::Display) -> DeviceError {
    DeviceError::Other(format!("kernel {name}: {why}"))
}

/// The bytes to bind for a binding of `len` bytes at `offset` in a buffer of `size` bytes:
/// `len` rounded up to whole 16-byte units where the buffer has them (the planner's
/// 256-byte alignment leaves that room), so a kernel whose parameter is an array of 4-lane
/// vectors (poot-codegen-spirv) sees its last, partly used element whole; at least 4 bytes,
/// always a multiple of 4.
pub(crate) fn binding_range(offset: u64, len: u64, size: u64) -> u64 {
    let words = len.max(4).next_multiple_of(4);
    let room = size.saturating_sub(offset);
    words.next_multiple_of(16).min(room).max(words)
}

/// The fault of the first dispatch whose error word is set: dispatch `i` (running
/// `kernels[i]`) owns the little-endian `u32` at byte `i * stride` of `words`.
pub(crate) fn first_fault(words: &[u8], stride: usize, kernels: &[String]) -> Option<DeviceError> {
    kernels.iter().enumerate().find_map(|(i, kernel)| {
        let w = words.get(i * stride..i * stride + 4)?;
        let code = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        (code != 0).then(|| DeviceError::Fault {
            kernel: kernel.clone(),
            code,
            detail: format!(
                "dispatch {i} of {} set its error word (a failed kernel check); its results \
                 are discarded",
                kernels.len()
            ),
        })
    })
}

/// The module's words, and how many bindings it declares (one past the highest).
pub(crate) fn parse(code: &KernelCode) -> Result<(Vec<u32>, u32), DeviceError> {
    if !code.code.len().is_multiple_of(4) || code.code.len() < 20 {
        return Err(bad(
            &code.name,
            format!("{} bytes are not a SPIR-V module", code.code.len()),
        ));
    }
    let words: Vec<u32> = code
        .code
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    if words[0] != MAGIC {
        return Err(bad(
            &code.name,
            format!("magic {:#x} is not SPIR-V's", words[0]),
        ));
    }
    let mut at = 5;
    let mut bindings = 0;
    while at < words.len() {
        let (count, op) = ((words[at] >> 16) as usize, words[at] & 0xFFFF);
        if count == 0 || at + count > words.len() {
            return Err(bad(
                &code.name,
                format!("truncated instruction at word {at}"),
            ));
        }
        if op == OP_DECORATE && count == 4 && words[at + 2] == DECORATION_BINDING {
            bindings = bindings.max(words[at + 3] + 1);
        }
        at += count;
    }
    if bindings == 0 {
        return Err(bad(
            &code.name,
            "declares no buffer bindings (not even its error words)",
        ));
    }
    Ok((words, bindings))
}

#[cfg(feature = "wgpu")]
const OP_MEMBER_DECORATE: u32 = 72;
#[cfg(feature = "wgpu")]
const DECORATION_NON_WRITABLE: u32 = 24;

/// `words` without `NonWritable` decorations, so every buffer is read-write to the module's
/// consumer. wgpu treats a read-only and a read-write binding of one buffer in a dispatch as
/// conflicting uses, and poot binds ranges of one arena both ways; declaring all of them
/// read-write is one use. Dropping the decoration changes no behaviour: the module never
/// stores to those buffers.
#[cfg(feature = "wgpu")]
pub(crate) fn all_writable(words: &[u32]) -> Vec<u32> {
    let mut out = words[..5.min(words.len())].to_vec();
    let mut at = 5;
    while at < words.len() {
        let count = ((words[at] >> 16) as usize).max(1);
        let inst = &words[at..(at + count).min(words.len())];
        let op = inst[0] & 0xFFFF;
        let drop = (op == OP_DECORATE && inst.get(2) == Some(&DECORATION_NON_WRITABLE))
            || (op == OP_MEMBER_DECORATE && inst.get(3) == Some(&DECORATION_NON_WRITABLE));
        if !drop {
            out.extend_from_slice(inst);
        }
        at += count;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::binding_range;

    #[test]
    fn binding_ranges_round_to_whole_vectors_inside_the_buffer() {
        assert_eq!(binding_range(0, 40, 1024), 48);
        assert_eq!(binding_range(256, 64, 1024), 64);
        assert_eq!(binding_range(0, 0, 1024), 16);
        assert_eq!(binding_range(1000, 22, 1024), 24, "only the buffer's room");
        assert_eq!(binding_range(0, 6, 6), 8, "never below whole words");
    }
}
