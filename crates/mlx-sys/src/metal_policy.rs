//! The fork's Metal M >= 2 mat-vec policy (overlay `0005-metal-qmv-batch-policy`): which kernel
//! affine `quantized_matmul` runs for 2 <= M < MLX's qmv batch limit on the GPU.
//!
//! Only built with the `metal` feature, against an MLX built with Metal (macOS): the C++ side
//! calls `mlx::core::metal::{qmv_batch_policy, set_qmv_batch_policy}` from
//! `mlx/backend/metal/qmv_policy.h`. Its own bridge (not `ffi.rs`), so CPU builds never see it.
//!
//! The policy is a process-wide atomic read once per dispatch. It is not taken under the
//! bridge's MLX lock: switch it only while no other thread is evaluating, or a graph may mix
//! policies (each dispatch still runs one whole kernel).

#[cxx::bridge(namespace = "mlx_sys::metal_policy")]
mod bridge {
    unsafe extern "C++" {
        include!("mlx-sys/src/metal_policy.h");

        /// 0 upstream, 1 narrow, 2 streamed (the order of `QmvBatchPolicy`).
        fn qmv_batch_policy() -> u8;
        fn set_qmv_batch_policy(policy: u8) -> Result<()>;
    }
}

/// Mirrors `mlx::core::metal::QmvBatchPolicy`; the codes are checked on the C++ side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QmvBatchPolicy {
    /// MLX's choice: `qmv_wide` on generation 15+, else the M = 1 kernel with grid.x = M.
    Upstream,
    /// The M = 1 kernel with grid.x = M: every row bit-identical to M = 1, weights re-read per row.
    Narrow,
    /// The streamed twin of the M = 1 kernel: bit-identical to M = 1, up to 5 vectors per read.
    Streamed,
}

impl QmvBatchPolicy {
    pub const ALL: [QmvBatchPolicy; 3] = [Self::Upstream, Self::Narrow, Self::Streamed];

    /// The spelling of `MLX_METAL_QMV_BATCH_POLICY`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Upstream => "upstream",
            Self::Narrow => "narrow",
            Self::Streamed => "streamed",
        }
    }

    fn code(self) -> u8 {
        match self {
            Self::Upstream => 0,
            Self::Narrow => 1,
            Self::Streamed => 2,
        }
    }
}

/// The policy later dispatches use (initially from `MLX_METAL_QMV_BATCH_POLICY`).
pub fn qmv_batch_policy() -> QmvBatchPolicy {
    match bridge::qmv_batch_policy() {
        0 => QmvBatchPolicy::Upstream,
        1 => QmvBatchPolicy::Narrow,
        2 => QmvBatchPolicy::Streamed,
        c => panic!("mlx-sys metal_policy bridge returned unknown policy code {c}"),
    }
}

/// Sets the policy for later dispatches (see the module docs on threads).
pub fn set_qmv_batch_policy(policy: QmvBatchPolicy) -> crate::Result<()> {
    Ok(bridge::set_qmv_batch_policy(policy.code())?)
}
