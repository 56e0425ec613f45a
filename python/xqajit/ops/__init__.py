"""The ops: one module per op, each with its eager function, its checks and its
torch custom op (torch.ops.xqajit.<op>). Adding an op: its C ABI in src/c_api/<op>.cpp, its args
struct in _abi.py, and a module here like gqa.py (decode) or mla.py (mla_decode) over _launch.py
and _register.py (docs/ADDING_AN_OP.md). gqa_lse.py and mla_extras.py: the calls with lse, sparse
indices or sinks, each with a custom op of its own; eager, they take their op's paths (the C fast
path, the cached checks) with those tensors as more arguments."""

from .gqa import decode, validate as validate_decode
from .mla import mla_decode, validate as validate_mla_decode

__all__ = ["decode", "validate_decode", "mla_decode", "validate_mla_decode"]
