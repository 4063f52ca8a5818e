"""MQTT: per-frame records published to a broker (``mqtt``), each stream's messages kept in an outbox file
until the broker has them."""
from __future__ import annotations

import errno
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from pydantic import Field

from flowpipe.errors import OutputLostError
from flowpipe.frame import Frame
from flowpipe.node import NodeConfig, NodeContract, Resource, RunContext, Sink
from flowpipe.registry import register

from .records import append_whole, frame_record

log = logging.getLogger("flowpipe.metadata")


@register("mqtt")
class Mqtt(Sink):
    """Publishes per-frame records to an MQTT broker (paho-mqtt), reconnecting with backoff.

    An empty ``host`` names no broker: the node publishes nothing and says so once in the log (a graph whose
    broker is a parameter runs without one). Messages published while the broker is away are queued by the
    client (bounded) and sent on reconnect; ``max_queued`` beyond that are dropped and counted. With
    ``outbox`` (a folder), each stream's messages are also kept in a file there until the broker has them
    (QoS 1 and 2: acknowledged; QoS 0: sent): what an outage longer than the run, a full queue or a killed
    process left undelivered is sent first the next time the stream runs, in order (at least once: a message
    may arrive twice; ``stream`` and ``frame`` tell). At QoS 1 or 2, messages that neither reached the broker
    by the end of the run nor are kept in an outbox are lost: the run ends in exit 1, saying how many (QoS 0,
    at most once, says so in the log alone).

    YAML:
        - id: mqtt
          type: mqtt
          config: {host: 127.0.0.1, port: 1883, topic: "flowpipe/{stream}/faces"}
          inputs: {detections: track.detections}
    """

    inputs = {"detections": "detections"}

    class Config(NodeConfig):
        host: str = Field("127.0.0.1", description="the broker's address; empty: no broker, nothing is published")
        port: int = Field(1883, ge=1, le=65535, description="the broker's port")
        topic: str = Field("flowpipe/{stream}", description="'{stream}' is replaced by the stream id")
        qos: int = Field(1, ge=0, le=2, description="MQTT's quality of service: 0 at most once, 1 at least once, 2 "
                         "exactly once")
        payload: str = Field("record", pattern="^(record|count)$", description="record: the frame's record, as "
                             "jsonl writes it; count: its stream, frame, pts and count of objects")
        client_id: str = Field("", description="the client's id at the broker (empty: one made up)")
        username: str | None = Field(None, description="the broker's login (none: anonymous)")
        password: str | None = Field(None, description="with username")
        connect_timeout_s: float = Field(5.0, gt=0, description="how long the start waits for the broker, and the "
                                         "end for the broker's acknowledgements")
        require_connection: bool = Field(True, description="fail at start if the broker is unreachable")
        max_queued: int = Field(10000, ge=1, le=65535, description="messages the client holds while the broker "
                                "is away (at most as many as MQTT's message ids)")
        min_backoff_s: float = Field(0.5, gt=0, description="the first wait before reconnecting, doubled at each "
                                     "failed try up to max_backoff_s (whole seconds, 1 at least)")
        max_backoff_s: float = Field(30.0, gt=0, description="the longest wait between tries to reconnect")
        outbox: str | None = Field(None, description="a folder keeping each stream's messages until the broker "
                                   "has them (a file per node and stream): left ones are sent the next time the "
                                   "stream runs")

    config: Config

    @classmethod
    def contract(cls, config: NodeConfig) -> NodeContract:
        assert isinstance(config, cls.Config)
        if not config.host:
            return cls.declare(resources=(Resource("publishes nothing: no MQTT broker named (host is empty)"),))
        said = [Resource(f"connects to mqtt://{config.host}:{config.port}")]
        return cls.declare(files={"outbox": "state"},
                           resources=(*said, *([Resource(f"writes {config.outbox}")] if config.outbox else [])))

    def open(self, ctx: RunContext) -> None:
        c = self.config
        self.stats = ctx.stats
        self.off = not c.host
        if self.off:
            log.info("node '%s': no MQTT broker named (host is empty): nothing is published", self.id)
            return
        import paho.mqtt.client as mqtt

        self.connected = threading.Event()
        self.answered = threading.Event()  # the first try to connect failed at once (refused, no such host)
        self.published = 0
        self.dropped = 0
        self.reconnects = -1
        self.pending: set[int] = set()  # mids the broker has not acknowledged (QoS 0: not yet sent)
        self._early: set[int] = set()  # acks that arrived before publish() returned the mid
        self._plock = threading.Lock()
        self.outboxes: dict[str, Outbox] = {}  # per stream, with ``outbox``
        self._kept: dict[int, tuple[Outbox, int]] = {}  # mid -> the outbox entry it delivers
        self.resent = self.outbox_left = self.not_kept = 0
        self.closing = False  # its own disconnect at the end is no loss
        cl = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=c.client_id)
        if c.username:
            cl.username_pw_set(c.username, c.password)
        cl.max_queued_messages_set(c.max_queued)
        cl.reconnect_delay_set(int(max(1, c.min_backoff_s)), int(max(1, c.max_backoff_s)))
        cl.on_connect = self._on_connect
        cl.on_connect_fail = lambda client, userdata: self.answered.set()  # refused: no need to wait it out
        cl.on_disconnect = self._on_disconnect
        cl.on_publish = self._on_publish
        self.client = cl
        try:
            cl.connect_async(c.host, c.port, keepalive=15)
        except OSError as e:
            raise RuntimeError(f"MQTT broker {c.host}:{c.port}: {e}") from e
        cl.loop_start()
        deadline = time.monotonic() + c.connect_timeout_s
        # a broker that must be there gets the whole timeout (it may be starting); one that need not be, once
        # it refused, is retried in the background at once (the graph does not wait 5 s for it)
        while not self.connected.is_set() and time.monotonic() < deadline and not (
                self.answered.is_set() and not c.require_connection):
            self.connected.wait(0.05)
        if not self.connected.is_set():
            if c.require_connection:
                cl.loop_stop()
                raise RuntimeError(f"MQTT broker {c.host}:{c.port} not reachable within {c.connect_timeout_s}s")
            log.warning("node '%s': MQTT broker %s:%d not reachable yet; retrying in the background",
                        self.id, c.host, c.port)

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any, props: Any = None) -> None:
        if getattr(reason, "is_failure", False):
            log.warning("node '%s': MQTT connect refused: %s", self.id, reason)
            return
        self.reconnects += 1
        self.connected.set()
        if self.reconnects > 0:
            log.warning("node '%s': MQTT broker %s:%d connected again (reconnect %d)", self.id, self.config.host,
                        self.config.port, self.reconnects)

    def _on_publish(self, client: Any, userdata: Any, mid: int, reason: Any = None, props: Any = None) -> None:
        with self._plock:
            if mid in self.pending:
                self.pending.discard(mid)
                kept = self._kept.pop(mid, None)
            else:
                self._early.add(mid)
                kept = None
        if kept is not None:
            kept[0].delivered(kept[1])

    def _on_disconnect(self, client: Any, userdata: Any, flags: Any, reason: Any, props: Any = None) -> None:
        self.connected.clear()
        if not self.closing:
            log.warning("node '%s': MQTT disconnected (%s); reconnecting", self.id, reason)

    def write(self, frame: Frame) -> None:
        if self.off:
            return
        c = self.config
        rec = frame_record(frame)
        payload = json.dumps(rec if c.payload == "record" else
                             {"stream": rec["stream"], "frame": rec["frame"], "pts": rec["pts"], "count": rec["count"]})
        topic = c.topic.replace("{stream}", frame.stream)
        box = None
        if c.outbox is not None:
            box = self.outboxes.get(frame.stream)
            if box is None:  # the stream's first frame here: what an earlier run left goes first
                box = self.outboxes[frame.stream] = Outbox(Path(c.outbox) / f"{self.id}.{frame.stream}.jsonl")
                for seq, (t, p, q) in box.left():
                    self.resent += self._publish(t, p, q, box, seq)
        self._publish(topic, payload, c.qos, box, box.keep(topic, payload, c.qos) if box is not None else -1)

    def _publish(self, topic: str, payload: str, qos: int, box: Outbox | None, seq: int) -> bool:
        """Hands one message to the client; False where it could not take it (counted as dropped; in the
        outbox, if there is one, it waits for the stream's next run)."""
        import paho.mqtt.client as mqtt

        info = self.client.publish(topic, payload, qos=qos)
        # QoS 1 and 2 are queued while the broker is away and sent on reconnect; QoS 0 is not sent then
        if info.rc == mqtt.MQTT_ERR_QUEUE_SIZE or (qos == 0 and info.rc != mqtt.MQTT_ERR_SUCCESS):
            self.dropped += 1
            return False
        self.published += 1
        with self._plock:
            acked = info.mid in self._early  # acknowledged (QoS 0: sent) before publish() returned
            if acked:
                self._early.discard(info.mid)
            else:
                self.pending.add(info.mid)
                if box is not None:  # (an id used again: the message it was, never acknowledged, stays kept)
                    self._kept[info.mid] = (box, seq)
        if box is not None and acked:
            box.delivered(seq)
        return True

    def end_stream(self, stream: str) -> None:
        if self.off:
            return
        box = self.outboxes.pop(stream, None)
        if box is None:
            return
        deadline = time.monotonic() + self.config.connect_timeout_s  # its messages on their way: their acks
        while time.monotonic() < deadline:
            with self._plock:
                if not any(b is box for b, _ in self._kept.values()):
                    break
            time.sleep(0.01)
        self.outbox_left += box.close()  # what it holds undelivered waits for the stream's next run
        self.not_kept += box.not_kept

    def close(self) -> None:
        if self.off:
            return
        # deliver what is queued (bounded): acknowledged QoS>0 messages, flushed QoS 0 ones
        deadline = time.monotonic() + self.config.connect_timeout_s
        while self.pending and time.monotonic() < deadline:
            time.sleep(0.01)
        while self.connected.is_set() and self.client.want_write() and time.monotonic() < deadline:
            time.sleep(0.01)
        unacked = len(self.pending)
        self.closing = True
        self.client.disconnect()
        self.client.loop_stop()
        self.stats.update(published=self.published, queue_dropped=self.dropped, unacknowledged=unacked,
                          reconnects=max(0, self.reconnects))
        if self.config.outbox is not None:
            self.outbox_left += sum(box.close() for box in self.outboxes.values())
            self.not_kept += sum(box.not_kept for box in self.outboxes.values())
            self.stats.update(outbox_resent=self.resent, outbox_left=self.outbox_left,
                              outbox_not_kept=self.not_kept)
        where = f"the broker {self.config.host}:{self.config.port}"
        if self.config.outbox is not None:
            if unacked:
                log.warning("node '%s': %d MQTT messages were not acknowledged by %s; the outbox keeps %d for the "
                            "streams' next run", self.id, unacked, where, self.outbox_left)
            return
        lost = [f"{unacked} not acknowledged by {where}"] if unacked else []
        if self.dropped:  # QoS 0 is not sent while the broker is away; QoS 1 and 2 wait in a bounded queue
            lost.append(f"{self.dropped} not sent while the broker was away" if self.config.qos == 0 else
                        f"{self.dropped} dropped from a full queue (max_queued)")
        if not lost:
            return
        said = f"MQTT messages lost: {', '.join(lost)} (an outbox: folder keeps such messages for the next run)"
        if self.config.qos == 0:  # at most once: what the graph asked for
            log.warning("node '%s': %s", self.id, said)
            return
        raise OutputLostError(said)  # the records did not all reach the broker, and nothing keeps them


class Outbox:
    """One stream's MQTT messages until the broker has them, in an append-only file of JSON lines: ``{"m":
    seq, "t": topic, "p": payload, "q": qos}`` for a message, ``{"a": seq}`` once it was delivered. Each line
    is one write (a killed process leaves whole lines, or a last one cut, skipped on reading). At its next
    start the messages never delivered are written to a new file first (synced, then put in the old one's
    place) and sent again; past ``COMPACT`` lines the file is written again with the undelivered ones alone.
    One process holds the file at a time (an exclusive lock, gone with the process): another is refused."""

    COMPACT = 10_000

    def __init__(self, path: Path):
        self.path = path
        self.lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)
        self.closed = False
        self.not_kept = 0  # lines a full disk did not take
        while True:
            self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                _hold(self.fd)
            except OSError:
                os.close(self.fd)
                raise RuntimeError(f"MQTT outbox {path} is held by another run (the stream runs twice?)") \
                    from None
            if os.fstat(self.fd).st_ino == os.stat(path).st_ino:
                break
            os.close(self.fd)  # the file was written again and replaced while it was being opened: again
        left: dict[int, tuple[str, str, int]] = {}
        for line in path.read_bytes().splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue  # a line cut by a kill
            if "m" in r:
                left[r["m"]] = (r["t"], r["p"], r["q"])
            elif "a" in r:
                left.pop(r["a"], None)
        self.open: dict[int, tuple[str, str, int]] = dict(enumerate(left.values()))  # kept, not yet delivered
        self._left = list(self.open.items())
        self.seq = len(self.open)
        self._rewrite()

    def _rewrite(self) -> None:
        """The file holds the undelivered messages alone (a new file synced, then renamed over it)."""
        part = self.path.with_name(self.path.name + ".part")
        with open(part, "w") as f:
            for seq, message in self.open.items():
                f.write(_kept_line(seq, *message))
            f.flush()
            os.fsync(f.fileno())
        fd = os.open(part, os.O_RDWR | os.O_APPEND)
        _hold(fd)  # a new file: nobody else holds it
        os.replace(part, self.path)
        os.close(self.fd)
        self.fd, self.lines = fd, len(self.open)

    def left(self) -> list[tuple[int, tuple[str, str, int]]]:
        """What an earlier run left undelivered, in order, with its number here (to send first)."""
        out, self._left = self._left, []
        return out

    def keep(self, topic: str, payload: str, qos: int) -> int:
        with self.lock:
            if self.closed:  # a late frame of a stream just removed: sent, not kept
                return -1
            seq, self.seq = self.seq, self.seq + 1
            if not self._write(_kept_line(seq, topic, payload, qos)):
                return -1  # a full disk: sent, not kept
            self.open[seq] = (topic, payload, qos)
            return seq

    def delivered(self, seq: int) -> None:
        with self.lock:
            if self.closed or self.open.pop(seq, None) is None:
                return  # (closed: the stream's next run sends it again)
            if self.lines >= self.COMPACT and len(self.open) * 4 <= self.lines and not self.not_kept:
                self._rewrite()
            else:  # (not written on a full disk: the stream's next run sends it once more)
                self._write(json.dumps({"a": seq}) + "\n")

    def _write(self, line: str) -> bool:
        """One whole line appended, or none of it (False) where the disk is full: a message not kept is sent
        all the same (counted, ``outbox_not_kept``, and said once); writing goes on when the disk takes it."""
        try:
            append_whole(self.fd, line.encode())
        except OSError as e:
            if e.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            self.not_kept += 1
            if self.not_kept == 1:
                log.error("MQTT outbox %s: %s: messages are sent without being kept while it lasts", self.path,
                          os.strerror(e.errno))
            return False
        self.lines += 1
        return True

    def close(self) -> int:
        """Closes the file (its lock goes with it); the messages left in it undelivered."""
        with self.lock:
            if not self.closed:
                self.closed = True
                os.close(self.fd)
            return len(self.open)


def _kept_line(seq: int, topic: str, payload: str, qos: int) -> str:
    """An outbox's line for a message kept (read back in ``Outbox.__init__``)."""
    return json.dumps({"m": seq, "t": topic, "p": payload, "q": qos}) + "\n"


def _hold(fd: int) -> None:
    """An exclusive lock on the open file ``fd`` (OSError: another process holds it); none where the system
    has no ``flock``."""
    try:
        import fcntl
    except ImportError:
        return
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
