"""Channels between stages: bounded FIFOs with batch get, a router that keeps a stream on one worker, and
the inbox of a stage that runs in its producer's thread.

A channel's protocol is ``put`` / ``get_batch`` / ``wake`` / ``close``: the seam where a transport between
processes or hosts plugs in.
"""
from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

#: End of stream: one per input edge; a node ends when it has seen one from each.
EOS = object()


class Channel:
    """A bounded FIFO with batch get: under load a consumer wakes once for many items.

    ``overflow`` decides what a full channel does: ``block`` the producer (backpressure, nothing lost),
    or drop (``drop_oldest`` for live sources: the freshest frame wins; ``drop_newest``). Every drop
    goes to ``on_drop`` so the frame is accounted for.
    """

    def __init__(self, capacity: int, overflow: str = "block", on_drop: Callable[[Any], None] | None = None):
        self.capacity = capacity
        self.overflow = overflow
        self.on_drop = on_drop
        self.dropped = 0
        self._items: deque = deque()
        self._cond = threading.Condition(threading.Lock())
        self.closed = False
        self.high_water = 0
        self._woken = False

    def put(self, item: Any, force: bool = False) -> bool:
        victim = None
        with self._cond:
            if not force and len(self._items) >= self.capacity and self.overflow != "block" and not self.closed:
                self.dropped += 1
                if self.overflow == "drop_newest":
                    victim = item
                else:
                    idx = next((i for i, x in enumerate(self._items) if x is not EOS), None)
                    if idx is None:
                        victim = item
                    else:
                        victim = self._items[idx]
                        del self._items[idx]
                        self._items.append(item)
                        self._cond.notify_all()
            else:
                while not force and len(self._items) >= self.capacity and not self.closed:
                    self._cond.wait()
                if self.closed:
                    return False
                self._items.append(item)
            if len(self._items) > self.high_water:
                self.high_water = len(self._items)
            self._cond.notify_all()
        if victim is not None and self.on_drop is not None:
            self.on_drop(victim)
        return True

    def wake(self) -> None:
        """Wake the consumer with no item (an async completion is ready to collect)."""
        with self._cond:
            self._woken = True
            self._cond.notify_all()

    def get_batch(self) -> list[Any] | None:
        """All queued items; [] when woken without items; None when closed and empty."""
        with self._cond:
            while not self._items and not self.closed and not self._woken:
                self._cond.wait()
            self._woken = False
            if not self._items:
                return None if self.closed else []
            items = list(self._items)
            self._items.clear()
            self._cond.notify_all()
            return items

    def close(self) -> list[Any]:
        with self._cond:
            self.closed = True
            left = list(self._items)
            self._items.clear()
            self._cond.notify_all()
            return left


class StreamRouter:
    """A node's input spread over several worker channels by stream: a stream always meets the same
    worker (first seen, round robin), so per-stream order and per-stream state hold without reordering."""

    def __init__(self, channels: list[Channel]):
        self.channels = channels
        self._assign: dict[str, Channel] = {}
        self._lock = threading.Lock()

    def put(self, item: Any, force: bool = False) -> bool:
        if item is EOS:
            for c in self.channels:
                c.put(EOS, force=True)
            return True
        stream = item[1].stream
        ch = self._assign.get(stream)
        if ch is None:
            with self._lock:
                ch = self._assign.setdefault(stream, self.channels[len(self._assign) % len(self.channels)])
        return ch.put(item, force)

    def forget(self, stream: str) -> None:
        """A stream removed from the running graph: its worker is free for the next one."""
        with self._lock:
            self._assign.pop(stream, None)

    @property
    def high_water(self) -> int:
        return max(ch.high_water for ch in self.channels)

    def wake(self) -> None:
        for ch in self.channels:
            ch.wake()

    def close(self) -> list[Any]:
        return [item for ch in self.channels for item in ch.close()]


class Inline:
    """The inbox of a stage that runs in its producer's thread (as GStreamer's elements run in the streaming
    thread up to the next queue): ``put`` processes the item there and then, so a frame goes down a chain
    of cheap stages without a queue, a wake-up or a thread switch per stage. A lock keeps the stage to one
    frame at a time when more than one thread feeds it (a stream added to the running graph)."""

    high_water = 0  # never queues

    def __init__(self, handle: Callable[[Any], None]):
        self._handle: Callable[[Any], None] | None = handle
        self._lock = threading.Lock()

    def put(self, item: Any, force: bool = False) -> bool:
        handle = self._handle
        if handle is None:  # the run aborted or ended: the producer counts the frame as failed
            return False
        with self._lock:
            handle(item)
        return True

    def wake(self) -> None:
        """Nothing to wake: the stage holds no frames (a stage that does has a thread of its own)."""

    def close(self) -> list[Any]:
        self._handle = None  # it holds the run: let the run go when it ends
        return []
