"""Worker processes come from vidloader's fork server: a script without a main guard works,
and a worker inherits nothing from the loader's process (no CUDA context, no module state)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from .media import make_small_dataset

# The README's quick start as a user saves it: no `if __name__ == "__main__":` guard. Under
# `spawn` every worker re-ran this script and died. The marker module exists only in this
# process: a worker forked from it (or from a server forked from it) would see it.
_SCRIPT = """
import json, sys, types
sys.modules["parent_only_marker"] = types.ModuleType("parent_only_marker")
with open({ran!r}, "a") as f:
    f.write("ran\\n")
import vidloader
from vidloader.pipeline._pool import WorkerProcesses
from tests.media import isolation_report_worker

index = vidloader.build_index({paths!r}, num_workers=2, progress=False)
loader = vidloader.VideoLoader(index, batch_size=8, size=(32, 48), num_workers=2)
batch = next(iter(loader))
loader.shutdown()
pool = WorkerProcesses(isolation_report_worker, ["parent_only_marker"], 1)
report = pool.get()
pool.put(0, None)
pool.shutdown()
print(json.dumps({{"shape": list(batch["frames"].shape), "videos": len(index), "pid": __import__("os").getpid(),
                   "worker": report}}))
"""


def test_quick_start_runs_as_a_script_without_main_guard(tmp_path):
    paths = [str(p) for p in make_small_dataset(tmp_path / "videos", n=3)]
    ran = tmp_path / "ran.txt"
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(_SCRIPT.format(ran=str(ran), paths=paths)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                         timeout=180, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["shape"] == [8, 32, 48, 3] and got["videos"] == 3
    assert ran.read_text() == "ran\n"  # neither probes nor loader workers re-ran the script
    pid, ppid, marker, main_file, cuda = got["worker"]
    assert pid != got["pid"] and ppid != got["pid"]  # forked by the server, not by the script
    assert not marker and main_file is None and not cuda
