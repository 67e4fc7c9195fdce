# suite.sh SUITE_TORCH=block: `import torch` raises ImportError in every Python process started
# with this folder on PYTHONPATH, so MLX's tests take their no-torch branches (and say so where
# they skip).
import sys


class _NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("torch blocked by suite.sh (SUITE_TORCH=block)")
        return None


sys.meta_path.insert(0, _NoTorch())
