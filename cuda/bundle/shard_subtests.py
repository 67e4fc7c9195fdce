"""A pytest plugin that splits one test's subtests over several processes.

    SUBTEST_SHARD=I/N python3 -m pytest -p shard_subtests test_x.py::Case::test_y

MLX's test_qmm walks itertools.product(group_size, bits, M, N, K, transposed) in one test; each
new (group_size, bits) JIT-compiles its own kernels, so one process takes longer than a GPU
command may run. With SUBTEST_SHARD set, the collected test modules' `product` runs only the
combinations whose first two factors are the I-th of every N (in product order): N processes
together run every combination once, and no two compile the same (group_size, bits) kernels.
Without SUBTEST_SHARD the plugin does nothing.
"""
import itertools
import os


def sharded_product(index, count):
    """itertools.product restricted to shard `index` of `count`, keyed by the first two factors."""
    if not 0 <= index < count:
        raise ValueError(f"shard {index} of {count}: want 0 <= I < N")

    def product(*factors):
        factors = [list(f) for f in factors]
        keys = list(itertools.product(*factors[:2]))
        mine = {k for j, k in enumerate(keys) if j % count == index}
        return (c for c in itertools.product(*factors) if c[:2] in mine)

    return product


def parse(spec):
    try:
        index, count = (int(part) for part in spec.split("/"))
    except ValueError:
        raise ValueError(f"SUBTEST_SHARD={spec!r}: want I/N, e.g. 0/9") from None
    sharded_product(index, count)
    return index, count


def pytest_collection_modifyitems(session, config, items):
    spec = os.environ.get("SUBTEST_SHARD")
    if not spec:
        return
    index, count = parse(spec)
    for module in {item.module for item in items if getattr(item, "module", None)}:
        if getattr(module, "product", None) is itertools.product:
            module.product = sharded_product(index, count)
