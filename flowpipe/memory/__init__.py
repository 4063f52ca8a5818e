"""Frame memory: shared buffers (``buffers``), pools, leases and batch slots (``pools``), and the per-run
copy ledger (``ledger``). Nothing here imports OpenCL or OpenVINO; device memory comes from
``flowpipe.accel``."""
from __future__ import annotations

from .buffers import (
                      DMA_BUF_IOCTL_SYNC,
                      DMA_HEAP_IOCTL_ALLOC,
                      DMA_HEAP_PATH,
                      KINDS,
                      PAGE,
                      SharedBuffer,
                      available_kinds,
                      best_kind,
                      cpu_write,
                      dma_buf_sync,
                      dma_heap_alloc,
                      leading,
                      packed,
                      page_round,
)
from .ledger import CopyLedger, EdgeMemory, copy, record
from .pools import BatchSlots, BufferPool, Lease, SharedLease, Slot

__all__ = ["DMA_BUF_IOCTL_SYNC", "DMA_HEAP_IOCTL_ALLOC", "DMA_HEAP_PATH", "KINDS", "PAGE", "BatchSlots",
           "BufferPool", "CopyLedger", "EdgeMemory", "Lease", "SharedBuffer", "SharedLease", "Slot",
           "available_kinds", "best_kind", "copy", "cpu_write", "dma_buf_sync", "dma_heap_alloc", "leading",
           "packed", "page_round", "record"]
