//! The reference device: executes kernel IR on the CPU through `crate::reference`.
//!
//! It is the template for new backends and lets CI run every dispatch list: arenas are word
//! vectors, a recording is the resolved dispatch list, replay runs it in order, and every
//! access is checked against its binding (out of range is the kernel's fault).

use crate::device::{Device, arena_index, arena_sizes};
use crate::error::DeviceError;
use crate::reference::{Binding, Prepared};
use poot_bundle::{Arena, ArenaSizes, Dispatch, KernelCode, Target};

/// The CPU reference device.
#[derive(Default)]
pub struct ReferenceDevice {
    arenas: Vec<Vec<u32>>,
}

/// A resolved dispatch.
pub struct Resolved {
    kernel: usize,
    grid: [u32; 3],
    bindings: Vec<Binding>,
}

impl ReferenceDevice {
    /// A device with no arenas yet.
    pub fn new() -> ReferenceDevice {
        ReferenceDevice::default()
    }

    fn arena(&mut self, a: Arena) -> Result<&mut Vec<u32>, DeviceError> {
        self.arenas
            .get_mut(arena_index(a))
            .ok_or_else(|| DeviceError::Other("arenas are not allocated".into()))
    }

    fn resolve(dispatches: &[Dispatch]) -> Vec<Resolved> {
        dispatches
            .iter()
            .map(|d| Resolved {
                kernel: d.kernel as usize,
                grid: d.grid,
                bindings: d
                    .bindings
                    .iter()
                    .map(|b| Binding {
                        arena: arena_index(b.arena),
                        offset: (b.offset / 4) as usize,
                        len: b.len.div_ceil(4) as usize,
                    })
                    .collect(),
            })
            .collect()
    }

    fn run(&mut self, kernels: &[Prepared], list: &[Resolved]) -> Result<(), DeviceError> {
        for d in list {
            let k = kernels
                .get(d.kernel)
                .ok_or_else(|| DeviceError::Other(format!("no kernel {}", d.kernel)))?;
            k.run(d.grid, &d.bindings, &mut self.arenas)
                .map_err(|f| DeviceError::Fault {
                    kernel: f.kernel,
                    code: f.code,
                    detail: f.detail,
                })?;
        }
        Ok(())
    }
}

impl Device for ReferenceDevice {
    type Kernel = Prepared;
    type Recording = Vec<Resolved>;

    fn describe(&self) -> String {
        "reference (CPU)".into()
    }

    fn accepts(&self) -> Vec<Target> {
        vec![Target::Reference]
    }

    fn alloc(&mut self, s: &ArenaSizes) -> Result<(), DeviceError> {
        let words = |b: u64| usize::try_from(b.div_ceil(4)).unwrap_or(usize::MAX);
        self.arenas = arena_sizes(s)
            .iter()
            .map(|&b| vec![0u32; words(b)])
            .collect();
        Ok(())
    }

    fn write(&mut self, arena: Arena, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        let a = self.arena(arena)?;
        let start = (offset / 4) as usize;
        let end = start + data.len().div_ceil(4);
        let dst = a.get_mut(start..end).ok_or_else(|| {
            DeviceError::Other(format!(
                "write of {} bytes at {offset} leaves {arena:?}",
                data.len()
            ))
        })?;
        for (w, c) in dst.iter_mut().zip(data.chunks(4)) {
            let mut b = [0u8; 4];
            b[..c.len()].copy_from_slice(c);
            *w = u32::from_le_bytes(b);
        }
        Ok(())
    }

    fn read(&mut self, arena: Arena, offset: u64, out: &mut [u8]) -> Result<(), DeviceError> {
        let a = self.arena(arena)?;
        let start = (offset / 4) as usize;
        let end = start + out.len().div_ceil(4);
        let src = a.get(start..end).ok_or_else(|| {
            DeviceError::Other(format!(
                "read of {} bytes at {offset} leaves {arena:?}",
                out.len()
            ))
        })?;
        for (c, w) in out.chunks_mut(4).zip(src) {
            let b = w.to_le_bytes();
            c.copy_from_slice(&b[..c.len()]);
        }
        Ok(())
    }

    fn zero(&mut self, arena: Arena) -> Result<(), DeviceError> {
        self.arena(arena)?.fill(0);
        Ok(())
    }

    fn load_kernel(&mut self, code: &KernelCode) -> Result<Prepared, DeviceError> {
        let (k, _): (poot_kir::Kernel, usize) =
            bincode::serde::decode_from_slice(&code.code, bincode::config::standard()).map_err(
                |e| DeviceError::Other(format!("kernel {}: cannot decode: {e}", code.name)),
            )?;
        Prepared::new(&k).map_err(|f| DeviceError::Fault {
            kernel: f.kernel,
            code: f.code,
            detail: f.detail,
        })
    }

    fn record(
        &mut self,
        _: &[Prepared],
        dispatches: &[Dispatch],
    ) -> Result<Vec<Resolved>, DeviceError> {
        Ok(Self::resolve(dispatches))
    }

    fn replay(&mut self, kernels: &[Prepared], rec: &Vec<Resolved>) -> Result<(), DeviceError> {
        self.run(kernels, rec)
    }

    fn eager(&mut self, kernels: &[Prepared], dispatches: &[Dispatch]) -> Result<(), DeviceError> {
        let list = Self::resolve(dispatches);
        self.run(kernels, &list)
    }

    fn synchronize(&mut self) -> Result<(), DeviceError> {
        Ok(())
    }

    fn free(&mut self) {
        self.arenas.clear();
    }
}
