"""Packed argument structs of the C ABI (include/xqajit/c_api.h), one per op.

Each op's struct is declared once as a ctypes.Structure (so the C layout,
padding included, comes from ctypes) and packed with one struct.pack_into call
into a per-thread buffer: filling ~50 fields costs one C call, not 50 ctypes
attribute writes. That is most of what keeps `decode` under 5 us per call.
"""

from __future__ import annotations

import ctypes
import struct
import threading

_CODES = {
    ctypes.c_uint64: "Q", ctypes.c_int64: "q", ctypes.c_int32: "i", ctypes.c_uint32: "I",
    ctypes.c_float: "f", ctypes.c_void_p: "Q",
}


class ArgsStruct:
    """A C struct packed from a tuple of field values in declaration order."""

    def __init__(self, name: str, fields: list):
        self.ctype = type(name, (ctypes.Structure,), {"_fields_": fields})
        self.size = ctypes.sizeof(self.ctype)
        fmt, end = "<", 0
        for fname, ftype in fields:
            offset = getattr(self.ctype, fname).offset
            fmt += "x" * (offset - end) + _CODES[ftype]
            end = offset + ctypes.sizeof(ftype)
        fmt += "x" * (self.size - end)
        self.packer = struct.Struct(fmt)
        assert self.packer.size == self.size, (name, self.packer.size, self.size)
        self.names = [f for f, _ in fields]
        self._local = threading.local()

    def offset(self, field: str) -> int:
        return getattr(self.ctype, field).offset

    def buffer(self):
        """This thread's (buffer, address) for packing and passing to C."""
        local = self._local
        try:
            return local.buf, local.addr
        except AttributeError:
            local.buf = ctypes.create_string_buffer(self.size)
            local.addr = ctypes.addressof(local.buf)
            return local.buf, local.addr

    def read_u64(self, buf, field: str) -> int:
        return struct.unpack_from("<Q", buf, self.offset(field))[0]


_p, _u64, _i64, _i32, _f32 = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int64, ctypes.c_int32, ctypes.c_float

# XqajitDecodeArgs, field for field.
DECODE_ARGS = ArgsStruct(
    "XqajitDecodeArgs",
    [("struct_size", _u64), ("engine", _p), ("stream", _p), ("q", _p), ("out", _p), ("k_cache", _p),
     ("v_cache", _p), ("block_table", _p), ("seq_lens", _p), ("sinks", _p), ("spec_mask", _p),
     ("q_scale_ptr", _p), ("kv_scale_ptr", _p), ("rcp_out_scale_ptr", _p), ("workspace", _p),
     ("workspace_bytes", _u64), ("needed_workspace_bytes", _u64)]
    + [(n, _i64) for n in ("q_stride_batch", "q_stride_token", "q_stride_head", "out_stride_batch",
                           "out_stride_token", "out_stride_head", "k_stride_page", "k_stride_token",
                           "k_stride_head", "v_stride_page", "v_stride_token", "v_stride_head",
                           "block_table_stride")]
    + [(n, _i32) for n in ("input", "kv", "output", "batch", "q_len", "num_q_heads", "num_kv_heads",
                           "head_dim", "page_size", "num_pages", "max_pages_per_seq", "sliding_window",
                           "num_splits", "kv_tile", "programmatic_dependent_launch")]
    + [(n, _f32) for n in ("q_scale", "kv_scale", "rcp_out_scale")]
    # The optional lse output and its strides (zeros for a call without it).
    + [("lse", _p)] + [(n, _i64) for n in ("lse_stride_batch", "lse_stride_token", "lse_stride_head")],
)

# XqajitMlaDecodeArgs, field for field.
MLA_DECODE_ARGS = ArgsStruct(
    "XqajitMlaDecodeArgs",
    [("struct_size", _u64), ("engine", _p), ("stream", _p), ("q", _p), ("out", _p), ("kv_cache", _p),
     ("block_table", _p), ("seq_lens", _p), ("spec_mask", _p), ("q_scale_ptr", _p), ("kv_scale_ptr", _p),
     ("workspace", _p), ("workspace_bytes", _u64), ("needed_workspace_bytes", _u64)]
    + [(n, _i64) for n in ("q_stride_batch", "q_stride_token", "q_stride_head", "out_stride_batch",
                           "out_stride_token", "out_stride_head", "kv_stride_page", "kv_stride_token",
                           "block_table_stride")]
    + [(n, _i32) for n in ("input", "kv", "batch", "q_len", "num_heads", "page_size", "num_pages",
                           "max_pages_per_seq", "backend", "num_splits", "kv_tile", "programmatic_dependent_launch")]
    + [(n, _f32) for n in ("sm_scale", "q_scale", "kv_scale")]
    # Sparse MLA and the optional outputs (mla.TAIL_FIELDS: zeros for a plain dense call).
    + [("topk", _i32), ("indices", _p), ("topk_length", _p), ("lse", _p), ("attn_sink", _p)]
    + [(n, _i64) for n in ("indices_stride_batch", "indices_stride_token", "lse_stride_batch",
                           "lse_stride_token", "lse_stride_head")],
)
