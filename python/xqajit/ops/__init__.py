"""The ops: one module per op, each with its eager function, its checks and its
torch custom op (torch.ops.xqajit.<op>). Adding an op: its C ABI in src/c_api/<op>.cpp, its args
struct in _abi.py, and a module here like gqa.py (decode) or mla.py (mla_decode) over _launch.py
and _register.py (docs/ADDING_AN_OP.md). An op's calls with optional tensors (lse, sparse indices,
sinks) trace to a second custom op of the same module (decode_lse, mla_decode_extras), which shares
the first's implementation; eager, they take their op's paths (the C fast path, the cached checks)
with those tensors as more arguments."""

from .gqa import decode, validate as validate_decode
from .mla import mla_decode, validate as validate_mla_decode

__all__ = ["decode", "validate_decode", "mla_decode", "validate_mla_decode"]
