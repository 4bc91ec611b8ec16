"""Put on PYTHONPATH by `rlscope prof`: every Python process started under it profiles itself.

Python imports ``sitecustomize`` at start-up; this one starts an rlscope session when
$RLSCOPE_DIR is set, then runs the ``sitecustomize`` it shadows, if there is one.
"""

import importlib.machinery
import importlib.util
import os
import sys

if os.environ.get("RLSCOPE_DIR"):
    try:
        from rlscope.collect.autostart import start_from_environment

        start_from_environment()
    except Exception as err:  # never stop the user's program because profiling could not start
        print(f"rlscope: profiling disabled in this process: {err}", file=sys.stderr)

_here = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") != _here]
)
if _spec is not None and _spec.loader is not None:
    _module = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_module)
