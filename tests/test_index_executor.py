"""``build_index(executor=…)``: any ``concurrent.futures.Executor`` probes chunks written as
shards; the merged index equals an in-process build, and a rerun reuses finished shards."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor

import pytest

from vidloader.errors import WorkerError
from vidloader.index import build_index

from .media import make_small_dataset


class CountingExecutor(Executor):
    """Wraps an executor and counts the tasks submitted (to see what a rerun probes)."""

    def __init__(self, inner: Executor) -> None:
        self.inner, self.submitted = inner, 0

    def submit(self, fn, /, *args, **kwargs):
        self.submitted += 1
        return self.inner.submit(fn, *args, **kwargs)


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    root = tmp_path_factory.mktemp("exec_videos")
    paths = make_small_dataset(root, n=5)
    (root / "broken.mp4").write_bytes(b"not a video")
    return root, paths


def _same(a, b) -> None:
    assert a.paths == b.paths
    assert [r.keyframes.tolist() for r in a] == [r.keyframes.tolist() for r in b]
    assert [(r.path, r.reason) for r in a.rejected] == [(r.path, r.reason) for r in b.rejected]


def test_process_pool_executor_with_shards_matches_in_process_build(videos, tmp_path):
    root, _ = videos
    reference = build_index(root, num_workers=0, progress=False)
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(2, mp_context=ctx) as pool:
        index = build_index(root, executor=pool, shard_dir=tmp_path / "shards", chunk_files=2,
                            progress=False)
    _same(index, reference)
    assert len(reference.rejected) == 1
    assert len(list((tmp_path / "shards").glob("shard-*.vlindex.npz"))) == 3  # 6 files / 2


def test_rerun_probes_only_missing_shards(videos, tmp_path):
    root, _ = videos
    shards = tmp_path / "shards"
    with ThreadPoolExecutor(2) as pool:
        first = build_index(root, executor=pool, shard_dir=shards, chunk_files=2, progress=False)
        killed = sorted(shards.glob("shard-*"))[1]
        killed.unlink()  # as if the build had been killed before this chunk finished
        (shards / (killed.name + ".123.partial.npz")).write_bytes(b"half")
        counting = CountingExecutor(pool)
        again = build_index(root, executor=counting, shard_dir=shards, chunk_files=2,
                            progress=False)
    assert counting.submitted == 1
    _same(again, first)


def test_a_failing_executor_names_the_chunk_and_how_to_resume(videos, tmp_path):
    root, _ = videos

    class Failing(Executor):  # as a cluster whose worker died
        def submit(self, fn, /, *args, **kwargs):
            future = Future()
            future.set_exception(OSError("worker lost"))
            return future

    with pytest.raises(WorkerError, match=r"chunk \d of 3: worker lost.*rerun to continue"):
        build_index(root, executor=Failing(), shard_dir=tmp_path, chunk_files=2, progress=False)


def test_a_local_dask_cluster_builds_the_same_index(videos, tmp_path):
    """Dask's own executor (``Client.get_executor()``), unchanged: the cluster engine case."""
    distributed = pytest.importorskip("distributed")
    root, _ = videos
    reference = build_index(root, num_workers=0, progress=False)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        index = build_index(root, executor=client.get_executor(), shard_dir=tmp_path / "shards",
                            chunk_files=2, progress=False)
    _same(index, reference)


def test_a_rerun_with_other_options_or_a_changed_file_probes_again(videos, tmp_path):
    """Shards are reused only for the same probe options and unchanged files (review)."""
    import os

    root, paths = videos
    shards = tmp_path / "shards"
    with ThreadPoolExecutor(2) as pool:
        build_index(root, executor=pool, shard_dir=shards, chunk_files=2, progress=False)
        counting = CountingExecutor(pool)
        build_index(root, executor=counting, shard_dir=shards, chunk_files=2, progress=False,
                    stream="first")
        assert counting.submitted == 3  # other options: every chunk again
        st = os.stat(paths[0])
        os.utime(paths[0], ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # touched since
        counting = CountingExecutor(pool)
        build_index(root, executor=counting, shard_dir=shards, chunk_files=2, progress=False)
        assert counting.submitted == 1  # only the chunk holding the touched file
