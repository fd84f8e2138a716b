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

The names below are imported on first use: building the command line imports no torch.
"""

from .._utils._lazy import lazy_exports

__all__ = [
    "Dataset",
    "DatasetSpec",
    "RunConfig",
    "Skip",
    "WORKLOADS",
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

_HOMES = {
    **dict.fromkeys(["main", "register_bench"], "._cli"),
    **dict.fromkeys(["Dataset", "DatasetSpec", "dataset_spec", "load_index", "prepare_dataset"],
                    "._datasets"),
    **dict.fromkeys(["RunConfig", "run_backend", "run_isolated"], "._harness"),
    "markdown_section": "._markdown",
    **dict.fromkeys(["WORKLOADS", "Skip", "Workload"], "._workloads"),
}
assert sorted(__all__) == __all__ == sorted(_HOMES)

__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
