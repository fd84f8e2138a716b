"""``vidloader bench``: vidloader against its peers on the same files, frames and batch shapes,
and the other benchmarks of the project (NVDEC sweeps and probes, sampling trade-offs).

Datasets (:mod:`._datasets`) are synthetic and cached by a hash of their specs; workloads
(:mod:`._workloads`) plan the batches once with vidloader's samplers, and every backend
(:mod:`._peers`, :mod:`._peers_gpu`) decodes exactly those frames; the harness
(:mod:`._harness`) warms up, times and samples CPU, memory, GPU and NVDEC use; reports
(:mod:`._report`) are a table, a JSON file and a PNG plot. :mod:`._cli` lists the subcommands
(``run``, ``sweep``, ``probe``, ``agreement``, ``tradeoff``, ``table``) and the module of each.

Typical use::

    vidloader bench run --workload random --backends vidloader,naive,decord --scale tiny
"""

from ._cli import main, register_bench
from ._datasets import Dataset, DatasetSpec, dataset_spec, load_index, prepare_dataset
from ._harness import RunConfig, run_backend, run_isolated
from ._markdown import markdown_section
from ._workloads import WORKLOADS, Skip, Workload

__all__ = [
    "WORKLOADS",
    "Dataset",
    "DatasetSpec",
    "RunConfig",
    "Skip",
    "Workload",
    "dataset_spec",
    "load_index",
    "main",
    "markdown_section",
    "prepare_dataset",
    "register_bench",
    "run_backend",
    "run_isolated",
]
