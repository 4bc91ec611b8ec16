"""A static HTML page per output directory of `rlscope run` (``rlscope report OUTPUT``)."""

from rlscope.report.page import REPORT_FILE, write_report

__all__ = ["write_report", "REPORT_FILE"]
