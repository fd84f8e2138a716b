"""Every configuration mistake is a typed error at construction, naming the argument: one row
per argument of ``VideoLoader``, ``Process`` and the samplers (a new argument without a row
fails :func:`test_every_argument_has_a_row`)."""

from __future__ import annotations

import inspect

import pytest
import torch

import vidloader
from vidloader import (
    BackendUnavailableError,
    Clips,
    ConfigError,
    GopShuffle,
    MultiCameraClips,
    Process,
    RandomFrames,
    SequentialFrames,
    VideoLoader,
)

from .media import make_small_dataset

_NO_GPU = not torch.cuda.is_available()
_MISSING_GPU = BackendUnavailableError if _NO_GPU else ConfigError
_ABSENT_CUDA = "cuda" if _NO_GPU else f"cuda:{torch.cuda.device_count()}"

# (argument, bad value, error, text the message must hold). The loader's rows are built with
# num_workers=0 unless the row is about num_workers: construction starts no process anyway.
LOADER_ROWS = [
    ("index", "videos.npz", ConfigError, "VideoIndex"),
    ("sampler", "random", ConfigError, "sampler"),
    ("batch_size", "8", ConfigError, "batch_size must be an int"),
    ("batch_size", 0, ConfigError, "batch_size must be >= 1, got 0"),
    ("size", (0, 224), ConfigError, "size"),
    ("size", True, ConfigError, "size"),
    ("processing", {"size": 224}, ConfigError, "processing['size']"),
    ("processing", {"label": Process()}, ConfigError, "'label'"),
    ("labels", "cats", ConfigError, "labels"),
    ("labels", [1], ConfigError, "labels has 1 entries"),
    ("backend", "gpu", ConfigError, "backend must be one of"),
    ("num_workers", -1, ConfigError, "num_workers must be >= 0"),
    ("num_workers", "2", ConfigError, "num_workers must be an int"),
    ("prefetch", 0, ConfigError, "prefetch must be >= 1"),
    ("lookahead", "4", ConfigError, "lookahead must be an int"),
    ("pin_memory", "yes", ConfigError, "pin_memory must be True or False"),
    ("device", "gpu", ConfigError, "device must be"),
    ("device", _ABSENT_CUDA, _MISSING_GPU, f"device={_ABSENT_CUDA!r}"),
    ("on_error", "ignore", ConfigError, "on_error must be one of"),
    ("drop_last", "no", ConfigError, "drop_last must be True or False"),
    ("rank", 3, ConfigError, "rank=3 is not below world_size=2"),
    ("world_size", 0, ConfigError, "world_size must be >= 1"),
    ("persistent_workers", 1, ConfigError, "persistent_workers must be True or False"),
    ("decoder_threads", -1, ConfigError, "decoder_threads must be >= 0"),
    ("nvdec_decoders", "16", ConfigError, "nvdec_decoders must be an int"),
    ("nvdec_decoders", 17, ConfigError, "nvdec_decoders must be in 1..16"),
    ("nvdec_options", {"frame_cache": 1}, ConfigError, "unknown keys ['frame_cache']"),
    ("fallback", "gpu", ConfigError, "fallback must be one of"),
    ("combo_share", 0.5, ConfigError, "combo_share"),
    ("nvtx", "yes", ConfigError, "nvtx must be True, False or None"),
    ("memory_budget", "lots", ConfigError, "memory_budget must be bytes as an int, or a string"),
    ("memory_budget", 0, ConfigError, "memory_budget must be more than 0 bytes, got 0"),
    ("memory_budget", "3GiB", ConfigError, "memory_budget='3GiB' bounds the GPU memory of NVDEC"),
    ("nvdec_processes", 0, ConfigError, "nvdec_processes must be"),
    ("nvdec_processes", 4, ConfigError, "nvdec_processes=4 decodes in NVDEC worker processes, but backend='cpu'"),
]
if _NO_GPU:  # no GPU, or no PyNvVideoCodec: refused when the loader is built
    LOADER_ROWS.append(("backend", "nvdec", BackendUnavailableError, "backend='nvdec'"))

PROCESS_ROWS = [
    ("size", "224", ConfigError, "size must be (height, width)"),
    ("scale", -1.0, ConfigError, "scale must be a number > 0"),
    ("short_side", "128", ConfigError, "short_side must be an int"),
    ("crop", "middle", ConfigError, "crop must be one of"),
    ("random_flip", "yes", ConfigError, "random_flip must be True or False"),
    ("normalized", 1, ConfigError, "normalized must be True or False"),
    ("mean", "abc", ConfigError, "mean must be a sequence"),
    ("std", (0.0, 1.0, 1.0), ConfigError, "std must not contain 0"),
    ("dtype", "int8", ConfigError, "dtype must be one of"),
    ("layout", 5, ConfigError, "layout must be a permutation"),
    ("index_map", [1.5], ConfigError, "index_map must be a sequence of ints"),
    ("autorotate", 1, ConfigError, "autorotate must be True or False"),
]

SAMPLER_ROWS = {
    RandomFrames: [("replacement", "no", "replacement"), ("num_samples", 0, "num_samples"),
                   ("seed", 1.5, "seed")],
    SequentialFrames: [("num_samples", "all", "num_samples"), ("seed", "0", "seed")],
    Clips: [("sequence_length", 0, "sequence_length"), ("stride", "2", "stride"),
            ("step", 0, "step"), ("shuffle", "yes", "shuffle"), ("replacement", 1, "replacement"),
            ("num_samples", -1, "num_samples"), ("seed", None, "seed"),
            ("first_seconds", 0, "first_seconds")],
    GopShuffle: [("window_gops", 0, "window_gops"), ("order", "random", "order"),
                 ("window_quantile", 1.5, "window_quantile"), ("sequence_length", "1", "sequence_length"),
                 ("stride", 0, "stride"), ("step", True, "step"), ("seed", "0", "seed")],
    MultiCameraClips: [("rigs", [[0, 1], [2]], "rigs"), ("sequence_length", 0, "sequence_length"),
                       ("stride", 0, "stride"), ("step", "1", "step"), ("shuffle", 1, "shuffle"),
                       ("replacement", "no", "replacement"), ("streams", "yes", "streams"),
                       ("num_samples", 0, "num_samples"),
                       ("seed", 0.5, "seed")],
}
_SAMPLER_REQUIRED = {Clips: {"sequence_length": 2}, MultiCameraClips: {"rigs": [[0, 1]]}}


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    paths = make_small_dataset(tmp_path_factory.mktemp("config_media"), n=2)
    return vidloader.build_index(paths, num_workers=0, progress=False)


@pytest.mark.parametrize(("arg", "value", "error", "text"), LOADER_ROWS,
                         ids=[f"{r[0]}={r[1]!r}" for r in LOADER_ROWS])
def test_loader_argument_mistakes_fail_at_construction(index, arg, value, error, text):
    kwargs = {"batch_size": 4, "num_workers": 0, "world_size": 2 if arg == "rank" else 1}
    kwargs.update({} if arg == "index" else {arg: value})
    with pytest.raises(error) as info:
        VideoLoader(value if arg == "index" else index, **kwargs)
    assert text in str(info.value)
    assert type(info.value) in (ConfigError, BackendUnavailableError)


@pytest.mark.parametrize(("arg", "value", "error", "text"), PROCESS_ROWS,
                         ids=[f"{r[0]}={r[1]!r}" for r in PROCESS_ROWS])
def test_process_argument_mistakes(arg, value, error, text):
    with pytest.raises(error) as info:
        Process(**{arg: value}, **({"dtype": "float32"} if arg in ("mean", "std") else {}))
    assert text in str(info.value)
    if arg != "std":  # the message shows the value given
        assert repr(value) in str(info.value)


_SAMPLER_CASES = [(cls, *row) for cls, rows in SAMPLER_ROWS.items() for row in rows]


@pytest.mark.parametrize(("cls", "arg", "value", "text"), _SAMPLER_CASES,
                         ids=[f"{c.__name__}-{a}={v!r}" for c, a, v, _ in _SAMPLER_CASES])
def test_sampler_argument_mistakes(cls, arg, value, text):
    kwargs = {**_SAMPLER_REQUIRED.get(cls, {}), arg: value}
    with pytest.raises(ConfigError) as info:
        cls(**kwargs)
    assert text in str(info.value)


def test_every_argument_has_a_row():
    def params(f):
        return {n for n, p in inspect.signature(f).parameters.items() if n != "self"}

    assert params(VideoLoader.__init__) == {r[0] for r in LOADER_ROWS}
    assert params(Process) == {r[0] for r in PROCESS_ROWS}
    for cls, rows in SAMPLER_ROWS.items():
        assert params(cls) == {r[0] for r in rows}, cls.__name__


def test_nvdec_option_keys_are_the_executors():
    """The executor's options the loader does not set, and the two the loader reads itself."""
    from vidloader.decoding.nvdec import NvdecExecutor
    from vidloader.pipeline._config import NVDEC_OPTION_KEYS

    set_by_loader = {"device", "max_width", "max_height", "num_decoders", "caps", "nvtx"}
    options = set(inspect.signature(NvdecExecutor).parameters) - set_by_loader
    assert options | {"units_decoding", "demux_ahead_bytes"} == set(NVDEC_OPTION_KEYS)


def test_nvdec_takes_at_most_8_demux_workers_by_default(monkeypatch):
    """``num_workers=None``: a process per core, but NVDEC in the loader's process takes at
    most DEFAULT_NVDEC_DEMUX_WORKERS demux workers (8 ran faster than 16 on 16 cores,
    session20-4 and -6); the CPU backend, the combo and NVDEC worker processes keep a process
    per core."""
    from vidloader.constants import DEFAULT_NVDEC_DEMUX_WORKERS
    from vidloader.pipeline import _loader

    monkeypatch.setattr(_loader.os, "cpu_count", lambda: 16)
    assert DEFAULT_NVDEC_DEMUX_WORKERS == 8
    assert _loader._default_workers("nvdec", 1) == 8
    assert _loader._default_workers("nvdec", 4) == 16
    assert _loader._default_workers("cpu", 1) == 16
    assert _loader._default_workers("combo", 1) == 16
    monkeypatch.setattr(_loader.os, "cpu_count", lambda: 2)
    assert _loader._default_workers("nvdec", 1) == 2
