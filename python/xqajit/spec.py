"""xqajit.spec(): kernel specs by fields or canonical name (xqajit.prewarm() is
engine.py's: the engine builds on specs, never the other way round).

Needs libxqajit but no GPU and no torch; where no GPU is visible, `arch` must be
given (e.g. arch="sm_90a").
"""

from __future__ import annotations

import ctypes
import json
from dataclasses import dataclass, field
from typing import Mapping, Optional, Union

from . import _library


@dataclass(frozen=True)
class Spec:
    """A validated kernel spec: its canonical name, compiler flags and fields."""

    name: str
    flags: tuple = ()
    fields: Mapping[str, str] = field(default_factory=dict)
    # Canonical names of every kernel a launch of this spec may use (backend=auto
    # GQA on sm_90a picks per call between two): what prewarm() compiles for it.
    kernels: tuple = field(default=(), compare=False)

    def __str__(self) -> str:
        return self.name


SpecLike = Union[Spec, str, Mapping[str, object]]


def _as_json(spec: SpecLike) -> object:
    if isinstance(spec, Spec):
        return {"name": spec.name}
    if isinstance(spec, str):
        if "=" in spec:  # "input=bf16 kv=fp8 ..." as on the command line
            return dict(part.split("=", 1) for part in spec.split())
        return {"name": spec}
    return {k: v for k, v in spec.items() if v is not None}


def spec(name: Optional[str] = None, **fields) -> Spec:
    """Validates a spec given by canonical name or fields and returns it.

    xqajit.spec(input="bf16", kv="fp8", head_dim=128, page_size=64, group=8, arch="sm_90a")
    xqajit.spec("gqa_bf16_kvfp8_obf16_d128_p64_g8_q1_sw0_t128_sm90a")
    Raises SpecError naming the field, the value and what is allowed.
    """
    request = _as_json(name) if name is not None else _as_json(fields)
    result = _library.call_json("xqajit_spec", json.dumps(request).encode())
    return Spec(result["name"], tuple(result["flags"]), result["fields"], tuple(result.get("kernels", ())))


def device_arch(device: int = 0) -> str:
    """The best arch to compile for on GPU `device` ("sm_90a" on an H100)."""
    out = ctypes.c_char_p()
    status = _library.library().xqajit_device_arch(int(device), ctypes.byref(out))
    if status:
        _library.raise_last_error(status)
    return out.value.decode()
