"""Describe the machine (CPU, memory, GPUs, library versions) for the demo and the benchmarks.

Never initialises CUDA unless ``torch.cuda.is_available()`` says a GPU is usable, so calling
it before starting forked workers is safe.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shutil
import subprocess

#: Seconds ``nvidia-smi`` may take before we give up on it (a hung driver must not hang us).
_NVIDIA_SMI_TIMEOUT_SECONDS = 10.0


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages, rounded; ``None`` where the OS has none."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _ram_bytes() -> int:
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024  # the value is in kB
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def _gpus_from_torch() -> list[dict] | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():  # checks the driver without creating a CUDA context
        return None
    gpus = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        gpus.append({"name": props.name, "memory_bytes": int(props.total_memory)})
    return gpus


def _gpus_from_nvidia_smi() -> tuple[list[dict], str] | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    cmd = [exe, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader,nounits"]
    try:
        out = subprocess.run(
            cmd, capture_output=True, text=True, timeout=_NVIDIA_SMI_TIMEOUT_SECONDS, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    gpus, driver = [], ""
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3:
            driver = parts[1]
            mib = int(parts[2]) if parts[2].isdigit() else 0
            gpus.append({"name": parts[0], "memory_bytes": mib * 2**20})
    return gpus, driver


def _gpu_info() -> dict:
    # nvidia-smi first: it runs in another process, so this one gets no CUDA context at all.
    smi = _gpus_from_nvidia_smi()
    if smi and smi[0]:
        return {"gpus": smi[0], "gpu_driver": smi[1] or "unknown"}
    gpus = _gpus_from_torch() or []
    return {"gpus": gpus, "gpu_driver": "unknown" if gpus else "none"}


def _version(distribution: str) -> str:
    """Installed version, read from package metadata (no import: torch takes seconds)."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def describe_machine() -> dict:
    """Facts about this machine and the libraries vidloader uses.

    Returns:
        A dict with ``cpu`` (model), ``logical_cores``, ``ram_bytes``, ``gpus`` (list of
        ``{"name", "memory_bytes"}``, empty when none), ``gpu_driver`` (``"none"`` without a
        GPU), ``os``, and the versions ``python``, ``torch``, ``av``, ``numpy``,
        ``ffmpeg`` (as PyAV reports it).
    """
    info = {
        "cpu": _cpu_model(),
        "logical_cores": os.cpu_count() or 0,
        "ram_bytes": _ram_bytes(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "torch": _version("torch"),
        "av": _version("av"),
        "numpy": _version("numpy"),
        "ffmpeg": _ffmpeg_version(),
    }
    info.update(_gpu_info())
    return info


def _ffmpeg_version() -> str:
    try:
        import av

        return str(av.ffmpeg_version_info)  # PyAV's own FFmpeg, not the system one
    except Exception:
        return "unknown"


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def format_machine(info: dict) -> str:
    """A few readable lines from :func:`describe_machine`'s dict."""
    gpus = info.get("gpus") or []
    if gpus:
        names = ", ".join(f"{g['name']} ({_gib(g['memory_bytes'])})" for g in gpus)
        gpu_line = f"GPU:      {len(gpus)}x {names}; driver {info.get('gpu_driver', 'unknown')}"
    else:
        gpu_line = "GPU:      none"
    return "\n".join([
        f"CPU:      {info.get('cpu', 'unknown')}, {info.get('logical_cores', 0)} logical cores",
        f"Memory:   {_gib(info.get('ram_bytes', 0))}",
        gpu_line,
        f"OS:       {info.get('os', 'unknown')}",
        f"Software: Python {info.get('python')}, torch {info.get('torch')}, av {info.get('av')} "
        f"(FFmpeg {info.get('ffmpeg')}), numpy {info.get('numpy')}",
    ])
