"""Shared buffers, pools, handles across processes, and what is sent to the OS for hardware absent here."""
from __future__ import annotations

import multiprocessing as mp
import os
import socket
import struct
import sys
import threading

import numpy as np
import pytest

from flowpipe import memory
from flowpipe.memory import BufferPool, SharedBuffer

linux_only = pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="memfd is Linux-only")


@linux_only
def test_memfd_buffer_is_page_aligned_with_fd_and_numpy_view() -> None:
    buf = SharedBuffer(1920 * 1080 * 3, "memfd")
    assert buf.size % 4096 == 0 and buf.address % 4096 == 0 and buf.handle is not None
    img = buf.array((1080, 1920, 3))
    img[10, 20] = (1, 2, 3)
    assert buf.array((1080, 1920, 3))[10, 20].tolist() == [1, 2, 3]
    assert img.ctypes.data == buf.address
    buf.close()


def test_best_kind_prefers_shareable_memory() -> None:
    kinds = memory.available_kinds()
    assert kinds[-1] == "host"
    if sys.platform.startswith("linux"):
        assert "memfd" in kinds and memory.best_kind() in ("dma-heap", "memfd")


def _child_writes(fd: int, n: int) -> None:
    buf = SharedBuffer(n, "memfd", _fd=fd)
    buf.array((n,))[:] = 42


@linux_only
def test_child_process_maps_handle_and_parent_sees_its_writes() -> None:
    buf = SharedBuffer(4096 * 3, "memfd")
    buf.array((buf.size,))[:] = 0
    ctx = mp.get_context("fork")
    p = ctx.Process(target=_child_writes, args=(buf.handle, buf.size))
    p.start()
    p.join(10)
    assert p.exitcode == 0
    assert int(buf.array((buf.size,)).min()) == 42


@linux_only
def test_fd_crosses_unix_socket_with_scm_rights() -> None:
    from flowpipe.runtime.wire import recv, send

    a, b = socket.socketpair()
    buf = SharedBuffer(8192, "memfd")
    buf.array((8192,))[:5] = [1, 2, 3, 4, 5]
    send(a, {"hello": 1}, [buf.handle])
    msg, fds = recv(b)
    assert msg == {"hello": 1} and len(fds) == 1 and fds[0] != buf.handle
    other = SharedBuffer(8192, "memfd", _fd=fds[0])  # a second mapping of the same pages
    assert other.array((5,)).tolist() == [1, 2, 3, 4, 5]
    other.array((1,))[0] = 99
    assert buf.array((1,))[0] == 99


def test_pool_recycles_and_blocks_when_empty() -> None:
    pool = BufferPool(1000, 2)
    a, b = pool.acquire(), pool.acquire()
    with pytest.raises(TimeoutError):
        pool.acquire(timeout=0.05)
    addr = a.buffer.address
    a.release()
    a.release()  # idempotent
    c = pool.acquire(timeout=1)
    assert c.buffer.address == addr and pool.in_use == 2 and pool.high_water == 2
    b.release()
    c.release()
    assert pool.in_use == 0


def _pss_mb() -> float:
    with open("/proc/self/smaps_rollup") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("Pss:"))


@linux_only
@pytest.mark.parametrize("kind", ["memfd", "host"])
def test_a_pool_lets_go_the_pages_of_buffers_no_frame_has_reached_for_a_window(kind: str) -> None:
    """A burst once took every buffer of a pool; after it, one frame at a time: the pages of the buffers no
    acquisition reached for a window go back (a long run no longer keeps, to its end, the memory its deepest
    queue once touched), in every process that maps them, and a buffer a frame holds keeps its pages."""
    mb = 8 << 20
    pool = BufferPool(mb, 8, kind)
    leases = [pool.acquire() for _ in range(8)]
    for lease in leases:
        lease.buffer.array((mb,))[:] = 255
    other = (SharedBuffer(mb, "memfd", _fd=os.dup(leases[5].buffer.handle)) if kind == "memfd"
             else leases[5].buffer)  # a device owner's mapping of one
    assert int(other.array((mb,)).min()) == 255
    touched = _pss_mb()
    held = leases[0]
    for lease in leases[1:]:
        lease.release()
    for _ in range(2 * BufferPool.TRIM * pool.count):  # two windows: the burst's, then one of a frame at a time
        pool.acquire().release()
    assert pool.pages_let_go == 6  # all but the held one and the one each frame takes
    assert int(held.buffer.array((mb,)).min()) == 255
    assert touched - _pss_mb() >= 5.5 * 8  # six buffers' pages are gone (the other mapping's among them)
    assert int(other.array((mb,)).max()) == 0  # what the other process sees: pages made again, as zeros
    lease = pool.acquire()
    lease.buffer.array((mb,))[:] = 7  # a buffer that let its pages go is written as any other
    assert int(lease.buffer.array((mb,)).min()) == 7
    lease.release()
    held.release()


def test_a_pool_placed_for_a_device_keeps_its_pages() -> None:
    """Memory a driver may hold pinned (placed for a device, or written by one) is never trimmed."""
    from flowpipe.contracts import Allocation

    mb = 1 << 20
    for pool in (BufferPool(mb, 4, trim=False), Allocation("dma-buf").pool(mb, 4)):
        leases = [pool.acquire() for _ in range(4)]
        for lease in leases:
            lease.buffer.array((mb,))[:] = 9
            lease.release()
        for _ in range(2 * BufferPool.TRIM * pool.count):
            pool.acquire().release()
        assert pool.pages_let_go == 0 and all(int(b.array((mb,)).min()) == 9 for b in pool.buffers())
    host = Allocation("host").pool(mb, 2)  # host memory: trimmed
    first, second = host.acquire(), host.acquire()
    first.release()
    second.release()
    for _ in range(2 * BufferPool.TRIM * host.count):
        host.acquire().release()
    assert host.pages_let_go == 1


def test_pool_stays_bounded_under_a_slow_consumer() -> None:
    from flowpipe.testing import run_yaml

    res = run_yaml("""
        plugins: [fp_testnodes]
        nodes:
          - {id: src, type: synthetic_source, config: {count: 80, width: 320, height: 240}}
          - {id: slow, type: test_fault, config: {delay_s: 0.003}, inputs: src.frame, queue: 2}
          - {id: s, type: null_sink, inputs: slow.out, queue: 2}
    """)
    assert res.ok and res.frames["out"] == 80
    # frames_in_flight sizes the pool: queues (2+2) + 2 per node + 2
    assert res.nodes["slow"]["queue_max"] <= 3


def test_opencl_buffer_over_shared_memory_is_zero_copy_on_pocl() -> None:
    cl = pytest.importorskip("pyopencl")
    from flowpipe.accel import devices

    try:
        dev = devices().opencl.device("cpu")
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"no OpenCL CPU device: {e}")
    buf = SharedBuffer(4096, memory.best_kind())
    view = buf.array((1024,), np.float32)
    view[:] = 1
    clb = cl.Buffer(dev.context, cl.mem_flags.READ_WRITE | cl.mem_flags.USE_HOST_PTR, hostbuf=view)
    prg = cl.Program(dev.context, "__kernel void k(__global float* a){ a[get_global_id(0)] *= 3.0f; }").build()
    prg.k(dev.queue, (1024,), None, clb).wait()
    mapped, _ = cl.enqueue_map_buffer(dev.queue, clb, cl.map_flags.READ, 0, (1024,), np.float32)
    assert mapped.ctypes.data == buf.address  # the kernel worked on our pages
    del mapped
    assert float(view.sum()) == 3 * 1024


def test_openvino_host_tensor_shares_the_buffer() -> None:
    buf = SharedBuffer(4 * 3 * 8 * 8, memory.best_kind())
    import openvino as ov

    t = ov.Tensor(buf.array((1, 3, 8, 8), np.float32), shared_memory=True)
    assert t.data.ctypes.data == buf.address


# -- hardware this machine lacks: check what flowpipe sends to the OS and to OpenVINO -------------------
def test_dma_heap_alloc_sends_the_documented_ioctl__no_dma_heap_here() -> None:
    """Checks the DMA_HEAP_IOCTL_ALLOC request flowpipe sends; does not prove a DMA-BUF heap works."""
    calls = []

    def fake_ioctl(fd, req, arg, mutate):
        calls.append((fd, req, bytes(arg)))
        arg[8:12] = struct.pack("=I", 77)  # the kernel writes the new DMA-BUF fd here

    fd = memory.dma_heap_alloc(8192, ioctl=fake_ioctl, opener=lambda p, f: 5, closer=lambda fd: None)
    assert fd == 77
    (heap_fd, req, arg), = calls
    assert heap_fd == 5 and req == 0xC0184800  # _IOWR('H', 0, struct dma_heap_allocation_data)
    length, out_fd, fd_flags, heap_flags = struct.unpack("=QIIQ", arg)
    assert length == 8192 and out_fd == 0 and fd_flags == os.O_RDWR | os.O_CLOEXEC and heap_flags == 0


def test_dma_buf_cpu_access_brackets_with_sync_ioctls__no_dma_heap_here() -> None:
    """Checks the DMA_BUF_IOCTL_SYNC start/end pair around CPU access (memfd stands in for the fd)."""
    calls = []
    fd = os.memfd_create("fake-dmabuf")
    os.ftruncate(fd, 4096)
    buf = SharedBuffer(4096, "dma-heap", _fd=fd, _ioctl=lambda fd, req, arg: calls.append((req, arg)))
    with buf.cpu_access(write=True):
        buf.array((4,))[:] = 1
    assert [c[0] for c in calls] == [0x40086200, 0x40086200]
    assert [struct.unpack("=Q", c[1])[0] for c in calls] == [0 | 1 | 2, 4 | 1 | 2]  # START|RW, END|RW


def test_remote_property_maps__no_npu_or_gpu_here() -> None:
    """The maps handed to RemoteContext.create_tensor; does not prove an NPU or GPU imports them."""
    buf = SharedBuffer(4096, "memfd")
    assert buf.remote_properties("NPU") == {"MEM_TYPE": "SHARED_BUF", "MEM_HANDLE": hex(buf.handle)}
    assert buf.remote_properties("GPU.0") == {"SHARED_MEM_TYPE": "BUFFER_FROM_HANDLE", "OS_HANDLE": buf.handle}
    with pytest.raises(ValueError, match="no handle"):
        SharedBuffer(4096, "host").remote_properties("NPU")


def test_win32_mapping_calls__no_windows_here() -> None:
    """Checks the CreateFileMappingW/MapViewOfFile/CloseHandle calls; does not prove Windows works."""
    backing = (np.zeros(8192, np.uint8))

    class K32:
        def __init__(self):
            self.calls = []

        def CreateFileMappingW(self, h, sa, prot, hi, lo, name):
            self.calls.append(("CreateFileMappingW", h.value, prot, hi, lo))
            return 0x1234

        def MapViewOfFile(self, h, access, hi, lo, size):
            self.calls.append(("MapViewOfFile", h.value, access, size))
            return backing.ctypes.data

        def UnmapViewOfFile(self, addr):
            self.calls.append(("UnmapViewOfFile", addr.value))

        def CloseHandle(self, h):
            self.calls.append(("CloseHandle", h.value))

    k = K32()
    buf = SharedBuffer(5000, "win32", _kernel32=k)
    assert buf.handle == 0x1234 and buf.size == 8192
    buf.array((4,))[:] = 9
    assert backing[:4].tolist() == [9, 9, 9, 9]
    buf.close()
    names = [c[0] for c in k.calls]
    assert names == ["CreateFileMappingW", "MapViewOfFile", "UnmapViewOfFile", "CloseHandle"]
    assert k.calls[0][2] == 0x04 and (k.calls[0][3], k.calls[0][4]) == (0, 8192)  # PAGE_READWRITE, size
    assert k.calls[1][2] == 0x000F001F  # FILE_MAP_ALL_ACCESS


def test_page_locked_opencl_frames_are_host_views() -> None:
    """ocl-pinned buffers (asked for by a preprocess node on a discrete GPU) work as frame memory; PoCL here."""
    pytest.importorskip("pyopencl")
    from flowpipe.accel import devices

    try:
        dev = devices().opencl.device("cpu")
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"no OpenCL CPU device: {e}")
    pool = BufferPool(640 * 480 * 3, 2, "ocl-pinned", factory=lambda: dev.pinned(640 * 480 * 3))
    lease = pool.acquire()
    img = lease.buffer.array((480, 640, 3))
    img[...] = 9
    assert lease.buffer.kind == "ocl-pinned" and lease.buffer.handle is None
    assert img.ctypes.data == lease.buffer.address and int(lease.buffer.array((4,)).sum()) == 36
    lease.release()
    pool.close()


def test_cpu_write_syncs_only_dma_buf_memory__no_dma_heap_here() -> None:
    """Sources bracket their writes with memory.cpu_write: the sync ioctls for DMA-BUF, nothing for memfd."""
    calls = []
    fd = os.memfd_create("fake-dmabuf")
    os.ftruncate(fd, 4096)
    dma = SharedBuffer(4096, "dma-heap", _fd=fd, _ioctl=lambda fd, req, arg: calls.append(req))
    with memory.cpu_write(dma):
        dma.array((4,))[:] = 1
    with memory.cpu_write(SharedBuffer(4096, "memfd")), memory.cpu_write(None):
        pass
    assert calls == [0x40086200, 0x40086200]


def test_batch_slots_fill_seal_and_return_their_buffer_when_the_last_frame_ends() -> None:
    from flowpipe.memory import BatchSlots

    slots = BatchSlots(BufferPool(4096, 2, "host"), size=3)
    a = [slots.take() for _ in range(3)]  # a full batch: sealed by its third slot
    assert [s.index for s in a] == [0, 1, 2] and len({id(s.batch) for s in a}) == 1
    assert a[0].batch.sealed and a[0].batch.complete(3) and not a[0].batch.complete(2)
    b = slots.take()  # the next frame starts a second buffer
    assert b.index == 0 and b.batch is not a[0].batch
    for s in a:
        s.release()
    assert slots.pool.count - slots.pool.in_use == 1  # the first buffer is back once all three frames ended
    slots.seal(b.batch)  # a partial batch sent on timeout: no more slots from it
    slots.seal(b.batch)
    c = slots.take()
    assert c.batch is not b.batch and c.index == 0
    b.release()
    c.release()
    slots.seal(c.batch)  # sealed with no frame left: back at once, and only once
    assert slots.pool.count - slots.pool.in_use == 2


def test_batch_slots_are_shared_safely_by_several_writers() -> None:
    from flowpipe.memory import BatchSlots

    slots = BatchSlots(BufferPool(4096, 64, "host"), size=4)
    taken: list = []
    held: list = []
    lock = threading.Lock()

    def writer() -> None:
        for _ in range(50):
            s = slots.take()
            with lock:
                held.append(s)  # keep every buffer alive so ids stay unique
                taken.append((id(s.batch), s.index))

    threads = [threading.Thread(target=writer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(taken) == len(set(taken)) == 200  # no slot handed out twice
    per_buffer: dict[int, int] = {}
    for key, _ in taken:
        per_buffer[key] = per_buffer.get(key, 0) + 1
    assert set(per_buffer.values()) == {4}


@pytest.mark.parametrize("node", ["blur", "overlay"])
def test_in_place_drawing_syncs_dma_buf_frames__no_dma_heap_here(node: str) -> None:
    """blur and overlay write the frame in place: on DMA-BUF memory the write is bracketed by the sync
    ioctls (memfd stands in for the DMA-BUF fd; this checks what is sent, not a real heap)."""
    from flowpipe.frame import Detection, Frame, FrameRef
    from flowpipe.memory import Lease
    from flowpipe.testing import run_node

    calls = []
    fd = os.memfd_create("fake-dmabuf")
    os.ftruncate(fd, 64 * 64 * 3)
    buf = SharedBuffer(64 * 64 * 3, "dma-heap", _fd=fd, _ioctl=lambda fd, req, arg: calls.append(req))
    ref = FrameRef("s", 0)
    ref.leases.append(Lease(buf, None))
    img = buf.array((64, 64, 3))
    img[...] = np.arange(64, dtype=np.uint8)[None, :, None]
    frame = Frame("s", 0, 0.0, img, "BGR", ref=ref)
    frame.detections = [Detection((10.0, 10.0, 40.0, 40.0), 0.9, "face")]
    before = img.copy()
    out = run_node(f"type: {node}", [frame])
    assert out.result.ok and len(out.frames) == 1, out.result.error
    assert not np.array_equal(before, img)  # written in place
    assert calls == [0x40086200, 0x40086200]
