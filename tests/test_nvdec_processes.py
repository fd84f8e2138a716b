"""``nvdec_processes``: NVDEC in worker processes (``pipeline/_nvdec_workers.py``). What runs
without a GPU: the option's checks, the units such a loader hands out, and the worker's task
queue polling. The pool itself is tested on a GPU (``test_loader_nvdec.py``, cuda marker)."""

from __future__ import annotations

import multiprocessing
import time

import pytest

from vidloader import ConfigError
from vidloader.pipeline._config import MAX_NVDEC_PROCESSES, check_options
from vidloader.pipeline._entry import ParentWatchingQueue
from vidloader.pipeline._loader import _unit_workers, takes_block_units, takes_stream_gops

BASE = dict(batch_size=8, prefetch=2, on_error="raise", lookahead=None)


@pytest.mark.parametrize("value", [0, -1, True, 2.0, "2"])
def test_nvdec_processes_must_be_a_positive_int(value):
    with pytest.raises(ConfigError, match="nvdec_processes"):
        check_options(backend="nvdec", nvdec_processes=value, **BASE)


def test_nvdec_processes_has_a_ceiling():
    check_options(backend="nvdec", nvdec_processes=MAX_NVDEC_PROCESSES, **BASE)
    with pytest.raises(ConfigError, match=f"1..{MAX_NVDEC_PROCESSES}"):
        check_options(backend="nvdec", nvdec_processes=MAX_NVDEC_PROCESSES + 1, **BASE)


@pytest.mark.parametrize("backend", ["cpu", "combo"])
def test_nvdec_processes_need_backend_nvdec(backend):
    check_options(backend=backend, nvdec_processes=1, **BASE)  # the default: allowed anywhere
    with pytest.raises(ConfigError, match="backend='nvdec'"):
        check_options(backend=backend, nvdec_processes=4, **BASE)


def test_nvdec_processes_take_a_memory_budget():
    """Since session 23 the plan counts every process (``test_memory_budget.py``)."""
    assert check_options(backend="nvdec", nvdec_processes=2, memory_budget="3GiB", **BASE) == 3 << 30


def test_nvdec_processes_take_a_plan_of_streams_as_its_gops():
    """Each process demuxes for itself: units are chosen as for NVDEC with that many demux
    workers, so a plan of streams goes out as the GOPs its rows walk through (each decoded
    once), whatever ``num_workers`` says."""
    assert _unit_workers(16, 4) == 4 and _unit_workers(0, 4) == 4
    assert _unit_workers(16, 1) == 16 and _unit_workers(0, 1) == 0
    streams = lambda: _Streams()  # noqa: E731 - the plan, asked for last
    assert takes_stream_gops(streams, backend="nvdec", num_workers=_unit_workers(0, 4), lookahead=None)
    assert not takes_stream_gops(streams, backend="nvdec", num_workers=_unit_workers(0, 1),
                                 lookahead=None)
    assert not takes_block_units(_Streams(), backend="nvdec", num_workers=_unit_workers(0, 4),
                                 lookahead=None)


class _Streams:
    """A plan of streams as the unit choice sees it: it names its units, rows continue."""

    row_affinity = True

    def decode_units(self):
        return []


def test_a_worker_polls_its_task_queue_without_blocking():
    q = multiprocessing.get_context("spawn").Queue()
    tasks = ParentWatchingQueue(q, None)
    assert not tasks.ready()
    q.put("task")
    for _ in range(100):  # the queue's feeder thread writes it shortly
        if tasks.ready():
            break


        time.sleep(0.01)
    assert tasks.ready() and tasks.get() == "task" and not tasks.ready()


def _loader_stub(*, processes, stream_gops=False, blocks=False, prefetch=2, units_decoding=4):
    """What ``VideoLoader._units_in_flight`` reads of a loader, without building one (that needs
    a GPU with NVDEC)."""
    import types

    config = types.SimpleNamespace(nvdec_processes=processes, prefetch=prefetch,
                                   units_decoding=units_decoding, uses_nvdec=True, backend="nvdec",
                                   num_workers=0)
    return types.SimpleNamespace(config=config, uses_stream_gops=stream_gops, uses_block_units=blocks)


def test_units_in_flight_with_processes():
    """K processes keep UNITS_PER_PROCESS units each plus the prefetch, whole batches or GOPs of
    streams alike (each GOP unit goes whole to one process); a GOP-local block is cut by video
    over the processes (prefetch + 1); one process decodes units_decoding GOP units at once."""
    from vidloader.pipeline._loader import VideoLoader
    from vidloader.pipeline._nvdec_workers import UNITS_PER_PROCESS

    units = VideoLoader._units_in_flight
    assert units(_loader_stub(processes=4, stream_gops=True)) == UNITS_PER_PROCESS * 4 + 1
    assert units(_loader_stub(processes=4)) == UNITS_PER_PROCESS * 4 + 1
    assert units(_loader_stub(processes=4, blocks=True)) == 3
    # units_decoding below UNITS_PER_PROCESS (a memory budget's step) holds fewer per process
    assert units(_loader_stub(processes=4, units_decoding=1)) == 4 + 1
    assert units(_loader_stub(processes=4, units_decoding=1, stream_gops=True)) == 4 + 1
    assert units(_loader_stub(processes=1, stream_gops=True)) == 2 + 4


def test_a_worker_takes_units_per_process_at_once():
    from vidloader.pipeline._nvdec_workers import UNITS_PER_PROCESS, units_per_process

    assert units_per_process(4) == UNITS_PER_PROCESS == 2
    assert units_per_process(1) == 1 and units_per_process(0) == 1


class _Tasks:
    """A worker's task queue with every task already waiting, then STOP."""

    def __init__(self, tasks):
        from vidloader.pipeline._messages import STOP

        self.items = [*tasks, STOP]

    def ready(self):
        return bool(self.items)

    def get(self):
        return self.items.pop(0)


class _Unit:
    def __init__(self):
        self.cancelled = False

    def cancel(self):
        self.cancelled = True


@pytest.mark.parametrize("units_decoding, most", [(4, 2), (2, 2), (1, 1)])
def test_a_worker_holds_at_most_its_units_and_replies_in_order(units_decoding, most):
    """The loop the NVDEC workers run (``serve_units``): with tasks waiting it starts up to
    ``units_per_process(units_decoding)`` units before finishing the oldest, never more, and
    replies in the order it took them."""
    from vidloader.pipeline._nvdec_workers import serve_units, units_per_process

    held, peak, replies = set(), [0], []

    def start_unit(task):
        held.add(task)
        peak[0] = max(peak[0], len(held))
        return task, _Unit()

    def finish_unit(task, unit):
        held.discard(task)
        return f"done {task}"

    serve_units(_Tasks(range(7)), replies.append, at_once=units_per_process(units_decoding),
                start_unit=start_unit, finish_unit=finish_unit)
    assert peak[0] == most
    assert replies == [f"done {t}" for t in range(7)][: len(replies)] and held == set(range(7)) - set(range(len(replies)))


def test_a_stopped_worker_cancels_the_units_it_still_holds():
    from vidloader.pipeline._nvdec_workers import serve_units

    units = []

    def start_unit(task):
        units.append(_Unit())
        return task, units[-1]

    serve_units(_Tasks(["a", "b"]), lambda reply: None, at_once=2, start_unit=start_unit,
                finish_unit=lambda task, unit: task)
    assert [u.cancelled for u in units] == [False, True]  # "a" finished when STOP came after "b"
