# suite.sh SUITE_TORCH=first: the image's torch imported before anything else (before MLX), in
# every Python process started with this folder on PYTHONPATH.
import torch  # noqa: F401
