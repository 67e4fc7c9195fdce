//! The raw cxx bridge. Kept alone in this file because cxx-build regenerates and recompiles
//! the C++ side whenever it changes; the safe API lives in `lib.rs`.

#[cxx::bridge(namespace = "mlx_sys")]
pub(crate) mod bridge {
    /// The three arrays of MLX's affine quantization.
    struct Quantized {
        wq: UniquePtr<MlxArray>,
        scales: UniquePtr<MlxArray>,
        biases: UniquePtr<MlxArray>,
    }

    /// Kernel calls per path of the CPU transposed quantized matmul (overlay policy switch).
    struct QmmPathCounts {
        streamed: u64,
        row_by_row: u64,
    }

    unsafe extern "C++" {
        include!("mlx-sys/include/mlx_sys.h");

        type MlxArray;

        fn from_f32(data: &[f32], shape: &[i32]) -> Result<UniquePtr<MlxArray>>;
        fn from_u16_bits(data: &[u16], shape: &[i32], dtype: u8) -> Result<UniquePtr<MlxArray>>;
        fn shape(a: &MlxArray) -> Vec<i32>;
        fn dtype(a: &MlxArray) -> u8;
        fn eval(a: &MlxArray) -> Result<()>;
        fn to_f32(a: &MlxArray) -> Result<Vec<f32>>;
        fn to_u16_bits(a: &MlxArray) -> Result<Vec<u16>>;
        fn to_u32(a: &MlxArray) -> Result<Vec<u32>>;
        fn astype(a: &MlxArray, dtype: u8) -> Result<UniquePtr<MlxArray>>;
        fn matmul(a: &MlxArray, b: &MlxArray) -> Result<UniquePtr<MlxArray>>;
        fn quantize(w: &MlxArray, group_size: i32, bits: i32) -> Result<Quantized>;
        fn dequantize(
            wq: &MlxArray,
            scales: &MlxArray,
            biases: &MlxArray,
            group_size: i32,
            bits: i32,
        ) -> Result<UniquePtr<MlxArray>>;
        /// The block-vs-chain exactness probe (probe/exactness.h): options as
        /// `key=value;...`, the raw results as one JSON object.
        fn exactness_probe(spec: &str) -> Result<String>;
        /// The probe's seeded decoder for `spec`, written to `file` as an MLX checkpoint.
        fn exactness_write_checkpoint(spec: &str, file: &str) -> Result<()>;
        fn qmm_policy_available() -> bool;
        fn set_qmm_t_streamed(enabled: bool) -> Result<()>;
        fn qmm_t_streamed() -> Result<bool>;
        fn qmm_t_path_counts() -> Result<QmmPathCounts>;
        #[allow(clippy::too_many_arguments)]
        fn quantized_matmul(
            x: &MlxArray,
            wq: &MlxArray,
            scales: &MlxArray,
            biases: &MlxArray,
            transpose: bool,
            group_size: i32,
            bits: i32,
        ) -> Result<UniquePtr<MlxArray>>;
    }
}
