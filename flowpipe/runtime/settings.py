"""Process-wide settings, made once by the command line (never by a run): signal handling and the size
of OpenCV's own thread pool."""
from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from ..accel.host import usable_cores
from ..graph import GraphSpec

log = logging.getLogger("flowpipe")


class Interruptible(Protocol):
    def interrupt(self) -> None: ...


@contextmanager
def interrupts_stop(runner: Interruptible) -> Iterator[None]:
    """The first SIGINT/SIGTERM drains frames in flight and closes every node; a second stops at once."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    got: list[int] = []

    def on_signal(signum: int, _frame: Any) -> None:
        got.append(signum)
        runner.interrupt()

    old = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            # once interrupted, the run is over and the process on its way out: a second Ctrl-C that comes
            # now must not cut the account short with a traceback
            signal.signal(sig, signal.SIG_IGN if got else handler)


def environment_for_children() -> None:
    """The C environment a process started now inherits made what ``os.environ`` says again. Native
    libraries change it behind Python's back: PoCL, once OpenCL platforms are listed, sets
    OCL_ICD_FILENAMES to itself alone (and HWLOC_PLUGINS_PATH), so a shard or device owner started after
    would see PoCL as the only OpenCL platform, and OpenVINO no GPU (seen with NVIDIA's driver)."""
    if os.name != "posix":
        return
    import ctypes

    environ = ctypes.POINTER(ctypes.c_char_p).in_dll(ctypes.CDLL(None), "environ")
    ours = os.environb
    changed = []
    i = 0
    while environ[i] is not None:
        key, _, value = environ[i].partition(b"=")
        if ours.get(key) != value:
            changed.append(key)
        i += 1
    for key in changed:
        if key in ours:
            os.putenv(key, ours[key])
        else:
            os.unsetenv(key)
    if changed:
        log.debug("environment of processes started from here: %s restored", b", ".join(changed).decode())


def share_library_threads(processes: int) -> None:
    """In one of ``processes`` shard processes: OpenCV's own thread pool gets this process's share of the
    cores (the shards are the parallelism; a full pool in each would oversubscribe the cores N times)."""
    try:
        import cv2
    except ImportError:
        return
    cores = usable_cores()
    cv2.setNumThreads(max(1, cores // max(processes, 1)))


def limit_library_threads(spec: GraphSpec) -> None:
    """When the graph alone has at least as many stage threads as there are cores, OpenCV's own thread
    pool only oversubscribes them (measured on 16 cores: 8 streams 283 -> 416 fps): run it single-threaded
    in this process."""
    try:
        import cv2
    except ImportError:
        return
    stage_threads = sum(s.workers for s in spec.nodes)
    cores = usable_cores()
    if stage_threads >= cores:
        cv2.setNumThreads(1)
        log.info("%d stage threads on %d cores: OpenCV runs single-threaded", stage_threads, cores)


@contextmanager
def no_interrupts_inherited() -> Iterator[None]:
    """A child process started in the block starts with SIGINT ignored and blocked: a terminal's Ctrl-C reaches
    the whole process group, and a shard or device owner still importing (before it says it ignores SIGINT, as
    the supervisor decides what an interrupt means) died of it, with a KeyboardInterrupt traceback or, where a
    library it loads unblocked the signal (an interrupt 1-2 s into a run over shards on 2 cores), killed by it.
    An ignored SIGINT stays ignored across exec, and Python then installs no handler of its own. Blocked in
    this thread alone, for the start (any thread; a signal the process gets meanwhile goes to another); ignored
    from the main thread only, for the few milliseconds of the start (an interrupt then is lost: a second one
    stops the run)."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    handler = None
    if threading.current_thread() is threading.main_thread():
        handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        if handler is not None:
            signal.signal(signal.SIGINT, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def open_files_raised() -> tuple[int, int]:
    """The soft limit on open files raised to the hard one, for this process and those it starts (as systemd's
    LimitNOFILE or nginx's worker_rlimit_nofile do for a server): every frame buffer shared between processes is
    an fd, and a run holds thousands (16 streams over shards: some 41,000; 4 streams over 2 processes failed
    with "Too many open files" under a soft limit of 256). Returns the soft limit before and after."""
    try:
        import resource
    except ImportError:  # not on POSIX
        return 0, 0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft == resource.RLIM_INFINITY or soft >= want:
        return soft, soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    except (ValueError, OSError):  # a hard limit above what the kernel allows (nr_open): as it was
        return soft, soft
    return soft, want


#: malloc arenas a flowpipe process keeps (glibc): ``MALLOC_ARENA_MAX`` set by the user wins
MALLOC_ARENAS = 2


def malloc_arenas_limited(arenas: int = MALLOC_ARENAS) -> int | None:
    """glibc's malloc limited to ``arenas`` arenas in this process and in those it starts (``MALLOC_ARENA_MAX``,
    read by each process as it starts), unless the user set it. glibc gives each thread that allocates an arena
    of its own, up to 8 a core; the pages freed in each stay with it. On the 16-core GPU machine, over 9 minutes
    at 16 streams, each shard's anonymous memory grew by 1-2 MB (16 MB in all, 10% of it an hour) and the device
    owner's (149 threads) held 554 MB; with 2 arenas the shards stayed flat, the owner held 200 MB, the run
    350 MB less, at the same rate (494 against 496 fps; BENCHMARKS section 13). Returns the limit in force (None:
    not glibc, or a MALLOC_ARENA_MAX that is not a number)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    if not hasattr(libc, "gnu_get_libc_version"):  # musl: no arenas to limit
        return None
    asked = os.environ.get("MALLOC_ARENA_MAX")
    if asked is not None:  # the user's; glibc read it as this process started
        return int(asked) if asked.isdigit() else None
    os.environ["MALLOC_ARENA_MAX"] = str(arenas)  # the processes started from here read it as they start
    M_ARENA_MAX = -8  # mallopt's parameter (malloc.h): this process's arenas from now on
    return arenas if libc.mallopt(M_ARENA_MAX, arenas) == 1 else None


#: Open files a run needs at least, for each of its processes: every shared frame buffer is an fd in the process
#: that made it. Lower bounds, below what the main job holds on CPU (some 300 fds in one process with one stream,
#: 350 with two, 590 with four; 372 in a shard with one, 466 with two; README "Open files"), so a run refused on
#: them would surely have run out.
FDS_A_PROCESS, FDS_A_STREAM = 192, 48


def open_files_short(processes: int, streams: int) -> str | None:
    """The line that refuses a run of ``streams`` streams over ``processes`` processes (1: this one) before
    anything opens, when its busiest process needs more open files than the hard limit lets it have (the soft
    limit is raised to it, ``open_files_raised``): what it needs, the limit, how to raise it. None when it fits
    or the limit is not known."""
    try:
        import resource
    except ImportError:  # not on POSIX
        return None
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    each = -(-streams // max(1, processes))  # the busiest process's streams
    needs = FDS_A_PROCESS + each * FDS_A_STREAM
    if hard == resource.RLIM_INFINITY or needs <= hard:
        return None
    where = f"each of its {processes} processes" if processes > 1 else "its process"
    return (f"this run needs at least {needs} open files in {where} ({FDS_A_PROCESS} + {each} stream(s) x "
            f"{FDS_A_STREAM}: every shared frame buffer is one) and the hard limit is {hard}: raise it (ulimit -Hn "
            f"as root, or systemd's LimitNOFILE) or spread the streams over more processes (--processes)")
