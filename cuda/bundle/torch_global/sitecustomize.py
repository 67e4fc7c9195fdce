# suite.sh SUITE_TORCH=global: extension modules (MLX's among them) are opened with RTLD_GLOBAL |
# RTLD_NOW in every Python process started with this folder on PYTHONPATH, so their libraries
# are in the global scope, as an executable's are. On the H200 image (torch 2.11, cuDNN 9.19),
# importing MLX first and torch second aborts at `import torch` (free(): invalid pointer) with
# Python's default RTLD_LOCAL, and imports with this (h200-pipeline.sh's probe step measures
# both and picks the mode).
import os
import sys

sys.setdlopenflags(os.RTLD_GLOBAL | os.RTLD_NOW)
