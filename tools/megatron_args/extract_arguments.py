"""Writes app/megatron_arguments.inc: every command-line flag of Megatron-LM's training parser
(megatron/training/arguments.py::add_megatron_arguments, and the ModelOpt flags pretrain_gpt.py adds)
with how many values it takes, its default and its choices, for the option parser and the
flag-coverage test.

    /usr/bin/python3 tools/megatron_args/extract_arguments.py MEGATRON_CHECKOUT [COMMIT] > app/megatron_arguments.inc

COMMIT names the checkout's commit when it is not a git work tree (an exported archive).

Run by a developer against a pinned checkout; nothing runs it at build time. It builds Megatron's
own argparse parser, so names, aliases and defaults are Megatron's, including the flags generated
from its config dataclasses. Debian's python3-torch (1.13) is older than what Megatron imports, so
the few names it lacks are stood in for by stubs, and packages whose import chain the parser does
not need (checkpoint serialisation) are stubbed whole.
"""
import argparse
import builtins
import importlib.util
import subprocess
import sys
import types

# Packages imported on the way to arguments.py whose contents the parser never uses (checkpoint
# serialisation, GPU kernels).
STUBBED_PACKAGES = ("megatron.core.dist_checkpointing", "triton")


class _Anything(type):
    """A class standing for a name the installed torch lacks: any attribute, call or subscript."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _anything(name)

    def __call__(cls, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]  # used as a decorator
        return _anything("instance")

    def __getitem__(cls, item):
        return cls

    def __or__(cls, other):
        return cls

    __ror__ = __or__

    def __iter__(cls):
        return iter(())

    def __bool__(cls):
        return False


def _anything(name):
    return _Anything(name, (), {})


class _StubModule(types.ModuleType):
    __version__ = "0.0.0"

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _anything(name)


def _from_megatron(frame_depth):
    return sys._getframe(frame_depth + 1).f_globals.get("__name__", "").startswith("megatron")


def _torch_getattr(name):
    # Only Megatron's code gets stand-ins; torch's own hasattr() probes must keep failing.
    if name.startswith("__") or not _from_megatron(1):
        raise AttributeError(name)
    return _anything(name)


def _install_import_hook():
    real_import = builtins.__import__

    def hooked(name, globals=None, locals=None, fromlist=(), level=0):
        from_megatron = (globals or {}).get("__name__", "").startswith("megatron")
        try:
            module = real_import(name, globals, locals, fromlist, level)
        except (ImportError, ValueError):  # ValueError: parts of torch 1.13 fail to import on Python 3.11
            full = importlib.util.resolve_name("." * level + name, globals["__package__"]) if level else name
            # A submodule that a newer torch or numpy has.
            top = full.split(".")[0]
            newer_torch = from_megatron and "." in full and top in ("torch", "numpy") and top in sys.modules
            stubbed = any(full == p or full.startswith(p + ".") for p in STUBBED_PACKAGES)
            if not (newer_torch or stubbed) or (full.startswith("megatron") and not stubbed):
                raise
            module = sys.modules.setdefault(full, _StubModule(full))
            return module if fromlist else sys.modules[full.split(".")[0]]
        for loaded in list(sys.modules.values()):
            if getattr(loaded, "__name__", "").split(".")[0] == "torch" and "__getattr__" not in vars(loaded):
                loaded.__getattr__ = _torch_getattr
        if from_megatron:
            for item in fromlist or ():
                if item != "*" and not hasattr(module, item):
                    setattr(module, item, _anything(item))
        return module

    builtins.__import__ = hooked
    for package in STUBBED_PACKAGES:
        sys.modules[package] = _StubModule(package)


def _arity(action):
    if action.nargs == 0:
        return "flag"
    if action.nargs in (None, 1):
        return "one"
    if action.nargs == "?":
        return "optional"
    return "list"  # '+', '*' or a count


def _text(value):
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return " ".join(_text(v) for v in value)
    if hasattr(value, "name") and not isinstance(value, (str, int, float)):
        return str(value.name)  # enum members
    return str(value)


def _cpp(text):
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'


def main():
    checkout = sys.argv[1]
    sys.path.insert(0, checkout)
    import torch

    torch.jit.script = lambda fn=None, *args, **kwargs: fn  # TorchScript of torch 1.13 rejects newer code
    _install_import_hook()
    from megatron.training.arguments import add_megatron_arguments
    from megatron.post_training.arguments import add_modelopt_args

    parser = argparse.ArgumentParser(allow_abbrev=False)
    add_megatron_arguments(parser)
    add_modelopt_args(parser)  # pretrain_gpt.py adds these whenever NVIDIA ModelOpt is installed
    commit = sys.argv[2] if len(sys.argv) > 2 else subprocess.run(
        ["git", "-C", checkout, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    print("// Generated by tools/megatron_args/extract_arguments.py from Megatron-LM's")
    print("// megatron/training/arguments.py (add_megatron_arguments) and megatron/post_training/arguments.py")
    print("// (add_modelopt_args, which pretrain_gpt.py adds with ModelOpt installed) at " + (commit or "an unknown commit") + ".")
    print("// Do not edit: rerun the script. {name, values, dest, default, choices}")
    rows = []
    for action in parser._actions:
        if not action.option_strings or action.dest == "help":
            continue
        choices = "|".join(_text(c) for c in action.choices) if action.choices else ""
        default = "" if action.default is argparse.SUPPRESS else _text(action.default)
        for name in action.option_strings:
            rows.append((name, _arity(action), action.dest, default, choices))
    for name, arity, dest, default, choices in sorted(rows):
        print("{%s, MegatronValues::%s, %s, %s, %s}," % (_cpp(name), arity, _cpp(dest), _cpp(default), _cpp(choices)))


if __name__ == "__main__":
    main()
