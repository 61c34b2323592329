"""Measurement and reporting shared by the benchmark scripts: :mod:`rllm_plugins.bench.timing`, where ``rllm-plugins bench`` reads them too."""

from __future__ import annotations

from rllm_plugins.bench.timing import (
    Measurement,
    Table,
    describe_machine,
    format_bytes,
    format_ratio,
    format_time,
    machine_description,
    machine_info,
    measure,
    measure_interleaved,
    min_of_medians,
    page_faults_per_call,
)

__all__ = [
    "Measurement",
    "Table",
    "describe_machine",
    "format_bytes",
    "format_ratio",
    "format_time",
    "machine_description",
    "machine_info",
    "measure",
    "measure_interleaved",
    "min_of_medians",
    "page_faults_per_call",
]
