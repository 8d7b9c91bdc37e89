"""Shared setup of the *_megatron_* scripts here: makes Megatron-LM's dataset code importable from
a checkout without running megatron/__init__.py and megatron/core/__init__.py, which pull in most
of Megatron (torch.distributed, apex and packages Debian lacks); the datasets need only the few
names stubbed below, so Debian's python3-numpy and python3-torch suffice.

Importing this module does the setup: the checkout is sys.argv[1] (default /tmp/mlm), put first
on sys.path. Scripts stub anything else they need with stub_module before importing Megatron.
"""
import os
import sys
import types

import numpy

MEGATRON = sys.argv[1] if len(sys.argv) > 1 else "/tmp/mlm"
GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "golden")
sys.path.insert(0, MEGATRON)


def stub_module(name, path=None):
    """Registers an empty module (a package when `path` is given) without running its __init__."""
    module = types.ModuleType(name)
    if path:
        module.__path__ = [path]
    sys.modules[name] = module
    return module


class _NoMultiStorageClient:
    @staticmethod
    def is_enabled():
        return False


stub_module("megatron", os.path.join(MEGATRON, "megatron"))
stub_module("megatron.core", os.path.join(MEGATRON, "megatron", "core"))
stub_module("megatron.core.utils").log_single_rank = lambda logger, level, *args, **kwargs: None
stub_module("megatron.core.safe_globals").safe_numpy_load = numpy.load
msc = stub_module("megatron.core.msc_utils")
msc.MultiStorageClientFeature = _NoMultiStorageClient
msc.maybe_msc = types.SimpleNamespace(open=open)
stub_module("megatron.core.tokenizers", os.path.join(MEGATRON, "megatron", "core", "tokenizers")) \
    .MegatronTokenizerBase = object
