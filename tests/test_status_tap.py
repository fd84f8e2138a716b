"""The NVDEC status tap (``decoding/nvdec/_status_tap.py``) on its own, with real C ``printf``.

PyNvVideoCodec prints ``Decode Error occurred for picture N`` with C ``printf`` on fd 1 when
NVDEC conceals damage; these tests print the same line through ``libc.printf`` (ctypes), so C
stdio's buffering is the real one, from several threads at once. They check what decoding
relies on (every GOP whose thread printed the line is suspect, and the lines are counted)
and what users rely on (everything else written to fd 1 comes out byte for byte, in order,
and fd 1 is put back).
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from vidloader.decoding.nvdec import _status_tap as status_tap

LIBC = ctypes.CDLL(None)
LIBC.fwrite.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_void_p]
C_STDOUT = ctypes.c_void_p.in_dll(LIBC, "stdout")
ERROR = b"Decode Error occurred for picture %d\n"


def _printf(fmt: bytes, *args) -> None:
    LIBC.printf(fmt, *[ctypes.c_int(a) for a in args])


def _fd1() -> tuple[int, int]:
    st = os.fstat(1)
    return st.st_dev, st.st_ino


@pytest.fixture
def tap(capfdbinary):
    """The tap installed over pytest's fd capture as an executor does when it starts
    decoding; released afterwards (unless the test did), and checked gone."""
    held = []

    def install() -> status_tap.StatusTap:
        t = status_tap.acquire()
        assert t is not None and status_tap.current() is t and t.is_fd1()
        held.append(t)
        return t

    yield install
    for t in held:
        if status_tap.current() is t:
            status_tap.release(t)
        assert not any(layer.on_fd1() for layer in t._layers)  # fd 1 given back
    assert status_tap.current() is None


def _same(out: bytes, expected: bytes) -> None:
    """``out == expected``, reported by where they part (not by a diff of megabytes)."""
    at = next((i for i, (a, b) in enumerate(zip(out, expected)) if a != b), min(len(out), len(expected)))
    assert out == expected, (len(out), len(expected), at, out[at - 40 : at + 40], expected[at - 40 : at + 40])


def _threads_gone(tap: status_tap.StatusTap) -> bool:
    return not any(x.reader.is_alive() or x.forwarder.is_alive() for x in tap._layers)


def test_c_printf_from_threads_is_counted_and_attributed(tap, capfdbinary):
    """8 threads, 40 GOPs each; in a random fifth of them the thread prints the error line
    (C stdio, between ordinary C lines). Every such GOP is suspect, the lines are counted, and
    the ordinary lines all come out, in each thread's order, without any error line."""
    tap = tap()
    threads, gops = 8, 40
    verdicts: dict[int, list[tuple[bool, str | None]]] = {}

    def work(k: int) -> None:
        rng = np.random.default_rng(k)
        out = verdicts[k] = []
        for g in range(gops):
            mark = tap.mark()
            _printf(b"thread %d gop %d start\n", k, g)
            printed = bool(rng.random() < 0.2)
            if printed:
                _printf(ERROR, g)
            _printf(b"thread %d gop %d end\n", k, g)
            out.append((printed, tap.verify(mark)))

    capfdbinary.readouterr()
    workers = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    printed = sum(p for v in verdicts.values() for p, _ in v)
    assert printed > 0
    for v in verdicts.values():
        for did_print, why in v:
            if did_print:  # no false negative, ever
                assert why is not None and "concealed decode error" in why
    assert tap.errors == printed
    status_tap.release(tap)
    out = capfdbinary.readouterr().out
    assert b"Decode Error" not in out and b"vidloader-status-tap" not in out and b"\0" not in out
    lines = out.splitlines()
    for k in range(threads):
        mine = [ln for ln in lines if ln.startswith(b"thread %d " % k)]
        assert mine == [b"thread %d gop %d %s" % (k, g, e) for g in range(gops) for e in (b"start", b"end")]
    assert len(lines) == threads * gops * 2


def test_a_clean_gop_is_not_suspect_when_no_one_prints(tap):
    tap = tap()
    for _ in range(20):
        assert tap.verify(tap.mark()) is None
    assert tap.errors == 0


def test_a_gop_decoded_alone_gets_a_verdict_of_its_own(tap):
    """The line names no decoder: B's clean GOP is suspect because A printed during it. B's
    second decode, alone, waits until A's GOP is out, keeps a later GOP (C) out while it runs,
    and is found clean, while A's error stays A's."""
    tap = tap()
    a = tap.mark()  # A's GOP, being decoded
    b = tap.mark()
    _printf(ERROR, 1)  # A's damage, printed while B decodes too
    assert "may come from another GOP" in tap.verify(b)  # B: a false positive
    order = []

    def b_alone() -> None:
        mark = tap.mark(alone=True)
        order.append("B alone in")
        time.sleep(0.2)
        order.append("B alone out")
        order.append(tap.verify(mark))

    def c_shared() -> None:
        mark = tap.mark()
        order.append("C in")
        order.append(tap.verify(mark))

    tb = threading.Thread(target=b_alone)
    tb.start()
    time.sleep(0.2)
    assert order == []  # B waits for A's GOP
    tc = threading.Thread(target=c_shared)
    tc.start()  # arrives after B: waits behind it
    time.sleep(0.1)
    assert order == []
    assert "concealed decode error" in tap.verify(a)  # A leaves
    tb.join(5)
    tc.join(5)
    assert order == ["B alone in", "B alone out", None, "C in", None]


def test_everything_else_comes_out_byte_for_byte(tap, capfdbinary):
    """Bytes that look like the error line but are not (no number, words after it), NULs,
    binary, partial prefixes at the end of a write, a write larger than a pipe read, C and
    os-level writes interleaved: all forwarded unchanged and in order; only whole error
    lines are taken out, also one written in two pieces far apart in time."""
    tap = tap()
    capfdbinary.readouterr()
    blob = bytes(np.random.default_rng(1).integers(0, 256, 200_000, np.uint8))
    pieces = [
        b"plain line\n",
        b"Decode Error occurred for picture x\n",  # not a number: not the binding's line
        b"Decode Error occurred for picture 12 and more\n",
        b"\0\0 nul bytes \0\n",
        b"no newline, ends in a prefix: Deco",
        b"de? no.\n",
        blob,
        b"\nprogress 50%\r",
        b"ends with D",
    ]
    expected = b""
    for i, piece in enumerate(pieces):
        if i % 2:  # through C stdio's buffer, which writes it out in pieces of its own
            LIBC.fwrite(piece, 1, len(piece), C_STDOUT.value)
        else:
            LIBC.fflush(None)  # what C holds goes first
            os.write(1, piece)
        expected += piece
    # C stdio between them, and error lines at both ends of the stream's pieces
    _printf(b"c line %d\n", 7)
    expected += b"c line 7\n"
    _printf(ERROR, 3)
    LIBC.fflush(None)
    os.write(1, b"Decode Err")  # a message split over two writes, 0.2 s apart
    time.sleep(0.2)  # longer than the tap holds a possible beginning: "Decode Err" goes out
    os.write(1, b"or occurred for picture 4\nafter\n")
    expected += b"Decode Err" + b"after\n"
    assert tap.sync()
    assert tap.errors == 2  # the whole line, and the one completed late
    status_tap.release(tap)
    _same(capfdbinary.readouterr().out, expected)


def test_nested_acquire_release_and_fd1_restored(capfdbinary):
    before = _fd1()
    a = status_tap.acquire()
    b = status_tap.acquire()
    assert a is b and a.is_fd1() and _fd1() != before
    status_tap.release(a)
    assert status_tap.current() is a and a.is_fd1()  # one user left
    os.write(1, b"still tapped\n")
    status_tap.release(b)
    assert status_tap.current() is None and _fd1() == before
    assert _threads_gone(a)
    os.write(1, b"straight\n")
    assert capfdbinary.readouterr().out == b"still tapped\nstraight\n"
    c = status_tap.acquire()  # a new one installs afresh
    assert c is not a and c.is_fd1()
    status_tap.release(c)
    assert _fd1() == before


def test_lease_releases_once_and_on_garbage_collection(capfdbinary):
    import gc

    before = _fd1()
    lease = status_tap.Lease()
    other = status_tap.Lease()
    lease.release()
    lease.release()  # once only: the other lease still holds the tap
    assert status_tap.current() is other.tap
    del other
    gc.collect()
    assert status_tap.current() is None and _fd1() == before


def test_turned_off_by_the_environment(monkeypatch):
    before = _fd1()
    for value in ("0", "false", "off"):
        monkeypatch.setenv(status_tap.ENV_VAR, value)
        assert status_tap.acquire() is None
        assert _fd1() == before


def test_fd1_replaced_under_the_tap(tap, tmp_path, capfdbinary):
    """A capture started under the tap (``dup2`` of its file onto fd 1, as pytest's capture
    and capture contexts do): a GOP begun before it cannot be vouched for; GOPs begun after
    it are tapped through a new pipe whose output goes to the capture; when the capture puts
    the pipe it saved back, the tap uses that pipe again. No sentinel leaks anywhere."""
    tap = tap()
    capfdbinary.readouterr()
    saved = os.dup(1)
    capture = tmp_path / "capture"
    before = tap.mark()
    with open(capture, "wb") as f:
        os.dup2(f.fileno(), 1)
        try:
            assert "was replaced" in tap.verify(before)  # its messages may have gone to the file
            mark = tap.mark()  # tapping the file now
            _printf(b"captured %d\n", 1)
            _printf(ERROR, 9)
            assert "concealed decode error" in tap.verify(mark)
            assert tap.verify(tap.mark()) is None
        finally:
            os.dup2(saved, 1)
            os.close(saved)
    assert tap.verify(tap.mark()) is None  # the first pipe again
    os.write(1, b"after the capture\n")
    assert tap.errors == 1
    status_tap.release(tap)
    deadline = time.monotonic() + 5
    while capture.read_bytes() != b"captured 1\n" and time.monotonic() < deadline:
        time.sleep(0.01)  # the capture's pipe is drained by its own threads
    assert capture.read_bytes() == b"captured 1\n"
    assert capfdbinary.readouterr().out == b"after the capture\n"


@pytest.fixture
def tap_from_setup(capfdbinary):
    """A tap installed during fixture setup (a loader made by a fixture): pytest takes its
    pipe off fd 1 when it suspends the capture after the setup phase."""
    t = status_tap.acquire()
    yield t
    status_tap.release(t)


def test_a_tap_outliving_pytest_phases_follows_fd1(tap_from_setup, capfdbinary):
    """pytest suspended its capture after the setup phase (its saved fd back on fd 1) and
    resumed it for the call (its file on fd 1): the first GOP re-taps fd 1, GOPs are vouched
    for (not all suspect), errors are seen, and the output reaches the capture."""
    tap = tap_from_setup
    assert not tap.is_fd1()
    assert tap.verify(tap.mark()) is None
    mark = tap.mark()
    _printf(b"call phase %d\n", 1)
    _printf(ERROR, 2)
    assert "concealed decode error" in tap.verify(mark)
    assert tap.sync()
    assert capfdbinary.readouterr().out == b"call phase 1\n"


_CHILD = r"""
import ctypes, os, sys, threading
from vidloader.decoding.nvdec import _status_tap as st
libc = ctypes.CDLL(None)
print("python before")
tap = st.acquire()
assert tap is not None
print("python under the tap", flush=True)  # its buffer and C's are two: order them
libc.printf(b"c under the tap %d\n", 1)
verdicts = []

def gops(k):  # a decoder thread: its GOP 3 prints the binding's line (in C stdio's buffer)
    for g in range(8):
        mark = tap.mark()
        libc.printf(b"thread %d gop %d\n", k, g)
        if g == 3:
            libc.printf(b"Decode Error occurred for picture %d\n", 10 * k + g)
        verdicts.append((g == 3, tap.verify(mark)))

threads = [threading.Thread(target=gops, args=(k,)) for k in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert all(why is not None for printed, why in verdicts if printed), verdicts  # none missed
assert tap.errors == 4, tap.errors
print(end="", flush=True)  # sys.stdout is None when fd 1 is closed
tap.sync()  # so the fork's own line comes after these
if os.fork() == 0:
    os.write(1, b"forked child\n")
    os._exit(0)
os.wait()
print("last line, never released: atexit forwards it", end="")
"""


@pytest.mark.parametrize("fd1", ["pipe", "file", "tty", "closed"])
def test_any_fd1_in_a_fresh_process(fd1, tmp_path):
    """In a child whose fd 1 is a pipe, a file, a terminal or closed, with C stdio buffering
    as a program gets it (full for a pipe or file: no ``PYTHONUNBUFFERED``, which makes CPython
    turn C's buffering off): four decoder threads' error lines are all caught (the tap flushes
    C's ``stdout`` before its sentinel); the output comes out complete and in order (each
    thread's lines in its order; a forked child writes straight to the saved fd); the error
    lines are taken out; a tap never released is undone at exit."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    cmd = [sys.executable, "-c", _CHILD]
    if fd1 == "pipe":
        out = subprocess.run(cmd, stdout=subprocess.PIPE, env=env, check=True, timeout=60).stdout
    elif fd1 == "file":
        with open(tmp_path / "out", "wb") as f:
            subprocess.run(cmd, stdout=f, env=env, check=True, timeout=60)
        out = (tmp_path / "out").read_bytes()
    elif fd1 == "tty":
        import pty

        master, slave = pty.openpty()
        proc = subprocess.Popen(cmd, stdout=slave, env=env)
        os.close(slave)
        out = b""
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            out += data
        assert proc.wait(60) == 0
        os.close(master)
        out = out.replace(b"\r\n", b"\n")
    else:
        subprocess.run(cmd, stdout=subprocess.DEVNULL, env=env, check=True, timeout=60,
                       preexec_fn=lambda: os.close(1))  # counted and vouched for all the same
        return
    lines = out.split(b"\n")
    threaded = [ln for ln in lines if ln.startswith(b"thread ")]
    for k in range(4):
        assert [ln for ln in threaded if ln.startswith(b"thread %d " % k)] == [
            b"thread %d gop %d" % (k, g) for g in range(8)]
    rest = [ln for ln in lines if not ln.startswith(b"thread ")]
    assert rest == [b"python before", b"python under the tap", b"c under the tap 1", b"forked child",
                    b"last line, never released: atexit forwards it"]
    # the threads' lines sit between "c under the tap 1" and the fork's
    assert lines.index(threaded[0]) > lines.index(b"c under the tap 1")
    assert lines.index(threaded[-1]) < lines.index(b"forked child")


def test_verify_costs_microseconds(tap, capfdbinary):
    """What the tap adds per GOP (mark + verify, nothing printed): states the figure quoted in
    the module docstring and the README; bounded loosely (a busy CI machine)."""
    tap = tap()
    n = 2000
    for _ in range(100):
        tap.verify(tap.mark())
    t0 = time.perf_counter()
    for _ in range(n):
        assert tap.verify(tap.mark()) is None
    us = (time.perf_counter() - t0) / n * 1e6
    with capfdbinary.disabled():
        sys.stderr.write(f"\nstatus tap: {us:.1f} us per GOP (mark + verify)\n")
    assert us < 2000
