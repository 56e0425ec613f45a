"""GPU tests: skipped, loudly, where torch sees no CUDA device."""

import sys

import pytest
import torch

HAVE_GPU = torch.cuda.is_available()
if not HAVE_GPU:
    sys.stderr.write("\n*** SKIPPED [gpu]: torch sees no CUDA device; the Python GPU tests did NOT run. ***\n")


def pytest_collection_modifyitems(config, items):
    if HAVE_GPU:
        return
    skip = pytest.mark.skip(reason="SKIPPED [gpu]: no CUDA device (torch.cuda.is_available() is False)")
    for item in items:
        if "/gpu/" in str(item.fspath):
            item.add_marker(skip)
