"""Demux workers give their freed heap back between units (``_utils._heap.trim_heap``):
glibc keeps freed blocks between live ones, so a worker stayed at its largest unit's size."""

from __future__ import annotations

import subprocess
import sys

import pytest

from vidloader._utils._heap import trim_heap

_PROBE = r"""
import sys
from vidloader._utils._heap import trim_heap

def rss_mib():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20

start = rss_mib()
# 150 MiB of 2 KiB blocks (malloc's heap, not pymalloc's arenas nor mmap), one in 64 kept
# alive, as a unit's packets are freed around the worker's longer-lived objects.
blocks = [bytes(2048) for _ in range(75_000)]
kept = blocks[::64]
del blocks
freed = rss_mib()
trimmed = trim_heap()
print(start, freed, rss_mib(), trimmed)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc and /proc/self/statm")
def test_trim_heap_returns_the_free_pages_between_live_blocks():
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True)
    start, freed, after, trimmed = out.stdout.split()
    start, freed, after = float(start), float(freed), float(after)
    if trimmed != "True":
        pytest.skip("this C library has no malloc_trim")
    assert freed - start > 100  # glibc kept the freed blocks: the worker's old behaviour
    assert after - start < 0.3 * (freed - start)


def test_trim_heap_is_safe_to_call_repeatedly():
    assert trim_heap() in (True, False)
    assert trim_heap() in (True, False)
