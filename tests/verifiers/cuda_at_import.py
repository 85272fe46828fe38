"""A verifier module that initialises (fake) CUDA when it is imported: its process must not fork block workers.

CPU torch: ``torch.cuda.is_initialized()`` is made true, no device is touched.
"""

import torch

from specaudit.verifiers.reference import verify

torch.cuda.is_initialized = lambda: True

__all__ = ["verify"]
