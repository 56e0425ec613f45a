"""xqajit.Engine: the C++ engine (memory -> bundles -> disk cache -> NVRTC) and its options.

Options left as None come from the environment (XQAJIT_CACHE_DIR, XQAJIT_BUNDLES,
XQAJIT_NO_COMPILE, ...; the README's table). Most programs need only the default
engine, which every op uses unless given `engine=`.
"""

from __future__ import annotations

import ctypes
import json
import os
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional, Union

from . import _library
from .spec import Spec, SpecLike, _as_json


class Engine:
    """An engine with its own options, kernel cache and statistics."""

    def __init__(
        self,
        *,
        cache_dir: Optional[str | os.PathLike] = None,
        disk_cache: Optional[bool] = None,
        cache_max_bytes: Optional[int] = None,
        bundles: Optional[Iterable[str | os.PathLike]] = None,
        no_compile: Optional[bool] = None,
        template_dir: Optional[str | os.PathLike] = None,
        log_level: Optional[str] = None,
        libcuda: Optional[str] = None,
        libnvrtc: Optional[str] = None,
        _handle: Optional[int] = None,
    ):
        self._owned = _handle is None
        if _handle is not None:
            self._handle = _handle
            return
        options = {
            "cache_dir": cache_dir, "disk_cache": disk_cache, "cache_max_bytes": cache_max_bytes,
            "bundles": None if bundles is None else [os.fspath(b) for b in bundles],
            "no_compile": no_compile, "template_dir": template_dir, "log_level": log_level,
            "libcuda": libcuda, "libnvrtc": libnvrtc,
        }
        options = {k: os.fspath(v) if isinstance(v, os.PathLike) else v for k, v in options.items() if v is not None}
        handle = ctypes.c_void_p()
        status = _library.library().xqajit_engine_create(json.dumps(options).encode(), ctypes.byref(handle))
        if status:
            _library.raise_last_error(status)
        self._handle = handle.value

    @property
    def handle(self) -> int:
        """The XqajitEngine* this object wraps (for the ops' C calls)."""
        return self._handle

    def stats(self) -> dict:
        """Hits per tier, compiles, failures, compile seconds, fingerprint, cache_dir."""
        return _library.call_json("xqajit_engine_stats", ctypes.c_void_p(self._handle))

    def compile(self, spec) -> dict:
        """The cubin of one spec through this engine's tiers (memory, bundles, disk,
        NVRTC): {"name", "source", "path", "cubin_bytes", "seconds"}. Raises
        CompileError (with .log) or, in no-compile mode, NotAvailableError."""
        return _library.call_json("xqajit_engine_cubin", ctypes.c_void_p(self._handle),
                                  json.dumps(_as_json(spec)).encode())

    def prewarm(self, specs, *, jobs: int = 0) -> list:
        """Compiles (or finds) every spec's kernel; see xqajit.prewarm."""
        return prewarm(specs, jobs=jobs, engine=self)

    def close(self) -> None:
        if self._owned and self._handle:
            _library.library().xqajit_engine_destroy(ctypes.c_void_p(self._handle))
        self._handle = 0

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return f"xqajit.Engine(handle=0x{self._handle or 0:x}{', default' if not self._owned else ''})"


_default: Optional[Engine] = None


def default_engine() -> Engine:
    """The process-wide engine, built from the environment on first use."""
    global _default
    if _default is None:
        handle = ctypes.c_void_p()
        status = _library.library().xqajit_engine_default(ctypes.byref(handle))
        if status:
            _library.raise_last_error(status)
        _default = Engine(_handle=handle.value)
    return _default


@dataclass(frozen=True)
class PrewarmResult:
    name: str
    ok: bool
    source: str  # memory | bundle | disk | compiled
    seconds: float
    error: str  # the message (a compile error's includes the NVRTC log) when not ok


def prewarm(specs: Union[SpecLike, Iterable[SpecLike]], *, jobs: int = 0, engine: Optional[Engine] = None) -> list:
    """Gets every spec's kernels into the caches (compiling what is missing) so
    that no decode call ever waits for NVRTC; `jobs` worker threads (0 = cores).
    One result per kernel, in request order: a spec whose launch may use several
    kernels (`Spec.kernels`, e.g. both GQA backends for an fp8 cache on sm_90a)
    gives one each, and the variants a tuning table chose for them come last.
    Never raises for one bad spec: check each result's `ok` and `error`."""
    if isinstance(specs, (Spec, str, Mapping)):
        specs = [specs]
    eng = engine or default_engine()
    requests = []
    for s in specs:
        if isinstance(s, Spec) and s.kernels:
            requests.extend({"name": k} for k in s.kernels)
        else:
            requests.append(_as_json(s))
    payload = json.dumps(requests).encode()
    results = _library.call_json("xqajit_prewarm", ctypes.c_void_p(eng.handle), payload, int(jobs))
    return [PrewarmResult(**r) for r in results]
