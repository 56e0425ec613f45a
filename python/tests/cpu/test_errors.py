"""Every C++ error type arrives as its own Python class with the message kept."""

import ctypes

import pytest

import xqajit
from xqajit.errors import error_from_status


@pytest.mark.parametrize("status,cls", [
    (1, xqajit.XqajitError), (2, xqajit.SpecError), (3, xqajit.ArgumentError), (4, xqajit.CompileError),
    (5, xqajit.CudaError), (6, xqajit.LibraryError), (7, xqajit.CacheError), (8, xqajit.BundleError),
    (9, xqajit.NotAvailableError), (11, xqajit.XqajitError),
])
def test_status_maps_to_class_with_message(status, cls):
    details = {"field": "input", "value": "fp32", "allowed": "fp16, bf16", "spec_name": "gqa_x",
               "options": '["-arch=sm_90a"]', "log": "error: x", "call": "cuLaunchKernelEx(...)", "code": "700",
               "code_name": "CUDA_ERROR_ILLEGAL_ADDRESS"}
    e = error_from_status(status, "the message", details.get)
    assert type(e) is cls and str(e) == "the message" and isinstance(e, xqajit.XqajitError)
    if cls is xqajit.CudaError:
        assert (e.call, e.code, e.code_name) == ("cuLaunchKernelEx(...)", 700, "CUDA_ERROR_ILLEGAL_ADDRESS")
    if cls is xqajit.CompileError:
        assert e.options == ["-arch=sm_90a"] and e.log == "error: x" and e.spec_name == "gqa_x"


def test_library_error_is_an_os_error_and_spec_error_a_value_error():
    assert issubclass(xqajit.LibraryError, OSError)
    assert issubclass(xqajit.SpecError, ValueError) and issubclass(xqajit.ArgumentError, ValueError)


def test_real_errors_from_the_library_keep_their_message(inputs):
    with pytest.raises(xqajit.SpecError, match=r"invalid spec: page_size=48"):
        xqajit.spec(page_size=48, arch="sm_90a")
    with pytest.raises(xqajit.SpecError, match="arch"):
        xqajit.spec(arch="sm_42")
    handle = ctypes.c_void_p()
    status = xqajit._library.library().xqajit_engine_create(b'{"bogus": 1}', ctypes.byref(handle))
    with pytest.raises(xqajit.ArgumentError, match="engine option 'bogus' is unknown"):
        xqajit._library.raise_last_error(status)
