"""RSS and PSS of a loader's worker processes, read from ``/proc/<pid>/smaps_rollup``.

Issue 16, item 1: separation mode's demux workers imported torch (~190 MiB of RSS each on the
CPU machine) though they only demux. This script starts a loader, takes a few batches so every
worker has done real work, and reads, while the workers are alive, the memory of this process,
of each fork server (the children of this process) and of each worker (the servers' children):

    cd /work/wt-mem && PYTHONPATH=$PWD/src:$PWD python \\
        benchmarks/results/cpu/memory/worker_memory.py --backend nvdec --workers 4 --out m.json

``--backend nvdec`` on a machine without a GPU runs with the tests' fake PyNvVideoCodec
(``tests/_fake_nvc.py``: FFmpeg decodes, the "GPU" slots are CPU tensors), which changes
nothing in the demux workers: they run the same code as on the GPU machine. Linux only.

RSS counts every page a process maps, shared ones included (the fork server's preloaded
modules are shared copy-on-write by all its forks); PSS divides each page by the processes
that share it, so the PSS of all processes adds up to what the machine really spends.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile

FIELDS = ("Rss", "Pss", "Pss_Anon", "Pss_File", "Shared_Clean", "Private_Clean", "Private_Dirty")


def rollup(pid: int) -> dict:
    """``/proc/<pid>/smaps_rollup`` in MiB (the fields of :data:`FIELDS`)."""
    out = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in FIELDS:
                out[key] = round(int(rest.split()[0]) / 1024, 1)
    return out


def children(pid: int) -> list[int]:
    """The live children of ``pid`` (from each process's ``stat``)."""
    kids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:  # field 4, after "(comm)"
            kids.append(int(entry))
    return sorted(kids)


def command(pid: int) -> str:
    """The start of the process's command line."""
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().replace(b"\0", b" ").decode(errors="replace")[:100].strip()


def torch_mapped(pid: int) -> bool:
    """Whether the process maps torch's shared library (i.e. imported torch)."""
    with open(f"/proc/{pid}/maps") as f:
        return any("libtorch" in line for line in f)


def _dataset(root: str, n: int) -> list:
    from vidloader.synthetic import VideoSpec, make_dataset

    specs = [VideoSpec(codec="h264", width=320, height=240, num_frames=60, gop=15, bframes=2, seed=s)
             for s in range(n)]
    # In this process (one job at a time): a fork server started for the encoding jobs would
    # be counted beside the loader's.
    return make_dataset(root, specs, names=[f"v{i}.mp4" for i in range(n)], num_workers=1)


def _install_fake_nvdec():
    """The tests' fake PyNvVideoCodec, "GPU" slots on the CPU (no GPU here)."""
    import pytest
    import torch

    from tests import _fake_nvc
    from vidloader.pipeline._config import LoaderConfig

    mp = pytest.MonkeyPatch()
    _fake_nvc.install(mp, _fake_nvc.FakeNvc())
    mp.setattr(LoaderConfig, "gpu", property(lambda self: torch.device("cpu")))
    return mp


def measure(args) -> dict:
    import vidloader

    with tempfile.TemporaryDirectory() as root:
        index = vidloader.build_index(_dataset(root, args.videos), num_workers=0, progress=False)
        fake = _install_fake_nvdec() if args.backend != "cpu" and args.fake else None
        kw = {"device": "cpu"} if fake is not None else {}
        loader = vidloader.VideoLoader(index, sampler=vidloader.RandomFrames(seed=0),
                                       batch_size=args.batch_size, size=(112, 112),
                                       backend=args.backend, num_workers=args.workers, **kw)
        it = iter(loader)
        for _ in range(args.batches):
            next(it)
        kids = children(os.getpid())
        servers = [k for k in kids if children(k)]  # the others: multiprocessing's resource tracker
        procs = {"loader": [os.getpid()], "servers": servers,
                 "other_children": [k for k in kids if k not in servers],
                 "workers": [w for s in servers for w in children(s)]}
        got = {role: [{"pid": p, "cmd": command(p), "torch": torch_mapped(p), **rollup(p)}
                      for p in pids]
               for role, pids in procs.items()}
        loader.shutdown()
        if fake is not None:
            fake.undo()
    workers = got["workers"]
    return {
        "backend": args.backend, "workers": args.workers, "fake_nvdec": fake is not None,
        "batches_taken": args.batches, "python": platform.python_version(),
        "machine": platform.machine(), "cpus": os.cpu_count(),
        "per_worker_mean_MiB": {k: round(sum(w[k] for w in workers) / len(workers), 1)
                                for k in ("Rss", "Pss")} if workers else {},
        "workers_total_Pss_MiB": round(sum(w["Pss"] for w in workers), 1),
        "processes": got,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="nvdec", choices=["cpu", "nvdec"])
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--batches", type=int, default=12, help="batches taken before measuring")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--videos", type=int, default=8)
    p.add_argument("--no-fake", dest="fake", action="store_false",
                   help="use the real PyNvVideoCodec and GPU (default: the tests' fake)")
    p.add_argument("--out", help="write the JSON here (default: stdout only)")
    args = p.parse_args(argv)
    result = measure(args)
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
