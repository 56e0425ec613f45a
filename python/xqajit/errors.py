"""One Python exception class per C++ error type of xqajit (include/xqajit/error.hpp).

The C++ message is kept verbatim; details the C++ exception carries (a SpecError's
field, value and allowed values; a CompileError's spec name, options and NVRTC
log; a CudaError's call and result code) are attributes.
"""

from __future__ import annotations


class XqajitError(RuntimeError):
    """Base of everything xqajit raises (xqajit::Error)."""

    def __init__(self, message: str, **details: str):
        super().__init__(message)
        self.message = message
        for key, value in details.items():
            setattr(self, key, value)


class SpecError(XqajitError, ValueError):
    """A spec field has an invalid value (attributes: field, value, allowed)."""


class ArgumentError(XqajitError, ValueError):
    """A launch argument is invalid: the message names it. Nothing was launched."""


class CompileError(XqajitError):
    """NVRTC rejected a kernel (attributes: spec_name, options, log)."""


class CudaError(XqajitError):
    """A CUDA driver or NVRTC call failed (attributes: call, code, code_name)."""


class LibraryError(XqajitError, OSError):
    """A shared library (libxqajit, libcuda, libnvrtc) could not be loaded."""


class CacheError(XqajitError):
    """The on-disk cache could not do what was asked."""


class BundleError(XqajitError):
    """A bundle file is malformed."""


class NotAvailableError(XqajitError):
    """The kernel is not available and compiling is not allowed (no-compile mode,
    or the stream is capturing a CUDA graph: prewarm first)."""


# XqajitStatus codes (include/xqajit/c_api.h) -> class and the details it carries.
_BY_STATUS = {
    1: (XqajitError, ()),
    2: (SpecError, ("field", "value", "allowed")),
    3: (ArgumentError, ()),
    4: (CompileError, ("spec_name", "options", "log")),
    5: (CudaError, ("call", "code", "code_name")),
    6: (LibraryError, ()),
    7: (CacheError, ()),
    8: (BundleError, ()),
    9: (NotAvailableError, ()),
    11: (XqajitError, ()),
}


def error_from_status(status: int, message: str, detail) -> XqajitError:
    """The exception for a C ABI status; `detail(key)` reads one detail of the last error."""
    cls, keys = _BY_STATUS.get(status, (XqajitError, ()))
    details = {key: detail(key) for key in keys}
    if "code" in details:
        details["code"] = int(details["code"] or 0)
    if "options" in details:
        import json

        details["options"] = json.loads(details["options"] or "[]")
    return cls(message, **details)
