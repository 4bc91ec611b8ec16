"""Collectors: what records events while a workload runs."""
