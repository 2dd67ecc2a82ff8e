//! How a decode matmul maps onto work-groups: how many output columns each subgroup sums
//! and how many subgroups share a column, each summing a part of `k`.
//!
//! Invariants: `parts` is 1, 2 or 4 and divides `MM_WARPS`; a split `k` (`parts > 1`) is
//! only chosen for a single matmul whose `k` holds at least `parts * KSPLIT_UNITS` units of
//! 32 weights; several columns per subgroup (`cols > 1`) are only chosen where the work-group's
//! columns (`Shape::per_group`) divide `n`, so no work-group is partly outside the output.

/// Subgroups per matmul work-group.
pub(super) const MM_WARPS: usize = 4;
/// Output columns per subgroup of a matmul as wide as a vocabulary (at least `WIDE_N`
/// columns): each lane has that many columns' weights in flight, and the grid is that many
/// times smaller. Narrower matmuls take one column per subgroup. On the H200, 8 instead of 4
/// took SmolLM2's vocabulary head from 15.9 to 14.0 us and Qwen2.5-0.5B's from 58.8 to 50.8
/// (decode step 356.6-353.8 to 355.8-352.0 us and 533.3-535.1 to 525.1-529.6).
const WIDE_COLS: usize = 8;
/// The output width from which a matmul takes `WIDE_COLS` columns per subgroup.
const WIDE_N: usize = 16384;
/// Output columns per subgroup of a dual matmul (a SwiGLU's gate and up) at least `DUAL_N`
/// wide: each lane has four units of weights in flight instead of two, its x loads and the
/// prologue's norm serve twice the weights, and the grid is half as large. On the H200,
/// Qwen2.5-0.5B's 4864-wide gate and up went from 15.1 to 9.6 us per layer (its 1216
/// work-groups needed two waves at 96 registers a thread). SmolLM2's 1536-wide one did not
/// gain before the input was staged; staged, its decode step went from 411.7-417.4 to
/// 402.5-406.8 us on CUDA (the kernel from 80.8 to 76.1 us a step) and from 686.1-717.9 to
/// 696.0-727.1 on Vulkan (the same kernels serve both): kept for CUDA.
const DUAL_COLS: usize = 2;
/// The output width from which a dual matmul takes `DUAL_COLS` columns per subgroup.
const DUAL_N: usize = 1536;
/// The fewest units of 32 weights each part of a split `k` sums.
const KSPLIT_UNITS: usize = 24;

/// Subgroups sharing each output column of a single matmul (one column per subgroup), each
/// summing a part of `k`, their sums added in shared memory in part order: 4 or 2 where each
/// part still holds `KSPLIT_UNITS` units of 32 weights (a down projection), so a long
/// reduction runs as more, shorter subgroups, and the grid grows by as much. On the H200:
/// Qwen2.5-0.5B's down projections (152 units, 4 parts) took its Vulkan step from 1089-1096
/// to 973-974 us (CUDA 784-785 against 787-788), SmolLM2's (48 units, 2 parts) CUDA from 488
/// to 477-479 us and Vulkan from 745 to 726-728; 2 parts for Qwen gave CUDA 776-779, Vulkan
/// 997-998.
fn k_parts(n: usize, k: usize, mms: usize, cpw: usize) -> usize {
    let units = if k.is_multiple_of(32) { k / 32 } else { 0 };
    [4, 2]
        .into_iter()
        .find(|&p| {
            mms == 1 && cpw == 1 && units >= p * KSPLIT_UNITS && n.is_multiple_of(MM_WARPS / p)
        })
        .unwrap_or(1)
}

/// The fewest work-groups a single matmul keeps when it takes several columns per subgroup
/// to read its input fewer times (`shared_input_cols`).
const SHARED_MIN_GRID: usize = 64;

/// Output columns per subgroup of a single matmul (one weight, no wide rule) whose `k` is
/// split in `parts` (1: not split): the most of 4 and 2 that keep at least
/// `SHARED_MIN_GRID` work-groups, else 1. Every work-group reads the whole input row (`k`
/// floats) for its columns, so with few columns a work-group a matmul read more input than
/// weights: Qwen2.5-0.5B's down projection read 19 KiB of input for 4 KiB of weights in each
/// of 896 work-groups (17 MiB from L2 for 3.4 MiB of weights). On the H200, decode step in
/// us: Qwen2.5-0.5B 558.9-563.1 with one column, 533.3-535.1 with 4 columns in its down
/// projections (224 work-groups), 502.6-503.7 with 2 in its q and o projections too (112);
/// SmolLM2 379.0-379.7, 353.8-356.7 with 2 columns in its down projections (144), then
/// 343.9-351.9 with 4 (72) and 2 in its q and o projections (72). Qwen's down projections
/// with 8 columns (112 work-groups) gave 524.3-524.6 against 523.7-526.3 with 4.
fn shared_input_cols(n: usize, parts: usize) -> usize {
    let groups = MM_WARPS / parts;
    [4, 2]
        .into_iter()
        .find(|&c| n.is_multiple_of(groups * c) && n / (groups * c) >= SHARED_MIN_GRID)
        .unwrap_or(1)
}

/// Output columns per subgroup of a matmul `n` wide computing `mms` matmuls of one input:
/// several only where they split evenly over the work-group's subgroups.
fn cols_per_subgroup(n: usize, mms: usize) -> usize {
    let even = |c: usize| n.is_multiple_of(MM_WARPS * c);
    if n >= WIDE_N && even(WIDE_COLS) {
        WIDE_COLS
    } else if mms > 1 && n >= DUAL_N && even(DUAL_COLS) {
        DUAL_COLS
    } else {
        1
    }
}

/// A decode matmul's work split: output columns per subgroup, and subgroups per column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Shape {
    /// Output columns each subgroup sums.
    pub(super) cols: usize,
    /// Subgroups sharing each column, each summing a part of `k`.
    pub(super) parts: usize,
}

impl Shape {
    /// Output columns per work-group.
    pub(super) fn per_group(self) -> usize {
        MM_WARPS * self.cols / self.parts
    }
}

/// The shape of `mms` matmuls (one, or a SwiGLU's gate and up) of one input, `n` columns
/// by `k`: the wide and dual rules (`cols_per_subgroup`), else a split `k` (`k_parts`) and
/// as many columns per subgroup as keep the grid large enough (`shared_input_cols`).
pub(super) fn shape(n: usize, k: usize, mms: usize) -> Shape {
    let cols = cols_per_subgroup(n, mms);
    let parts = k_parts(n, k, mms, cols);
    let cols = if mms == 1 && cols == 1 {
        shared_input_cols(n, parts)
    } else {
        cols
    };
    Shape { cols, parts }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (n, k, matmuls) to (columns per subgroup, parts, work-groups).
    fn grid(n: usize, k: usize, mms: usize) -> (usize, usize, usize) {
        let s = shape(n, k, mms);
        (s.cols, s.parts, n.div_ceil(s.per_group()))
    }

    #[test]
    fn smollm2_shapes() {
        assert_eq!(grid(576, 576, 1), (2, 1, 72), "q and o projections");
        assert_eq!(grid(192, 576, 1), (1, 1, 48), "k and v projections");
        assert_eq!(grid(1536, 576, 2), (2, 1, 192), "gate and up");
        assert_eq!(grid(576, 1536, 1), (4, 2, 72), "down projection");
        assert_eq!(grid(49152, 576, 1), (8, 1, 1536), "vocabulary head");
    }

    #[test]
    fn qwen25_05b_shapes() {
        assert_eq!(grid(896, 896, 1), (2, 1, 112), "q and o projections");
        assert_eq!(grid(128, 896, 1), (1, 1, 32), "k and v projections");
        assert_eq!(grid(4864, 896, 2), (2, 1, 608), "gate and up");
        assert_eq!(grid(896, 4864, 1), (4, 4, 224), "down projection");
        assert_eq!(grid(151936, 896, 1), (8, 1, 4748), "vocabulary head");
    }

    #[test]
    fn every_shape_keeps_the_invariants() {
        for n in (1..=5000)
            .step_by(37)
            .chain([64, 128, 512, 4096, 20000, 151936])
        {
            for k in [8, 32, 100, 576, 768, 1536, 3072, 4864, 14336] {
                for mms in [1, 2] {
                    let s = shape(n, k, mms);
                    assert!(matches!(s.parts, 1 | 2 | 4), "{n}x{k}: {s:?}");
                    assert_eq!(MM_WARPS % s.parts, 0, "{n}x{k}: {s:?}");
                    if s.parts > 1 {
                        assert!(mms == 1 && k % 32 == 0, "{n}x{k}x{mms}: {s:?}");
                        assert!(k / 32 >= s.parts * KSPLIT_UNITS, "{n}x{k}: {s:?}");
                        assert_eq!(n % (MM_WARPS / s.parts), 0, "{n}x{k}: {s:?}");
                    }
                    if s.cols > 1 {
                        assert_eq!(n % s.per_group(), 0, "{n}x{k}x{mms}: {s:?}");
                    }
                }
            }
        }
    }
}
