"""Start-up hook of ``timelogger run`` (zero-code capture, :mod:`timelogger.hooks`): the launcher puts this directory
first on ``PYTHONPATH``. It installs the hooks, then runs the ``sitecustomize`` this one hides, if there is one."""
import importlib.util
import os
import sys

try:
    from timelogger.hooks import boot

    boot()
except Exception as exc:  # never stop the program: it runs without the hooks, and says so
    print(f"timelogger: hooks not installed ({type(exc).__name__}: {exc})", file=sys.stderr)

_here = os.path.dirname(os.path.abspath(__file__))
for _entry in sys.path:
    if not _entry or os.path.abspath(_entry) == _here:
        continue
    _other = os.path.join(_entry, "sitecustomize.py")
    if os.path.isfile(_other):
        _spec = importlib.util.spec_from_file_location("sitecustomize", _other)
        if _spec is None or _spec.loader is None:  # not loadable as a source file: as if it were not there
            continue
        _module = importlib.util.module_from_spec(_spec)
        sys.modules["sitecustomize"] = _module
        _spec.loader.exec_module(_module)
        break
