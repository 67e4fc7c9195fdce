"""A pytest plugin that splits one test's subtests over several processes.

    SHARDED_TEST=test_x.py::Case::test_y python3 -m pytest -p shard_subtests ...     (the main run)
    SUBTEST_SHARD=I/N python3 -m pytest -p shard_subtests test_x.py::Case::test_y    (shard I of N)

MLX's test_qmm walks itertools.product(group_size, bits, M, N, K, transposed) in one test; each
new (group_size, bits) JIT-compiles its own kernels, so one process takes longer than a GPU
command may run. With SUBTEST_SHARD set, the first `product` each test calls yields only the
combinations whose first two factors are the I-th of every N (in product order): N processes
together run every combination once, and no two compile the same (group_size, bits) kernels.
Later `product` calls in the same test (nested loops) are left whole. With SHARDED_TEST set, the
main run leaves out exactly that test (pytest's --deselect matches prefixes: test_qmm would take
test_qmm_shapes with it), and stops with a usage error when it matches nothing.
Without either variable the plugin does nothing.
"""
import itertools
import os

# This process's shard's product (one pytest run per process), reset before each test so that each
# test's first call is sharded. The pure parts need no pytest (they are tested without it).
_product = None


class ShardedProduct:
    """itertools.product whose first call per test yields shard `index` of `count`."""

    def __init__(self, index, count):
        if not 0 <= index < count:
            raise ValueError(f"shard {index} of {count}: want 0 <= I < N")
        self.index, self.count, self.first = index, count, True

    def __call__(self, *factors, **kwargs):
        if not self.first or kwargs:
            return itertools.product(*factors, **kwargs)
        self.first = False
        factors = [list(f) for f in factors]
        keys = list(itertools.product(*factors[:2]))
        mine = {k for j, k in enumerate(keys) if j % self.count == self.index}
        return (c for c in itertools.product(*factors) if c[:2] in mine)


def parse(spec):
    try:
        index, count = (int(part) for part in spec.split("/"))
    except ValueError:
        raise ValueError(f"SUBTEST_SHARD={spec!r}: want I/N, e.g. 0/9") from None
    return ShardedProduct(index, count)


def is_test(nodeid, wanted):
    """Whether `nodeid` (relative to pytest's rootdir) names exactly the test `wanted` (relative
    to the folder pytest runs in, or to the rootdir)."""
    return nodeid == wanted or nodeid.endswith("/" + wanted)


def pytest_collection_modifyitems(session, config, items):
    spec, left_out = os.environ.get("SUBTEST_SHARD"), os.environ.get("SHARDED_TEST")
    global _product
    if spec:
        _product = parse(spec)
        for module in {item.module for item in items if getattr(item, "module", None)}:
            if getattr(module, "product", None) is itertools.product:
                module.product = _product
    if left_out:
        gone = [item for item in items if is_test(item.nodeid, left_out)]
        if not gone:
            import pytest

            raise pytest.UsageError(f"SHARDED_TEST={left_out}: no such test was collected")
        items[:] = [item for item in items if item not in gone]
        config.hook.pytest_deselected(items=gone)


def pytest_runtest_setup(item):
    if _product is not None:
        _product.first = True

