"""pytest plugin (-p mlx_seed): every test starts from the same random state, MLX's and numpy's
global generators seeded with MLX_TEST_SEED (default 0) before it runs.

MLX's own tests draw unseeded inputs (MLX seeds its generator from the clock), so two runs of
one test see different numbers: test_double's test_gemm compares an 8x8 float32 matmul with the
float64 one at rtol 1e-5, atol 1e-8, which some draws fail on any summation order. A comparison
of the fork with the pin must give both the same inputs, or such a test fails one side by chance.
Used by `cargo xtask test-upstream` (CPU) and cuda/bundle/suite.sh (the GPU machine).
"""
import os

import pytest


@pytest.fixture(autouse=True)
def _mlx_seed():
    seed = int(os.environ.get("MLX_TEST_SEED", "0"))
    import mlx.core as mx

    mx.random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:
        pass
    yield
