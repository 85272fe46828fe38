"""The text every repro file shares: how it loads its target (``module:attr`` or ``path/to/file.py:attr``).

A repro file imports numpy and the target only, so this loader is written into each one
(:mod:`specaudit.reports.repro`, :mod:`specaudit.reports.repro_stops`); it needs ``importlib``
and ``importlib.util`` imported by the file.
"""

__all__ = ["LOAD"]

#: The ``load(spec)`` function of a repro file, as source text (no format fields: insert it whole).
LOAD = '''def load(spec):
    """Return the callable ``module:attr`` (or ``path/to/file.py:attr``) names."""
    module_name, _, attr = spec.rpartition(":")
    if module_name.endswith(".py"):
        found = importlib.util.spec_from_file_location("repro_target", module_name)
        module = importlib.util.module_from_spec(found)
        found.loader.exec_module(module)
    else:
        module = importlib.import_module(module_name)
    obj = module
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj
'''
