"""xqajit for PyTorch: JIT-compiled, cached decode-attention kernels on torch tensors.

    import xqajit
    out = xqajit.decode(q, k_cache, v_cache, block_table, seq_lens)
    out = xqajit.mla_decode(q, kv_cache, block_table, seq_lens, sm_scale=192 ** -0.5)

Importing needs no GPU, no CUDA toolkit and not even libxqajit (loaded on first
use; see xqajit._library for where it is looked for). The ops need torch; spec(),
prewarm() and Engine work without it.
"""

from ._version import __version__
from .engine import Engine, PrewarmResult, default_engine, prewarm
from .errors import (ArgumentError, BundleError, CacheError, CompileError, CudaError, LibraryError, NotAvailableError,
                     SpecError, XqajitError)
from .spec import Spec, device_arch, spec

__all__ = [
    "__version__", "Engine", "default_engine", "Spec", "PrewarmResult", "spec", "prewarm", "device_arch",
    "XqajitError", "SpecError", "ArgumentError", "CompileError", "CudaError", "LibraryError", "CacheError",
    "BundleError", "NotAvailableError", "library_version",
]


def library_version() -> str:
    """The version of the libxqajit this package loaded (equal to __version__ when installed together)."""
    from ._library import library_version as _v

    return _v()


try:
    import torch as _torch  # noqa: F401
except ImportError:  # a prewarm host without torch: specs and the CLI still work
    pass
else:
    from .ops import decode, mla_decode, validate_decode, validate_mla_decode
    from .ops.gqa import decode_spec
    from .ops.mla import mla_decode_spec
    from .workspace import workspace

    __all__ += ["decode", "validate_decode", "decode_spec", "mla_decode", "validate_mla_decode", "mla_decode_spec",
                "workspace"]
