"""rlscope.machine: machines of one host name are told apart (lent GPU hosts are all "vm")."""

from __future__ import annotations

import socket

import pytest

import rlscope.machine as machine


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    machine.machine_identity.cache_clear()
    monkeypatch.setattr(socket, "gethostname", lambda: "vm")
    yield
    machine.machine_identity.cache_clear()


def _identity(monkeypatch, machine_id: str, gpus: list[str]) -> str:
    machine.machine_identity.cache_clear()
    monkeypatch.setattr(machine, "_machine_id", lambda: machine_id)
    monkeypatch.setattr(machine, "_gpu_uuids", lambda: gpus)
    return machine.machine_identity()


def test_one_host_name_on_two_machines_gives_two_identities(monkeypatch) -> None:
    first = _identity(monkeypatch, "3d1219c7", ["GPU-aaaa"])
    assert first.startswith("vm#") and len(first) == len("vm#") + 8
    assert _identity(monkeypatch, "3d1219c7", ["GPU-bbbb"]) != first  # a cloned image, another GPU
    assert _identity(monkeypatch, "77aa0000", ["GPU-aaaa"]) != first  # another installation
    assert _identity(monkeypatch, "3d1219c7", ["GPU-aaaa"]) == first  # the same machine again


def test_a_machine_without_machine_id_or_gpus_still_has_an_identity(monkeypatch) -> None:
    monkeypatch.setattr(machine, "_MACHINE_ID_FILES", ())
    monkeypatch.setattr(machine, "_gpu_uuids", lambda: [])
    assert machine.machine_identity().startswith("vm#")


def test_gpu_uuids_come_from_the_drivers_files(tmp_path, monkeypatch) -> None:
    for bus, uuid in (("0000:01:00.0", "GPU-1111"), ("0000:02:00.0", "GPU-2222")):
        (tmp_path / bus).mkdir()
        (tmp_path / bus / "information").write_text(f"Model: \t NVIDIA H100\nGPU UUID: \t {uuid}\nBus Location: x\n")
    monkeypatch.setattr(machine, "_GPU_INFO", tmp_path)
    assert machine._gpu_uuids() == ["GPU-1111", "GPU-2222"]
    monkeypatch.setattr(machine, "_GPU_INFO", tmp_path / "absent")
    assert machine._gpu_uuids() == []


def test_an_empty_machine_id_file_is_passed_over(tmp_path, monkeypatch) -> None:
    (tmp_path / "empty").write_text("\n")
    (tmp_path / "dbus").write_text("abc123\n")
    monkeypatch.setattr(machine, "_MACHINE_ID_FILES", (tmp_path / "empty", tmp_path / "dbus"))
    assert machine._machine_id() == "abc123"


def test_a_calibration_from_another_machine_of_the_same_name_warns() -> None:
    from rlscope.calibrate.model import CalibrationWarning
    from tests.calibration_helpers import calibration_of

    calibration = calibration_of(annotation=100.0)
    same = {"host": calibration.machine["host"], "machine": calibration.machine["machine"],
            "rlscope_version": calibration.machine["rlscope"]}
    calibration.check_fits(same)  # silent
    with pytest.warns(CalibrationWarning, match="machine="):
        calibration.check_fits({**same, "machine": "vm#ffffffff"})
