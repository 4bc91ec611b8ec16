"""The calibration record: its file round trip, version check and machine check."""

from __future__ import annotations

import json


import pytest

from rlscope.calibrate import Calibration, CalibrationError, CalibrationWarning
from rlscope.errors import RlscopeError
from tests.calibration_helpers import (
    calibration_of,
)


def test_calibration_file_round_trip_and_mismatch_warning(tmp_path):
    cal = calibration_of(annotation=123.0)
    cal.save(tmp_path / "calibration.json")
    back = Calibration.load(tmp_path / "calibration.json")
    assert back == cal
    back.check_fits({"host": cal.machine["host"], "rlscope_version": cal.machine["rlscope"]})  # silent
    with pytest.warns(CalibrationWarning, match="host=.*trace has 'other-box'"):
        back.check_fits({"host": "other-box", "rlscope_version": cal.machine["rlscope"]})
    with pytest.warns(CalibrationWarning, match="rlscope"):
        back.check_fits({"host": cal.machine["host"], "rlscope_version": "0.0.1"})
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(RlscopeError, match="not a calibration file"):
        Calibration.load(tmp_path / "bad.json")


def test_a_calibration_of_another_version_or_shape_is_refused_with_the_fix(tmp_path):
    path = tmp_path / "calibration.json"
    calibration_of(annotation=1.0).save(path)
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "version": 99}))
    with pytest.raises(CalibrationError, match="format version 99, this rlscope reads version 1.*rlscope calibrate"):
        Calibration.load(path)
    path.write_text(json.dumps({**data, "surprise": 1}))
    with pytest.raises(CalibrationError, match=r"field 'surprise': Unexpected"):
        Calibration.load(path)
    del data["costs_ns"]
    path.write_text(json.dumps(data))
    with pytest.raises(CalibrationError, match=r"field 'costs_ns': Field required"):
        Calibration.load(path)


def test_a_calibration_cannot_be_changed_in_place():
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        calibration_of(annotation=1.0).costs_ns = {}
