"""csrc/cupti/api_calls.hpp (CUDA API calls recorded by CUPTI callbacks) without a GPU: a C++
check drives the callbacks by hand on several threads, built with ThreadSanitizer where the
compiler has it, so a lost row, a wrong attribution or a data race fails here, not on a GPU."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECK = ROOT / "tests" / "native" / "api_calls_check.cpp"


def _cupti_include() -> Path | None:
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda",
             *sorted(str(p) for p in Path("/usr/local").glob("cuda-*"))]
    for home in filter(None, homes):
        for sub in ("include", "extras/CUPTI/include"):
            if (Path(home) / sub / "cupti.h").exists():
                return Path(home) / sub
    return None


@pytest.mark.skipif(shutil.which("g++") is None or _cupti_include() is None,
                    reason="needs g++ and the CUDA headers (cupti.h)")
@pytest.mark.parametrize("sanitizer", ["thread", None])
def test_every_call_is_recorded_once_with_its_operation(tmp_path: Path, sanitizer: str | None) -> None:
    binary = tmp_path / "api_calls_check"
    flags = [f"-fsanitize={sanitizer}"] if sanitizer else []
    build = subprocess.run(["g++", "-std=c++17", "-O1", "-g", "-pthread", *flags, f"-I{ROOT / 'csrc' / 'cupti'}",
                            f"-I{_cupti_include()}", str(CHECK), "-o", str(binary), "-ldl"],
                           capture_output=True, text=True, timeout=300)
    if build.returncode != 0 and sanitizer and "sanitize" in build.stderr:
        pytest.skip(f"g++ cannot build with -fsanitize={sanitizer} here")
    assert build.returncode == 0, build.stderr
    done = subprocess.run([str(binary)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr
