"""Imported last by each fork server's preload: moves every object imported so far into the
garbage collector's permanent generation (``gc.freeze()``).

A fork shares the server's pages copy-on-write, but a collection in the child writes to the
header of every object it scans, so the child soon holds private copies of pages it never
changed: torch's, numpy's and PyAV's module objects. Frozen objects are never scanned, so
those pages stay shared (CPython's documented use of ``gc.freeze`` before ``fork``).
"""

import gc

gc.freeze()
