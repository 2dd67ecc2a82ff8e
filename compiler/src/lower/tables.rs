//! Compile-time tables the kernels read (rope cos/sin), computed with exactly the f32
//! operations `poot_eval` uses, so a table lookup equals the reference bit for bit.
//!
//! Invariant: a table is shared by every kernel of a program that asks for the same
//! parameters, and its rows cover positions `0..len` (the cache capacity).

/// The tables of one program (no `Default`: rope tables need at least one row).
pub struct Tables {
    /// Rows of rope tables: positions covered.
    pub len: usize,
    /// `(name, values)` in creation order.
    pub data: Vec<(String, Vec<f32>)>,
    rope: Vec<((u32, usize), (usize, usize))>,
}

impl Tables {
    /// Tables for positions `0..len`.
    pub fn new(len: usize) -> Tables {
        Tables {
            len: len.max(1),
            data: Vec::new(),
            rope: Vec::new(),
        }
    }

    /// The `(cos, sin, rows)` tables `[len, dims / 2]` for rope with `base` over `dims`.
    pub fn rope(&mut self, base: f32, dims: usize) -> (usize, usize, usize) {
        let key = (base.to_bits(), dims);
        if let Some((_, t)) = self.rope.iter().find(|(k, _)| *k == key) {
            return (t.0, t.1, self.len);
        }
        let inv: Vec<f32> = (0..dims / 2)
            .map(|i| 1.0 / base.powf((2 * i) as f32 / dims as f32))
            .collect();
        let (mut cos, mut sin) = (Vec::new(), Vec::new());
        for p in 0..self.len {
            for &f in &inv {
                let a = p as f32 * f;
                cos.push(a.cos());
                sin.push(a.sin());
            }
        }
        self.data.push((format!("rope.cos.{base:?}.{dims}"), cos));
        self.data.push((format!("rope.sin.{base:?}.{dims}"), sin));
        let t = (self.data.len() - 2, self.data.len() - 1);
        self.rope.push((key, t));
        (t.0, t.1, self.len)
    }
}
