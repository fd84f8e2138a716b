"""Which pool fills the batches, by backend and worker count: the one place that knows."""

from __future__ import annotations

from ..decoding import get_executor
from ..errors import ConfigError
from ._assemble import BatchAssembler
from ._combo import ComboPool
from ._config import LoaderConfig
from ._contract import BatchPool
from ._pool import InlinePool, ProcessPool, SeparationPool


def make_pool(config: LoaderConfig, num_slots: int, *, gpu_buffers: int | None = None,
              counters: dict | None = None) -> BatchPool:
    """The pool for ``config``, with ``num_slots`` staging slots; with NVDEC in separation
    mode or the combo, ``gpu_buffers`` GPU buffers behind them (default one per slot) and
    their ``counters`` (see :class:`~._pool.StagingBuffers`).

    - ``"cpu"``: worker processes decoding into shared memory (:class:`ProcessPool`), or the
      calling process (``num_workers=0``);
    - ``"nvdec"``: workers demux, this process decodes on the GPU (:class:`SeparationPool`),
      or the calling process does both (``num_workers=0``), or ``nvdec_processes`` worker
      processes each do both (:class:`~._nvdec_workers.NvdecProcessPool`);
    - ``"combo"``: workers decode on the CPU while this process decodes on NVDEC, both
      taking units as they free up (:class:`ComboPool`).

    With NVDEC, files it cannot decode (``config.cpu_only``), and files whose NVDEC decode
    fails, are decoded by a CPU executor in this process (the assembler's fallback).
    """
    if config.backend == "combo":
        if config.num_workers < 1:
            raise ConfigError("backend='combo' needs num_workers >= 1 (the CPU side decodes in "
                              "worker processes); use backend='nvdec' for one process")
        return ComboPool(config, num_slots, LazyExecutor(config.executor_options("nvdec")),
                         gpu_buffers=gpu_buffers, counters=counters)
    if config.backend == "nvdec":
        return _nvdec_pool(config, num_slots, gpu_buffers, counters)
    if config.num_workers == 0:
        assembler = BatchAssembler.for_config(config, get_executor("cpu", **config.executor_options("cpu")))
        return InlinePool(assembler, config.shapes, num_slots)
    return ProcessPool(config, num_slots)


def _nvdec_pool(config: LoaderConfig, num_slots: int, gpu_buffers: int | None,
                counters: dict | None) -> BatchPool:
    if config.nvdec_processes > 1:
        from ._nvdec_workers import NvdecProcessPool

        return NvdecProcessPool(config, num_slots)
    if config.num_workers == 0:
        executor = get_executor("nvdec", **config.executor_options("nvdec"))
        return InlinePool(nvdec_assembler(config, executor), config.shapes, num_slots,
                          device=config.gpu)
    # Demux workers start first: CUDA is initialised here only afterwards, and never in a
    # worker (they are forks of the demux fork server, a fresh interpreter without torch).
    assembler = nvdec_assembler(config, LazyExecutor(config.executor_options("nvdec")))
    return SeparationPool(config, assembler, num_slots, num_buffers=gpu_buffers, counters=counters)


def nvdec_assembler(config: LoaderConfig, executor) -> BatchAssembler:
    """An assembler filling units on ``executor`` (NVDEC), with a CPU executor in this process
    for the files NVDEC cannot decode (``fallback="cpu"``)."""
    fallback = None
    if config.cpu_only is not None:  # fallback="cpu"
        fallback = get_executor("cpu", **config.executor_options("cpu"))
    return BatchAssembler.for_config(config, executor, fallback=fallback)


class LazyExecutor:
    """Creates the NVDEC executor on first use, i.e. after the demux workers started,
    so CUDA is never initialised before a process start."""

    name = "nvdec"
    batch_api = "gops"

    def __init__(self, options: dict) -> None:
        self._options, self._executor = options, None

    def _get(self):
        if self._executor is None:
            self._executor = get_executor("nvdec", **self._options)
        return self._executor

    @property
    def stats(self):
        return self._get().stats

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._get(), name)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.close()

