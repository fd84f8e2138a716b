"""The NVDEC status tap: PyNvVideoCodec's decode-error messages, seen and attributed per GOP.

Why: NVDEC conceals bitstream damage. A few hundred bytes overwritten inside a slice came out
of the NVDEC path as wrong frames (the damaged picture and those that reference it) without
an error. PyNvVideoCodec 2.2.4 exposes no decode status in Python, but its C++ decoder calls
``cuvidGetDecodeStatus`` in its picture-display callback and, for an error or a concealed
error, prints ``Decode Error occurred for picture N`` with C ``printf`` on file descriptor 1,
synchronously inside the ``Decode`` call (or the flush) of the thread that decodes
(``benchmarks/diag/nvdec_damage_probe.py``, ``benchmarks/results/gpu/session8-2/
nvdec_damage.json``). That line is the only signal there is.

How: while an NVDEC executor decodes, fd 1 is a pipe. :func:`acquire` (reference-counted,
process-wide) saves the current fd 1 (``os.dup``: a terminal, a pipe, a file, pytest's
capture, or nothing if fd 1 is closed) and ``dup2``-s a pipe's write end onto it. A reader
thread reads the pipe, counts and drops the decode-error lines and the tap's own sentinel
lines, and hands every other byte, in order and unchanged, to a forwarder thread that writes
it to the saved fd. Two threads so that a slow or stopped consumer of the program's output
(a paused pager) never holds up the counting. The last :func:`release` restores fd 1
(``dup2(saved, 1)``) after everything written so far has been forwarded.

Attribution: a decoder thread enters a gate and reads the count (:meth:`StatusTap.mark`)
before its GOP's first ``Decode``, and calls :meth:`StatusTap.verify` after the GOP's flush:
``fflush(stdout)`` through ctypes (C stdio keeps a pipe's output in its buffer), then a
unique sentinel line written to fd 1, then a wait until the reader has reached it. The pipe
is first in, first out, so every line that GOP's decode printed has been counted by then: a
GOP whose decode printed the message is always suspect (no false negatives). The message
names no decoder, so a line printed by another thread's GOP at the same time makes this GOP
suspect too. The executor therefore decodes a suspect GOP once more *alone* (the gate lets it
in once no GOP is being decoded and keeps the others out meanwhile); that verdict is its own:
suspect again, the GOP goes where a GOP that NVDEC fails to decode goes (the CPU, an error or
a skip), else its second decode is delivered. A damaged GOP costs one more NVDEC decode while
the other threads wait; an intact one never reaches the CPU because of another's damage.

Cost: entering and leaving the gate, ``fstat`` of fd 1 twice, one ``fflush``, one 40-byte
write and one hand-over to the reader thread and back: 20-25 µs per GOP from one thread on
the 2-core CPU machine, 90-240 µs each with four threads at once on those two cores (they
queue for the reader and the GIL) (``tests/test_status_tap.py::
test_verify_costs_microseconds`` prints the first; ``benchmarks/diag/status_tap_cost.py``,
``benchmarks/results/reliability/status_tap_cost.json``), against milliseconds for a GOP's
decode. The waiter is a plain lock the reader releases (an ``Event`` took 43 µs).

Limits:

* Something that replaces fd 1 while the tap is installed (pytest's capture between a test's
  phases, a capture context) is seen at the next GOP, which taps the new fd 1 through a new
  pipe (and the old pipe again once it is put back); a GOP decoded across such a change is
  suspect (decoded again). A replacement made and undone entirely within one GOP's decode is
  not seen.
* Child processes started while the tap is installed inherit the pipe as their fd 1 (a
  Python ``os.fork`` child puts the saved fd back); their output is forwarded for as long as
  they hold it, after the release too.
* A user's own line ``Decode Error occurred for picture N`` is taken for NVDEC's, and so are
  lines printed by another NVDEC user in the process that does not pass the gate.

Opt-out: ``VIDLOADER_NVDEC_STATUS_TAP=0`` leaves fd 1 alone, and concealed damage on NVDEC
goes undetected again.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import fcntl
import itertools
import logging
import os
import queue
import re
import select
import sys
import threading
import weakref

log = logging.getLogger(__name__)

#: The environment variable that turns the tap off (``0``, ``false``, ``no`` or ``off``).
ENV_VAR = "VIDLOADER_NVDEC_STATUS_TAP"
#: What PyNvVideoCodec 2.2.4 prints for ``cuvidDecodeStatus_Error`` / ``_Error_Concealed``
#: (``printf("Decode Error occurred for picture %d\n", ...)``).
ERROR_PREFIX = b"Decode Error occurred for picture "
#: How long :meth:`StatusTap.verify` waits for the reader before the GOP counts as suspect.
VERIFY_TIMEOUT_S = 2.0
#: How long bytes that may begin a message (``b"Deco"`` at the end of a read) are held back
#: before they are forwarded anyway; a message completed later is still counted.
HOLD_S = 0.05
#: Verdicts of :meth:`StatusTap.verify` that are not decode errors.
REDIRECTED = ("file descriptor 1 was replaced while the GOP was decoded, so NVDEC's "
              "decode-error messages may have gone elsewhere")
TIMED_OUT = (f"the NVDEC status tap's reader did not confirm the GOP within {VERIFY_TIMEOUT_S:g} s "
             "(standard output blocked?)")

_READ_BYTES = 1 << 16
_BACKLOG = 256  # forwarded chunks queued at most (back-pressure past ~16 MiB)
_DIGITS = 19  # the most digits a picture number or sequence number has
#: What may follow a prefix in a message not complete yet.
_ERROR_REST = re.compile(rb"-?\d{0,%d}\r?" % _DIGITS)
_SENTINEL_REST = re.compile(rb"\d{0,%d}" % _DIGITS)


def enabled() -> bool:
    """Whether the tap may be installed (``VIDLOADER_NVDEC_STATUS_TAP`` is not set off)."""
    return os.environ.get(ENV_VAR, "1").strip().lower() not in ("0", "false", "no", "off")


class Mark:
    """What :meth:`StatusTap.mark` noted before a GOP's first ``Decode``; ``inside`` while
    the GOP holds its place in the gate."""

    __slots__ = ("errors", "layer", "alone", "inside")

    def __init__(self, errors: int, layer: _Layer | None, alone: bool) -> None:
        self.errors = errors  # the count then (-1: not known: the GOP is suspect)
        self.layer = layer  # the layer on fd 1 then
        self.alone = alone  # decoded while no other GOP was
        self.inside = True


class _Gate:
    """Where GOPs are decoded: many at once (shared), or one alone, once the others are out.

    A GOP that one of many threads found suspect may owe it to another thread's line (the
    line names no decoder); decoded again alone, its verdict is its own. Whoever waits to be
    alone goes before GOPs that arrive after it (no starvation by a busy pool)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._shared = 0  # GOPs being decoded together
        self._alone = False  # one GOP being decoded alone
        self._waiting = 0  # GOPs waiting to be decoded alone

    def enter(self, alone: bool) -> None:
        with self._cond:
            if alone:
                self._waiting += 1
                while self._alone or self._shared:
                    self._cond.wait()
                self._waiting -= 1
                self._alone = True
            else:
                while self._alone or self._waiting:
                    self._cond.wait()
                self._shared += 1

    def leave(self, alone: bool) -> None:
        with self._cond:
            if alone:
                self._alone = False
                self._cond.notify_all()
            else:
                self._shared -= 1
                if self._shared == 0 and self._waiting:
                    self._cond.notify_all()


class _Waiter:
    """One :meth:`StatusTap.verify` call waiting for its sentinel: a lock taken by the waiter
    and released by the reader (cheaper than an ``Event``, which is a condition per wait)."""

    __slots__ = ("lock", "errors")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.lock.acquire()
        self.errors = -1  # the count when the reader reached the sentinel


class _Layer:
    """One pipe on fd 1, the fd it forwards to (fd 1 before it; ``None``: fd 1 was closed),
    and its two threads. A tap has a new layer each time it finds fd 1 replaced under it (see
    :meth:`StatusTap._current`); an old one lives until every write end of its pipe is
    closed (ours at once; a copy someone saved to put back later keeps it going)."""

    def __init__(self, tap: StatusTap, target: int | None) -> None:
        self.tap, self.target = tap, target
        self.read_fd, self.write_fd = (_above_stdio(fd) for fd in os.pipe())
        st = os.fstat(self.write_fd)
        self.pipe = (st.st_dev, st.st_ino)
        self.out: queue.Queue = queue.Queue(_BACKLOG)
        self.forward_error: OSError | None = None  # why forwarding stopped, if it did
        self.reader = threading.Thread(target=self._read_loop, name="vidloader-status-tap", daemon=True)
        self.forwarder = threading.Thread(target=self._forward_loop, name="vidloader-status-tap-out",
                                          daemon=True)
        self.reader.start()
        self.forwarder.start()

    def on_fd1(self) -> bool:
        """Whether fd 1 is (a copy of) this layer's pipe."""
        return _fd1_identity() == self.pipe

    def put_back(self) -> None:
        """Put the saved fd back on fd 1 if this layer's pipe is there (else whoever replaced
        it will undo that), and close our write end (the reader ends at EOF)."""
        if self.on_fd1():
            if self.target is not None:
                os.dup2(self.target, 1)
            else:
                os.close(1)
        self.close_write()

    def close_write(self) -> None:
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1

    def join(self, timeout: float) -> None:
        self.reader.join(timeout)
        self.forwarder.join(timeout)

    # -- the reader ---------------------------------------------------------------------------

    def _read_loop(self) -> None:
        """Read the pipe until EOF (every write end closed), count and pass on."""
        tail, unsent = b"", 0  # bytes that may begin a message; how many are not passed on yet
        try:
            while True:
                if unsent and not select.select([self.read_fd], [], [], HOLD_S)[0]:
                    self._pass_on(tail[len(tail) - unsent:])  # kept in `tail` to count later
                    unsent = 0
                    continue
                data = os.read(self.read_fd, _READ_BYTES)
                if not data:
                    break
                tail, unsent = self._scan(tail, unsent, data)
            if unsent:
                self._pass_on(tail[len(tail) - unsent:])
        finally:
            os.close(self.read_fd)
            self.out.put(None)

    def _scan(self, tail: bytes, unsent: int, data: bytes) -> tuple[bytes, int]:
        """Count the messages in ``tail + data``, pass on every other byte not passed on yet,
        and return the new tail (bytes that may begin a message) and how many of its last
        bytes are not passed on yet. ``tail``'s first ``len(tail) - unsent`` bytes were passed
        on already (held too long): a message they begin is still counted."""
        tap = self.tap
        text = tail + data
        sent = len(tail) - unsent  # text[:sent] is out already
        start = 0
        for m in tap._message.finditer(text):
            self._pass_on(text[max(start, sent) : max(m.start(), sent)])  # before a sentinel's waiter wakes
            start = m.end()
            if m.group(1) is None:
                tap._counted()
            else:
                tap._arrived(int(m.group(1)))
        cut = tap._tail_start(text, start)
        self._pass_on(text[max(start, sent) : max(cut, sent)])
        return text[cut:], len(text) - max(cut, sent)

    def _pass_on(self, data: bytes) -> None:
        if data:
            self.out.put(data)

    # -- the forwarder ------------------------------------------------------------------------

    def _forward_loop(self) -> None:
        """Write what the reader passes on to the saved fd, in order; set barrier events."""
        try:
            while True:
                item = self.out.get()
                if item is None:
                    return
                if isinstance(item, threading.Event):
                    item.set()
                elif self.target is not None and self.forward_error is None:
                    self._write_all(self.target, item)
        finally:
            if self.target is not None:
                os.close(self.target)

    def _write_all(self, fd: int, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                try:
                    view = view[os.write(fd, view):]
                except BlockingIOError:  # a non-blocking fd: wait until it takes more
                    select.select([], [fd], [])
        except OSError as exc:  # the reader of the program's output is gone: drop, keep counting
            self.forward_error = exc

    def detach_in_child(self) -> None:
        """In a forked child (which has none of the threads): put the saved fd back on fd 1
        if this pipe is there, and close this layer's descriptors."""
        if self.on_fd1():
            if self.target is not None:
                os.dup2(self.target, 1)
            else:
                os.close(1)
        for fd in (self.read_fd, self.write_fd, self.target):
            if fd is not None and fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)


class StatusTap:
    """fd 1 redirected through a pipe whose decode-error lines are counted (module docstring).

    Create it through :func:`acquire`; :meth:`mark` and :meth:`verify` are what decoder
    threads call, from any number of threads.
    """

    def __init__(self) -> None:
        token = os.urandom(6).hex().encode()
        #: The tap's own line (NUL first: no text a program prints by chance).
        self._sentinel = b"\0vidloader-status-tap-" + token + b" "
        self._message = re.compile(
            re.escape(ERROR_PREFIX) + rb"-?\d{1,%d}\r?\n|" % _DIGITS
            + re.escape(self._sentinel) + rb"(\d{1,%d})\n" % _DIGITS)
        self._longest = max(len(ERROR_PREFIX), len(self._sentinel)) + _DIGITS + 3
        #: Decode-error lines counted since installation.
        self.errors = 0
        self._count_lock = threading.Lock()  # readers of several layers may count at once
        self._seq = itertools.count(1)
        self._waiters: dict[int, _Waiter] = {}
        self._warned: set[str] = set()
        self._layer: _Layer | None = None
        self._layer_lock = threading.Lock()
        self._layers: list[_Layer] = []  # every layer made (a forked child closes them all)
        self._gate = _Gate()

    # -- install / uninstall ------------------------------------------------------------------

    def _install(self) -> None:
        """Save fd 1 and put a pipe in its place (a layer)."""
        self._layer = self._new_layer()

    def _new_layer(self) -> _Layer:
        flush_stdout()  # what was written before goes where fd 1 pointed then
        try:
            target: int | None = os.dup(1)
        except OSError:  # fd 1 closed: nothing to forward to, but messages still count
            target = None
        layer = _Layer(self, target)
        os.dup2(layer.write_fd, 1)  # inheritable, as fd 1 always is
        self._layers = [x for x in self._layers if x.reader.is_alive()] + [layer]
        return layer

    def _uninstall(self, *, timeout: float = VERIFY_TIMEOUT_S) -> None:
        """Forward what was written so far, put the saved fd back on fd 1 (unless someone else
        has replaced the pipe there meanwhile: theirs to undo), and let the threads end."""
        with self._layer_lock:
            layer, self._layer = self._layer, None
        if layer is None:
            return
        flush_stdout()
        # The pipe on fd 1 may be an older layer's, put back by a capture that saved it.
        on = next((x for x in (layer, *self._layers) if x.on_fd1() and x.reader.is_alive()), None)
        if on is not None:
            self._sync(on, timeout)  # so what follows, written straight to fd 1, comes after
            on.put_back()
        layer.close_write()
        layer.join(timeout)  # at once, unless a child process still holds the pipe

    def is_fd1(self) -> bool:
        """Whether fd 1 is the pipe of the tap's current layer."""
        layer = self._layer
        return layer is not None and layer.on_fd1()

    def _current(self) -> _Layer | None:
        """The layer on fd 1, made anew if fd 1 was replaced under the tap (pytest's capture
        puts the terminal back between a test's phases; a capture context puts its file
        there): the new fd 1 is saved and forwarded to, and the old layer's write end closed.
        ``None`` once uninstalled."""
        layer = self._layer
        if layer is None or layer.on_fd1():
            return layer
        with self._layer_lock:
            layer = self._layer
            if layer is None or layer.on_fd1():
                return layer
            log.info("NVDEC status tap: fd 1 was replaced; tapping the new fd 1")
            ident = _fd1_identity()
            back = next((x for x in self._layers if x.pipe == ident and x.reader.is_alive()), None)
            # An older layer's pipe put back (a capture that saved it ending): that layer
            # again. Otherwise a new one over whatever fd 1 is now.
            self._layer = back if back is not None else self._new_layer()
            layer.close_write()
            return self._layer

    # -- attribution --------------------------------------------------------------------------

    def mark(self, *, alone: bool = False) -> Mark:
        """Before a GOP's first ``Decode``: enter the gate (shared, or ``alone``: once every
        GOP being decoded has left, keeping the others out) and note what :meth:`verify`
        compares with. :meth:`verify` leaves the gate; a GOP that fails before it must call
        :meth:`leave`."""
        self._gate.enter(alone)
        try:
            layer = self._current()
            # Alone, the count is taken through the pipe: lines the GOPs just ended printed
            # are counted before, not during, this one.
            before = self._round_trip(VERIFY_TIMEOUT_S) if alone and layer is not None else self.errors
        except BaseException:
            self._gate.leave(alone)
            raise
        return Mark(before, layer, alone)

    def leave(self, mark: Mark) -> None:
        """Leave the gate (once: after :meth:`verify` it does nothing)."""
        if mark.inside:
            mark.inside = False
            self._gate.leave(mark.alone)

    def verify(self, mark: Mark) -> str | None:
        """After a GOP's last ``Decode`` (the flush), on the thread that decoded it: ``None``
        if no decode-error line was printed between :meth:`mark` and now, else why the GOP
        is suspect (decode errors, fd 1 replaced meanwhile, or no answer within
        :data:`VERIFY_TIMEOUT_S`). Leaves the gate."""
        try:
            return self._verdict(mark)
        finally:
            self.leave(mark)

    def _verdict(self, mark: Mark) -> str | None:
        layer = mark.layer
        if layer is None or layer is not self._layer or not layer.on_fd1():
            return self._warn_once(REDIRECTED, logging.INFO)  # decoded again, re-tapped
        errors = self._round_trip(VERIFY_TIMEOUT_S) if mark.errors >= 0 else -1
        if errors < 0:
            return self._warn_once(TIMED_OUT)
        if layer.forward_error is not None:
            self._warn_once(f"the NVDEC status tap could not forward standard output any more "
                            f"({layer.forward_error}); output is dropped")
        if errors <= mark.errors:
            return None
        whose = ("no other GOP was being decoded, so the error is this GOP's" if mark.alone else
                 "the line names no decoder, so with several decoder threads it may come from "
                 "another GOP decoded at the same time")
        return (f"NVDEC reported {errors - mark.errors} concealed decode error(s) while it was "
                f"decoded (PyNvVideoCodec printed 'Decode Error occurred for picture N'; {whose})")

    def sync(self, timeout: float = VERIFY_TIMEOUT_S) -> bool:
        """Wait until everything written to fd 1 before this call has been forwarded to the
        saved fd (for tests, and before fd 1 is put back). False on timeout."""
        layer = self._current()
        return layer is not None and self._sync(layer, timeout)

    def _sync(self, layer: _Layer, timeout: float) -> bool:
        if self._round_trip(timeout) < 0:
            return False
        done = threading.Event()  # the forwarder sets it once all before it is written
        try:
            layer.out.put(done, timeout=timeout)
        except queue.Full:
            return False
        return done.wait(timeout)

    def _round_trip(self, timeout: float) -> int:
        """Flush C stdio, write a sentinel to fd 1 and wait for the reader to reach it; the
        error count at that point, or -1 on timeout."""
        flush_c_stdout()
        seq = next(self._seq)
        waiter = self._waiters[seq] = _Waiter()
        try:
            os.write(1, self._sentinel + b"%d\n" % seq)  # < PIPE_BUF: one piece in the pipe
            if not waiter.lock.acquire(timeout=timeout):
                return -1
        except OSError:  # fd 1 closed or replaced since the check: cannot vouch
            return -1
        finally:
            self._waiters.pop(seq, None)
        return waiter.errors

    def _warn_once(self, why: str, level: int = logging.WARNING) -> str:
        if why not in self._warned:
            self._warned.add(why)
            log.log(level, "NVDEC status tap: %s", why)
        return why

    # -- called by the layers' readers ----------------------------------------------------------

    def _counted(self) -> None:
        with self._count_lock:
            self.errors += 1

    def _arrived(self, seq: int) -> None:
        """A reader reached sentinel ``seq``: wake its waiter with the count so far."""
        waiter = self._waiters.pop(seq, None)  # once: a lock is released once
        if waiter is not None:
            waiter.errors = self.errors
            waiter.lock.release()

    def _tail_start(self, text: bytes, start: int) -> int:
        """Where the longest suffix of ``text[start:]`` that could begin a message starts
        (``len(text)`` if none): those bytes are held until the next read tells."""
        lo = max(start, len(text) - self._longest)
        for p in range(lo, len(text)):
            if text[p] in (0x44, 0x00) and self._could_begin(text[p:]):  # "D", NUL: first bytes
                return p
        return len(text)

    def _could_begin(self, s: bytes) -> bool:
        """Whether ``s`` is the beginning of a decode-error line or of a sentinel line."""
        for prefix, rest in ((ERROR_PREFIX, _ERROR_REST), (self._sentinel, _SENTINEL_REST)):
            if len(s) <= len(prefix):
                if prefix.startswith(s):
                    return True
            elif s.startswith(prefix) and rest.fullmatch(s, len(prefix)):
                return True
        return False

    def _detach_in_child(self) -> None:
        for layer in self._layers:
            layer.detach_in_child()


def _above_stdio(fd: int) -> int:
    """``fd``, moved above 2 if it is one of the standard descriptors (free because fd 1, say,
    is closed): ``dup2`` onto fd 1 must not close the pipe's other end."""
    if fd > 2:
        return fd
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    os.close(fd)
    return moved


def _fd1_identity() -> tuple[int, int] | None:
    """``(device, inode)`` of what fd 1 is, ``None`` if it is closed."""
    try:
        st = os.fstat(1)
    except OSError:
        return None
    return st.st_dev, st.st_ino


# -- C stdio -----------------------------------------------------------------------------------

_LIBC = ctypes.CDLL(None)
_LIBC.fflush.argtypes = [ctypes.c_void_p]
_LIBC.fflush.restype = ctypes.c_int
try:
    _C_STDOUT: ctypes.c_void_p | None = ctypes.c_void_p.in_dll(_LIBC, "stdout")
except ValueError:  # no such symbol (not glibc/musl): flush every stream instead
    _C_STDOUT = None


def flush_c_stdout() -> None:
    """``fflush(stdout)``: C stdio holds output to a pipe or file in its buffer (fully
    buffered), so a message printed there may not have reached fd 1 yet."""
    _LIBC.fflush(_C_STDOUT.value if _C_STDOUT is not None else None)


def flush_stdout() -> None:
    """Flush Python's and C's standard output buffers, so what was written before fd 1
    changes goes where fd 1 pointed when it was written."""
    for stream in {id(s): s for s in (sys.stdout, sys.__stdout__) if s is not None}.values():
        with contextlib.suppress(OSError, ValueError):  # closed or detached: nothing to flush
            stream.flush()
    flush_c_stdout()


# -- the process-wide tap ------------------------------------------------------------------------

_LOCK = threading.Lock()
_TAP: StatusTap | None = None
_USERS = 0
_HOOKED = False


def acquire() -> StatusTap | None:
    """Install the tap (first user) or count one more user; ``None`` when it is turned off
    (:data:`ENV_VAR`) or cannot be installed (logged once: NVDEC damage goes undetected)."""
    global _TAP, _USERS
    if not enabled():
        return None
    with _LOCK:
        if _TAP is None:
            _hook_once()
            try:
                tap = StatusTap()
                tap._install()
            except OSError as exc:
                log.warning("NVDEC status tap not installed (%s): concealed decode errors on "
                            "NVDEC go undetected", exc)
                return None
            _TAP = tap
        _USERS += 1
        return _TAP


def release(tap: StatusTap | None) -> None:
    """One user less (``tap`` as :func:`acquire` returned it); the last one uninstalls."""
    global _TAP, _USERS
    if tap is None:
        return
    with _LOCK:
        if tap is not _TAP:
            return  # released after a fork or at exit already
        _USERS -= 1
        if _USERS == 0:
            _TAP = None
            tap._uninstall()


def current() -> StatusTap | None:
    """The installed tap, if any (for tests and diagnostics)."""
    return _TAP


class Lease:
    """One holder's use of the tap (:attr:`tap`, ``None`` when off), given back once: by
    :meth:`release`, or when the lease is garbage collected without it."""

    def __init__(self) -> None:
        self.tap = acquire()
        self._finalizer = weakref.finalize(self, release, self.tap)

    def release(self) -> None:
        self._finalizer()  # runs once


def _hook_once() -> None:
    global _HOOKED
    if not _HOOKED:
        _HOOKED = True
        atexit.register(_at_exit)
        os.register_at_fork(after_in_child=_after_fork_in_child)


def _at_exit() -> None:
    """At interpreter exit (daemon threads still run): forward what is left, put fd 1 back."""
    global _TAP, _USERS
    with _LOCK:
        tap, _TAP, _USERS = _TAP, None, 0
    if tap is not None:
        tap._uninstall(timeout=0.5)


def _after_fork_in_child() -> None:
    global _TAP, _USERS, _LOCK
    _LOCK = threading.Lock()  # another thread may have held it at the fork
    tap, _TAP, _USERS = _TAP, None, 0
    if tap is not None:
        tap._detach_in_child()
