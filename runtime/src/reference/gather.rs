//! Loads of many lanes at once: bounds checks, and the gather that copies each active lane's
//! words into component-major registers.
//!
//! Invariants: nothing is written unless every active lane's access is inside the buffer
//! (`first_oob` first); blocks of lanes that read consecutive vectors are copied as one slice
//! and transposed through fixed-size arrays (compiled for AVX2 where the CPU has it, so the
//! transposition is vector shuffles); everything else goes lane by lane through `get`.

/// The first active lane whose access of `comps` elements at its index leaves `len`, or is
/// not aligned to `comps` elements (kir's rule for vector accesses).
#[inline(always)]
pub(crate) fn first_oob(idx: &[u32], mask: &[u32], comps: usize, len: usize) -> Option<usize> {
    let limit = len.checked_sub(comps);
    let low = comps as u32 - 1; // comps is 1, 2 or 4
    // A vectorisable pass for the common case: the largest active index fits, and no active
    // index has low bits set.
    let (top, bits) = idx.iter().zip(mask).fold((0u32, 0u32), |(t, b), (&i, &m)| {
        let on = i & m.wrapping_neg();
        (t.max(on), b | (on & low))
    });
    if bits == 0 && limit.is_some_and(|l| top as usize <= l) {
        return None;
    }
    idx.iter()
        .zip(mask)
        .position(|(&i, &m)| m != 0 && (i & low != 0 || limit.is_none_or(|l| i as usize > l)))
}

/// How far ahead of a contiguous block [`gather_cols`] prefetches, in words: a subgroup
/// walking a matrix row reads the next words on its next iteration.
const PREFETCH: usize = 512;

/// Asks the CPU to start fetching `buf[i]`'s cache line (a hint; nothing is read).
#[inline(always)]
fn prefetch(buf: &[u32], i: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let p = buf.as_ptr().wrapping_add(i).cast::<i8>();
        // SAFETY: a prefetch never dereferences its address and never faults, whatever the
        // address; `sse` (its only target feature) is part of the x86_64 baseline.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (buf, i);
}

/// Lanes per block of [`gather_cols`].
const RUN: usize = 32;

/// `0, 1, ..., RUN - 1`.
const RAMP: [u32; RUN] = {
    let mut r = [0u32; RUN];
    let mut i = 0;
    while i < RUN {
        r[i] = i as u32; // ok: constant evaluation, i < RUN
        i += 1;
    }
    r
};

/// [`deinterleave`] of a whole block of [`RUN`] lanes through fixed-size arrays, which the
/// compiler turns into vector shuffles; `false` (nothing written) for other shapes.
#[inline(always)]
fn deinterleave_block<const N: usize>(
    src: &[u32],
    cols: &mut [&mut [u32]; N],
    lane0: usize,
) -> bool {
    let end = lane0.saturating_add(RUN);
    match cols.as_mut_slice() {
        [c0, c1, c2, c3] => {
            let (Ok(w), Some(a), Some(b), Some(c), Some(d)) = (
                <&[u32; 4 * RUN]>::try_from(src),
                c0.get_mut(lane0..end)
                    .and_then(|x| <&mut [u32; RUN]>::try_from(x).ok()),
                c1.get_mut(lane0..end)
                    .and_then(|x| <&mut [u32; RUN]>::try_from(x).ok()),
                c2.get_mut(lane0..end)
                    .and_then(|x| <&mut [u32; RUN]>::try_from(x).ok()),
                c3.get_mut(lane0..end)
                    .and_then(|x| <&mut [u32; RUN]>::try_from(x).ok()),
            ) else {
                return false;
            };
            for l in 0..RUN {
                // ok: l < RUN and 4 * l + 3 < 4 * RUN, the arrays' lengths.
                (a[l], b[l], c[l], d[l]) = (w[4 * l], w[4 * l + 1], w[4 * l + 2], w[4 * l + 3]);
            }
            true
        }
        [c0, c1] => {
            let (Ok(w), Some(a), Some(b)) = (
                <&[u32; 2 * RUN]>::try_from(src),
                c0.get_mut(lane0..end)
                    .and_then(|x| <&mut [u32; RUN]>::try_from(x).ok()),
                c1.get_mut(lane0..end)
                    .and_then(|x| <&mut [u32; RUN]>::try_from(x).ok()),
            ) else {
                return false;
            };
            for l in 0..RUN {
                // ok: l < RUN and 2 * l + 1 < 2 * RUN, the arrays' lengths.
                (a[l], b[l]) = (w[2 * l], w[2 * l + 1]);
            }
            true
        }
        _ => false,
    }
}

/// Copies `src` (`cols.len()`-word vectors of consecutive lanes) into the columns starting
/// at `lane0`, one loop per vector width so the transposition vectorises.
#[inline(always)]
fn deinterleave<const N: usize>(src: &[u32], cols: &mut [&mut [u32]; N], lane0: usize) {
    let lanes = src.len() / N;
    let end = lane0.saturating_add(lanes);
    match cols.as_mut_slice() {
        [c0] => {
            if let Some(d) = c0.get_mut(lane0..end).filter(|d| d.len() == src.len()) {
                d.copy_from_slice(src); // ok: equal lengths, checked just above
            }
        }
        [c0, c1] => {
            if let (Some(d0), Some(d1)) = (c0.get_mut(lane0..end), c1.get_mut(lane0..end)) {
                // Four lanes at a time: fixed-size arrays let the transposition vectorise.
                let (mut q0, mut q1) = (d0.chunks_exact_mut(4), d1.chunks_exact_mut(4));
                let mut ws = src.chunks_exact(8);
                for (w, (a, b)) in (&mut ws).zip((&mut q0).zip(&mut q1)) {
                    let (Ok(w), Ok(a), Ok(b)) = (
                        <&[u32; 8]>::try_from(w),
                        <&mut [u32; 4]>::try_from(a),
                        <&mut [u32; 4]>::try_from(b),
                    ) else {
                        continue;
                    };
                    // ok: constant indices into fixed-size arrays (checked at compile time).
                    *a = [w[0], w[2], w[4], w[6]];
                    *b = [w[1], w[3], w[5], w[7]];
                }
                let tail = q0.into_remainder().iter_mut().zip(q1.into_remainder());
                for (w, (a, b)) in ws.remainder().chunks_exact(2).zip(tail) {
                    if let &[x, y] = w {
                        (*a, *b) = (x, y);
                    }
                }
            }
        }
        [c0, c1, c2, c3] => {
            let d = (
                c0.get_mut(lane0..end),
                c1.get_mut(lane0..end),
                c2.get_mut(lane0..end),
                c3.get_mut(lane0..end),
            );
            if let (Some(d0), Some(d1), Some(d2), Some(d3)) = d {
                // Four lanes at a time: a 4x4 transposition of fixed-size arrays.
                let (mut q0, mut q1) = (d0.chunks_exact_mut(4), d1.chunks_exact_mut(4));
                let (mut q2, mut q3) = (d2.chunks_exact_mut(4), d3.chunks_exact_mut(4));
                let mut ws = src.chunks_exact(16);
                let quads = (&mut q0).zip(&mut q1).zip((&mut q2).zip(&mut q3));
                for (w, ((a, b), (c, e))) in (&mut ws).zip(quads) {
                    let (Ok(w), Ok(a), Ok(b), Ok(c), Ok(e)) = (
                        <&[u32; 16]>::try_from(w),
                        <&mut [u32; 4]>::try_from(a),
                        <&mut [u32; 4]>::try_from(b),
                        <&mut [u32; 4]>::try_from(c),
                        <&mut [u32; 4]>::try_from(e),
                    ) else {
                        continue;
                    };
                    // ok: constant indices into fixed-size arrays (checked at compile time).
                    *a = [w[0], w[4], w[8], w[12]];
                    *b = [w[1], w[5], w[9], w[13]];
                    *c = [w[2], w[6], w[10], w[14]];
                    *e = [w[3], w[7], w[11], w[15]];
                }
                let tail = q0.into_remainder().iter_mut().zip(q1.into_remainder());
                let tail = tail.zip(q2.into_remainder().iter_mut().zip(q3.into_remainder()));
                for (w, ((a, b), (c, e))) in ws.remainder().chunks_exact(4).zip(tail) {
                    if let &[x, y, z, u] = w {
                        (*a, *b, *c, *e) = (x, y, z, u);
                    }
                }
            }
        }
        _ => {}
    }
}

/// The gather proper, bounds already checked: blocks of up to [`RUN`] lanes, all active,
/// whose indices step by `N` (a subgroup reading consecutive vectors, an element-wise
/// kernel) are copied from one slice; other lanes one at a time.
#[inline(always)]
fn gather_cols<const N: usize>(mut cols: [&mut [u32]; N], idx: &[u32], mask: &[u32], buf: &[u32]) {
    for (blk, (ids, ms)) in idx.chunks(RUN).zip(mask.chunks(RUN)).enumerate() {
        let lane0 = blk * RUN; // ok: blk * RUN < idx.len()
        let first = ids.first().copied().unwrap_or(0);
        // One pass of bit operations (vectorisable): zero iff every lane is active and lane
        // `l` reads at `first + l * N`.
        let shift = N.trailing_zeros(); // N is 1, 2 or 4
        let off = ids
            .iter()
            .zip(ms)
            .zip(RAMP.iter())
            .fold(0u32, |acc, ((&i, &m), &l)| {
                acc | (i.wrapping_sub(first) ^ (l << shift)) | (m ^ 1)
            });
        let run = off == 0;
        let i0 = first as usize;
        let src = match i0.checked_add(ids.len() * N) {
            Some(end) if run => buf.get(i0..end),
            _ => None,
        };
        if let Some(src) = src {
            prefetch(buf, i0.wrapping_add(PREFETCH));
            if !deinterleave_block(src, &mut cols, lane0) {
                deinterleave(src, &mut cols, lane0);
            }
            continue;
        }
        for (l, (&i, &m)) in ids.iter().zip(ms).enumerate() {
            let i = i as usize;
            // ok: the caller's `first_oob` found no active lane with i + N > len.
            if m != 0
                && let Some(words) = buf.get(i..i + N)
            {
                for (col, &x) in cols.iter_mut().zip(words) {
                    // ok (the sum): lane0 + l < idx.len().
                    if let Some(d) = col.get_mut(lane0 + l) {
                        *d = x;
                    }
                }
            }
        }
    }
}

/// Reads `comps` consecutive words at each active lane's index into the component columns
/// of `d` (`threads` lanes each); `Err` names the first active lane whose access leaves `buf`
/// (nothing is written then).
pub(crate) fn gather(
    d: &mut [u32],
    idx: &[u32],
    mask: &[u32],
    buf: &[u32],
    comps: usize,
) -> Result<(), usize> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: `avx2` was detected at run time just above, the only requirement of
        // `gather_avx2` (a safe function compiled with that feature).
        return unsafe { gather_avx2(d, idx, mask, buf, comps) };
    }
    gather_any(d, idx, mask, buf, comps)
}

/// [`gather_any`] compiled for AVX2, where the transpositions become vector shuffles.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn gather_avx2(
    d: &mut [u32],
    idx: &[u32],
    mask: &[u32],
    buf: &[u32],
    comps: usize,
) -> Result<(), usize> {
    gather_any(d, idx, mask, buf, comps)
}

#[inline(always)]
fn gather_any(
    d: &mut [u32],
    idx: &[u32],
    mask: &[u32],
    buf: &[u32],
    comps: usize,
) -> Result<(), usize> {
    if let Some(lane) = first_oob(idx, mask, comps, buf.len()) {
        return Err(lane);
    }
    let t = idx.len();
    let mut cols = d.chunks_exact_mut(t.max(1));
    let mut col = || cols.next().unwrap_or_default();
    match comps {
        1 => gather_cols([col()], idx, mask, buf),
        2 => gather_cols([col(), col()], idx, mask, buf),
        _ => gather_cols([col(), col(), col(), col()], idx, mask, buf),
    }
    Ok(())
}
