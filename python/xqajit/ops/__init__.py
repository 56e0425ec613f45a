"""The ops: one module per op, each with its eager function, its checks and its
torch custom op (torch.ops.xqajit.<op>). Adding an op: a C ABI function in
src/c_api_<op>.cpp, its args struct in _abi.py, and a module here like gqa.py (decode) or mla.py (mla_decode)."""

from .gqa import decode, validate as validate_decode
from .mla import mla_decode, validate as validate_mla_decode

__all__ = ["decode", "validate_decode", "mla_decode", "validate_mla_decode"]
