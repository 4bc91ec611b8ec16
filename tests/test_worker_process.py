"""The worker's parent-death signal (``rlscope.harness.process``): asked for by the worker itself,
so that nothing runs between fork and exec in a parent with other threads."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlscope.harness.process import ENV_PARENT_PID

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")

# The parent: starts the child with the variable set to its own pid (as start_worker does) or not,
# writes the child's pid, then waits to be killed.
PARENT = """
import os, subprocess, sys, time
env = dict(os.environ)
if sys.argv[2] == "die":
    env[sys.argv[3]] = str(os.getpid())
child = subprocess.Popen([sys.executable, "-c", sys.argv[4]], env=env)
with open(sys.argv[1] + ".tmp", "w") as out:
    out.write(str(child.pid))
while not os.path.exists(sys.argv[1] + ".ready"):
    time.sleep(0.05)
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(600)
"""

# The child: what the worker does first; it reports whether the variable was set before that, and
# after (what the worker's own children would inherit).
CHILD = """
import os, sys, time
from rlscope.harness.process import ENV_PARENT_PID, die_with_parent_here
pid_file = os.environ["PID_FILE"]
before = ENV_PARENT_PID in os.environ
die_with_parent_here()
with open(pid_file + ".ready", "w") as out:
    out.write(f"{before} {ENV_PARENT_PID in os.environ}")
time.sleep(600)
"""


def alive(pid: int) -> bool:
    """Running (a zombie, killed and not yet reaped, counts as dead)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def orphan_after_parent_killed(tmp_path: Path, die: bool) -> tuple[int, str]:
    """The child's pid once its parent was killed outright (the child had asked, or not, to die
    with it before the parent says its pid), and what it said of the variable."""
    pid_file = tmp_path / "child.pid"
    env = {**os.environ, "PID_FILE": str(pid_file),
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")])}
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(pid_file), "die" if die else "live", ENV_PARENT_PID,
                               CHILD], env=env)
    deadline = time.monotonic() + 120  # a loaded machine
    while not pid_file.exists() and parent.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pid_file.exists(), f"the parent did not start its child (exit code {parent.poll()})"
    child = int(pid_file.read_text())
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    return child, (tmp_path / "child.pid.ready").read_text()


def gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


def test_a_worker_asked_to_die_with_its_parent_does(tmp_path: Path) -> None:
    child, variable = orphan_after_parent_killed(tmp_path, die=True)
    try:
        assert gone_within(child, 60), "the child outlived its parent"
        assert variable == "True False"  # set for it, not passed on to what the worker starts
    finally:
        if alive(child):
            os.kill(child, signal.SIGKILL)


def test_a_child_not_asked_to_outlives_its_parent(tmp_path: Path) -> None:
    child, variable = orphan_after_parent_killed(tmp_path, die=False)
    try:
        assert not gone_within(child, 1.0), "the child died with its parent without being asked to"
        assert variable == "False False"
    finally:
        if alive(child):
            os.kill(child, signal.SIGKILL)
