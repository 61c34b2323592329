"""TransferQueue's warning on every put and get (torch has fewer cores than it asks for) is printed once, not per call."""

from __future__ import annotations

import io
import logging

import pytest

pytest.importorskip("verl")
pytest.importorskip("transfer_queue")

from rllm_verl.conformance.v1 import OncePerMessage, log_repeats_once


@pytest.fixture
def streams():
    """TransferQueue's logger with a handler of its own (as outside pytest) and the root logger with another (as verl sets it)."""
    logger, root = logging.getLogger("transfer_queue.utils.common"), logging.getLogger()
    saved = (logger.filters[:], logger.handlers[:], logger.propagate)
    own, through_root = io.StringIO(), io.StringIO()
    logger.handlers = [logging.StreamHandler(own)]
    logger.filters = []
    logger.propagate = True
    root_handler = logging.StreamHandler(through_root)
    root.addHandler(root_handler)
    yield own, through_root
    root.removeHandler(root_handler)
    logger.filters, logger.handlers, logger.propagate = saved


def test_a_repeated_transfer_queue_warning_is_printed_once_and_not_again_through_the_root_logger(streams):
    import psutil
    from transfer_queue.utils.common import limit_pytorch_auto_parallel_threads

    own, through_root = streams
    log_repeats_once()
    cores = psutil.cpu_count(logical=False)
    for _ in range(3):  # what every put and get of TransferQueue does
        with limit_pytorch_auto_parallel_threads(target_num_threads=cores + 6):
            pass
    message = f"target_num_threads {cores + 6} should not exceed total physical CPU cores {cores}. Setting to {cores}."
    assert own.getvalue().splitlines() == [message]
    assert through_root.getvalue() == ""


def test_the_filter_passes_each_message_once_per_logger_and_level():
    once = OncePerMessage()

    def record(name: str, level: int, message: str) -> logging.LogRecord:
        return logging.LogRecord(name, level, __file__, 1, message, None, None)

    seen = [once.filter(record(*args)) for args in [("a", 30, "x"), ("a", 30, "x"), ("a", 30, "y"), ("b", 30, "x"), ("a", 40, "x"), ("b", 30, "x")]]
    assert seen == [True, False, True, True, True, False]
