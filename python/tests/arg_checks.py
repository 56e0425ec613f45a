"""Shared by the CPU and GPU suites: counting the eager calls' full argument checks."""

from xqajit.ops import gqa, mla


def count_arg_checks(monkeypatch):
    """The names of the full argument checks (decode_args, mla_decode_args) that eager calls
    run from now on, in order: a call the fast path or the cache of checked calls takes adds
    none."""
    ran = []
    for module, name in ((gqa, "decode_args"), (mla, "mla_decode_args")):
        def counted(*args, _check=getattr(module, name), _name=name, **kw):
            ran.append(_name)
            return _check(*args, **kw)
        monkeypatch.setattr(module, name, counted)
    return ran
