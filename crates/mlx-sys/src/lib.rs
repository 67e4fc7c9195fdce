//! Rust bindings to MLX (the pinned upstream plus this repository's overlays), through a thin
//! [cxx] bridge.
//!
//! The MLX static library is not built here: `cargo xtask build-mlx` builds and installs it and
//! writes `target/mlx/build-info.json`, which this crate's build script reads.
//!
//! # Threads
//!
//! Every MLX call made through this crate runs under one process-wide lock on one shared
//! stream. At the pinned commit MLX's default streams are per-thread and a stream is only
//! usable from the thread that created it, while Rust code (and `cargo test`) moves values
//! across threads; serializing is the simple way to make [`Array`] `Send + Sync`. MLX still
//! parallelizes inside a kernel.
//!
//! # Errors
//!
//! Every fallible call returns [`Result`]. Inputs are validated before an MLX graph is built,
//! because an exception thrown by a kernel inside `eval` would abort the process.

mod ffi;
#[cfg(feature = "metal")]
pub mod metal_policy;

use cxx::UniquePtr;
use ffi::bridge;

/// An MLX error: a C++ exception message (from MLX or from the bridge's validation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(String);

impl Error {
    /// The message, e.g. `[quantize] group_size must be 32, 64 or 128, got 16`.
    pub fn message(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl From<cxx::Exception> for Error {
    fn from(e: cxx::Exception) -> Self {
        Error(e.what().to_string())
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// MLX element types. The discriminants are the bridge's stable codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Dtype {
    Bool = 0,
    Uint8 = 1,
    Uint16 = 2,
    Uint32 = 3,
    Uint64 = 4,
    Int8 = 5,
    Int16 = 6,
    Int32 = 7,
    Int64 = 8,
    Float16 = 9,
    Float32 = 10,
    Float64 = 11,
    Bfloat16 = 12,
    Complex64 = 13,
}

impl Dtype {
    const ALL: [Dtype; 14] = [
        Dtype::Bool,
        Dtype::Uint8,
        Dtype::Uint16,
        Dtype::Uint32,
        Dtype::Uint64,
        Dtype::Int8,
        Dtype::Int16,
        Dtype::Int32,
        Dtype::Int64,
        Dtype::Float16,
        Dtype::Float32,
        Dtype::Float64,
        Dtype::Bfloat16,
        Dtype::Complex64,
    ];

    fn from_code(code: u8) -> Dtype {
        *Self::ALL
            .get(usize::from(code))
            .unwrap_or_else(|| panic!("mlx-sys bridge returned unknown dtype code {code}"))
    }
}

/// A (lazy) MLX array. Operations build a graph; [`Array::eval`] or any read evaluates it.
pub struct Array {
    inner: UniquePtr<bridge::MlxArray>,
}

// SAFETY: every access to the C++ object, including its destructor, happens under the bridge's
// global MLX lock on a stream usable from any thread (see the crate docs).
unsafe impl Send for Array {}
// SAFETY: as above; `&Array` only allows calls that take the same lock.
unsafe impl Sync for Array {}

impl std::fmt::Debug for Array {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Array")
            .field("dtype", &self.dtype())
            .field("shape", &self.shape())
            .finish()
    }
}

impl Array {
    fn wrap(inner: UniquePtr<bridge::MlxArray>) -> Array {
        assert!(!inner.is_null(), "mlx-sys bridge returned a null array");
        Array { inner }
    }

    fn raw(&self) -> &bridge::MlxArray {
        self.inner.as_ref().expect("non-null by construction")
    }

    /// A float32 array copied from `data` (row-major) with `shape`.
    pub fn from_f32(data: &[f32], shape: &[i32]) -> Result<Array> {
        Ok(Array::wrap(bridge::from_f32(data, shape)?))
    }

    /// A float16 array from IEEE half-precision bit patterns.
    pub fn from_f16_bits(data: &[u16], shape: &[i32]) -> Result<Array> {
        Ok(Array::wrap(bridge::from_u16_bits(
            data,
            shape,
            Dtype::Float16 as u8,
        )?))
    }

    /// A bfloat16 array from bfloat16 bit patterns (the upper half of an f32).
    pub fn from_bf16_bits(data: &[u16], shape: &[i32]) -> Result<Array> {
        Ok(Array::wrap(bridge::from_u16_bits(
            data,
            shape,
            Dtype::Bfloat16 as u8,
        )?))
    }

    pub fn shape(&self) -> Vec<i32> {
        bridge::shape(self.raw())
    }

    /// Number of elements.
    pub fn size(&self) -> usize {
        self.shape().iter().map(|&d| d as usize).product()
    }

    pub fn dtype(&self) -> Dtype {
        Dtype::from_code(bridge::dtype(self.raw()))
    }

    /// Evaluates the graph behind this array.
    pub fn eval(&self) -> Result<()> {
        Ok(bridge::eval(self.raw())?)
    }

    /// Evaluates and returns the elements converted to f32, row-major.
    pub fn to_f32_vec(&self) -> Result<Vec<f32>> {
        Ok(bridge::to_f32(self.raw())?)
    }

    /// Evaluates and returns the raw 16-bit patterns of a float16/bfloat16/uint16 array.
    pub fn to_u16_bits(&self) -> Result<Vec<u16>> {
        Ok(bridge::to_u16_bits(self.raw())?)
    }

    /// Evaluates and returns a uint32 array (e.g. packed quantized weights).
    pub fn to_u32_vec(&self) -> Result<Vec<u32>> {
        Ok(bridge::to_u32(self.raw())?)
    }

    /// Converts the element type (lazily).
    pub fn astype(&self, dtype: Dtype) -> Result<Array> {
        Ok(Array::wrap(bridge::astype(self.raw(), dtype as u8)?))
    }
}

/// Affine-quantized weights as returned by [`quantize`]: `w ≈ scales * q + biases` per group
/// of `group_size` consecutive elements along the last axis, `q` packed `bits` wide into u32.
#[derive(Debug)]
pub struct Quantized {
    pub wq: Array,
    pub scales: Array,
    pub biases: Array,
}

/// Affine quantization of `w` (at least 2-D, float) along its last axis.
/// `group_size` ∈ {32, 64, 128}, `bits` ∈ {2, 3, 4, 5, 6, 8}.
pub fn quantize(w: &Array, group_size: i32, bits: i32) -> Result<Quantized> {
    let q = bridge::quantize(w.raw(), group_size, bits)?;
    Ok(Quantized {
        wq: Array::wrap(q.wq),
        scales: Array::wrap(q.scales),
        biases: Array::wrap(q.biases),
    })
}

/// Inverse of [`quantize`]; the result has the dtype of `scales`.
pub fn dequantize(
    wq: &Array,
    scales: &Array,
    biases: &Array,
    group_size: i32,
    bits: i32,
) -> Result<Array> {
    Ok(Array::wrap(bridge::dequantize(
        wq.raw(),
        scales.raw(),
        biases.raw(),
        group_size,
        bits,
    )?))
}

/// `x @ dequantize(w).T` when `transpose`, else `x @ dequantize(w)`, without materializing
/// the dequantized matrix.
pub fn quantized_matmul(
    x: &Array,
    wq: &Array,
    scales: &Array,
    biases: &Array,
    transpose: bool,
    group_size: i32,
    bits: i32,
) -> Result<Array> {
    Ok(Array::wrap(bridge::quantized_matmul(
        x.raw(),
        wq.raw(),
        scales.raw(),
        biases.raw(),
        transpose,
        group_size,
        bits,
    )?))
}

/// Matrix product with NumPy broadcasting rules (float16/bfloat16/float32).
pub fn matmul(a: &Array, b: &Array) -> Result<Array> {
    Ok(Array::wrap(bridge::matmul(a.raw(), b.raw())?))
}

/// Runs the block-vs-chain exactness probe (`probe/exactness.h`, docs/kernels/exactness.md)
/// with options `spec` (`key=value;...`) and returns its raw results as one JSON object.
/// Progress lines go to stderr. Under whatever CPU policy is set ([`qmm_policy`]).
pub fn exactness_probe(spec: &str) -> Result<String> {
    Ok(bridge::exactness_probe(spec)?)
}

/// Writes the probe's seeded decoder for `spec` to `file` (safetensors, mlx-lm's tensor names):
/// a checkpoint for testing the probe's checkpoint mode (config.json is the caller's).
pub fn exactness_write_checkpoint(spec: &str, file: &std::path::Path) -> Result<()> {
    let file = file
        .to_str()
        .ok_or_else(|| Error("exactness: the checkpoint path is not UTF-8".into()))?;
    Ok(bridge::exactness_write_checkpoint(spec, file)?)
}

/// Which kernel the CPU backend's affine `quantized_matmul` with transposed weights runs for
/// 2..=16 rows: the fork's row-streamed kernels or MLX's row-by-row loops. A fork-local
/// switch (overlay `0002-cpu-qmm-t-policy-switch`), process-wide, read when a kernel runs.
pub mod qmm_policy {
    use super::{Result, bridge};

    /// Kernel calls (one per batch element) that took each path since the process started.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct PathCounts {
        pub streamed: u64,
        pub row_by_row: u64,
    }

    /// Whether the linked MLX carries the switch; the other functions fail without it.
    pub fn available() -> bool {
        bridge::qmm_policy_available()
    }

    /// Streams rows through each decoded weight when `true` (the overlay's default).
    pub fn set_streamed(enabled: bool) -> Result<()> {
        Ok(bridge::set_qmm_t_streamed(enabled)?)
    }

    pub fn streamed() -> Result<bool> {
        Ok(bridge::qmm_t_streamed()?)
    }

    pub fn path_counts() -> Result<PathCounts> {
        let c = bridge::qmm_t_path_counts()?;
        Ok(PathCounts {
            streamed: c.streamed,
            row_by_row: c.row_by_row,
        })
    }
}
