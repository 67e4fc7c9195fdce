//! Helpers shared by the bridge's test binaries (each binary uses a subset).
#![allow(dead_code)]

use mlx_sys::{Array, Dtype};

/// xorshift64*: deterministic data without a rand dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// The raw bits of every element, for bitwise comparisons across dtypes.
pub fn bits_of(a: &Array) -> Vec<u32> {
    match a.dtype() {
        Dtype::Float32 => a
            .to_f32_vec()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect(),
        _ => a
            .to_u16_bits()
            .unwrap()
            .iter()
            .map(|&v| u32::from(v))
            .collect(),
    }
}
