"""Resolving memory contracts (``flowpipe.contracts``) for a whole graph, once, before any node opens."""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from ..accel import Devices
from ..contracts import Allocation, InputContract, Offer, Request
from ..errors import NodeError, NoDeviceError
from ..graph import GraphSpec, NodeSpec
from ..memory import BatchSlots
from ..node import PIXELS_ALL, Node, offer_of, request_of

log = logging.getLogger("flowpipe.contracts")
Port = tuple[str, str]  # (node id, port)
T = TypeVar("T")


@dataclass
class Contracts:
    """Every output port's offer and allocation, and what each input sees."""

    offers: dict[Port, Offer] = field(default_factory=dict)
    allocations: dict[Port, Allocation] = field(default_factory=dict)
    inputs: dict[Port, InputContract] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        """Per producer port, what was resolved (for ``--stats``)."""
        out = {}
        for (nid, port), a in self.allocations.items():
            if a.consumers:
                d: dict[str, Any] = {"placement": a.placement, "consumers": a.consumers}
                if a.slots is not None:
                    d["batch_slots"] = a.slots.size
                if a.cl is not None:
                    d["opencl"] = a.cl.name
                if a.why:
                    d["why"] = a.why
                if a.pixels_by:  # some node after it takes fewer pixel formats than all
                    d["pixels"] = f"{'/'.join(sorted(a.pixels or ()))} ({a.pixels_by})"
                out[f"{nid}.{port}"] = d
        return out

    def close(self) -> None:
        for a in self.allocations.values():
            if a.slots is not None:
                a.slots.close()


def resolve(spec: GraphSpec, nodes: dict[str, Node], devices: Devices,
            in_flight: Callable[[str], int]) -> Contracts:
    """Offers forward in graph order, requests backward (consumers first), one allocation per output port."""
    order = spec.topo_order()
    out = Contracts()
    pictures: dict[str, tuple[int, int] | None] = {}  # a shard: what each source of the whole graph says
    given: dict[Port, Offer] = {}  # per input port: the offer its node was given
    for s in order:  # offers flow forward
        node = nodes[s.id]
        inputs = {port: _joined([out.offers[r] for r in refs]) for port, refs in s.inputs.items() if refs}
        if spec.whole is not None and inputs:  # a shard: pictures of the whole graph's sources, so all agree
            picture = _whole_picture(spec.whole, s.id, nodes, devices, pictures)
            inputs = {port: replace(o, picture=picture) for port, o in inputs.items()}
        given.update({(s.id, port): o for port, o in inputs.items()})
        for port in s.contract.outputs:
            src = node.declared.forwards.get(port)
            if src is not None:
                out.offers[(s.id, port)] = inputs.get(src) or Offer(s.id, port)
            else:
                out.offers[(s.id, port)] = _declared(s, offer_of, node, port, inputs, devices)
    requests: dict[Port, Request] = {}  # per input port
    merged: dict[Port, Request] = {}  # per output port
    for s in reversed(order):  # requests flow backward
        node = nodes[s.id]
        outputs: dict[str, Allocation] = {}
        for port in s.contract.outputs:
            consumers = [(v, in_port) for p, v, in_port in spec.consumers(s.id) if p == port]
            req = merged[(s.id, port)] = _merge([requests[c] for c in consumers])
            if port in node.declared.forwards:
                continue  # the producer upstream allocates what this node passes on
            alloc = allocate(out.offers[(s.id, port)], req, devices, in_flight)
            alloc.consumers = [v for v, _ in consumers]
            out.allocations[(s.id, port)] = outputs[port] = alloc
        for port, refs in s.inputs.items():
            fwd = next((o for o, i in node.declared.forwards.items() if i == port), None)
            offer = out.offers[refs[0]]
            requests[(s.id, port)] = merged[(s.id, fwd)] if fwd is not None else \
                _declared(s, request_of, node, port, offer, outputs, devices)
    _pixels(spec, nodes, out)
    for s in order:  # what each input sees: the offer and the allocation of the node that wrote it
        for port, refs in s.inputs.items():
            offer = out.offers[refs[0]]
            alloc = out.allocations.get((offer.producer, offer.port)) or Allocation()
            out.inputs[(s.id, port)] = InputContract(offer, alloc, f"{refs[0][0]}->{s.id}", given[(s.id, port)])
    return out


def _pixels(spec: GraphSpec, nodes: dict[str, Node], out: Contracts) -> None:
    """Per output port: the pixel formats every node downstream of it takes (frames go on from node to
    node with their pixels, so it is all of them, not only the first), and which nodes narrow them."""
    takes: dict[str, tuple[frozenset[str], dict[str, frozenset[str]]]] = {}
    for s in reversed(spec.topo_order()):
        mine = nodes[s.id].declared.pixels if s.inputs else PIXELS_ALL
        after, narrow = PIXELS_ALL, {} if mine == PIXELS_ALL else {f"{s.id} ({s.type})": mine}
        for port in s.contract.outputs:
            below, by = PIXELS_ALL, {}
            for p, v, _ in spec.consumers(s.id):
                if p == port:
                    below &= takes[v][0]
                    by.update(takes[v][1])
            alloc = out.allocations.get((s.id, port))
            if alloc is not None:
                alloc.pixels, alloc.pixels_by = below, ", ".join(f"{k}: {'/'.join(sorted(f))}"
                                                                  for k, f in sorted(by.items()))
            after &= below
            narrow.update(by)
        takes[s.id] = (mine & after, narrow)


def _joined(offers: list[Offer]) -> Offer:
    """What an input fed by several producers sees: the first one's offer, with the largest picture of all
    (unknown if any of them does not say)."""
    first = offers[0]
    return first if len(offers) == 1 else replace(first, picture=_largest([o.picture for o in offers]))


def _largest(sizes: list[tuple[int, int] | None]) -> tuple[int, int] | None:
    """The largest width and height among ``sizes``; None when there are none or one is not known."""
    if not sizes or any(p is None for p in sizes):
        return None
    return max(p[0] for p in sizes if p), max(p[1] for p in sizes if p)


def _whole_picture(whole: GraphSpec, node_id: str, nodes: dict[str, Node], devices: Devices,
                   known: dict[str, tuple[int, int] | None]) -> tuple[int, int] | None:
    """The largest picture the sources of the whole graph upstream of ``node_id`` say (None if any does
    not): what the node would see in one process, whichever shard it runs in. ``known`` keeps what each
    source said (a file is probed once)."""
    import networkx as nx

    up = nx.ancestors(whole.dag, node_id)
    sizes = []
    for src in whole.sources():
        if src.id not in up:
            continue
        if src.id not in known:
            node = nodes.get(src.id) or src.make()
            known[src.id] = _declared(src, offer_of, node, next(iter(src.contract.outputs)), {}, devices).picture
        sizes.append(known[src.id])
    return _largest(sizes)


def _declared(s: NodeSpec, declare: Callable[..., T], *args: Any) -> T:
    try:
        return declare(*args)
    except NoDeviceError as e:  # what the node asks for is not on this host: said as such, not as a contract's
        raise NodeError(s.id, s.type, f"device: {e}") from e
    except Exception as e:
        raise NodeError(s.id, s.type, f"memory contract: {type(e).__name__}: {e}") from e


def _merge(reqs: list[Request]) -> Request:
    """One request for a port several consumers read: theirs where they agree, host memory where not."""
    asked = [r for r in reqs if r.placement != "any"]
    if not asked:
        batches = {r.batch for r in reqs}
        return Request("any", batch=batches.pop() if len(batches) == 1 else 1)
    first = asked[0]
    if all((r.placement, r.device, r.cl, r.batch) == (first.placement, first.device, first.cl, first.batch)
           for r in asked):
        return first
    by = ", ".join(f"{r.by}: {r.placement}" for r in asked)
    log.info("consumers ask for different memory (%s): host memory for all", by)
    return Request("host", by=by)


def allocate(offer: Offer, req: Request, devices: Devices, in_flight: Callable[[str], int]) -> Allocation:
    placement = req.placement if req.placement != "any" else "host"
    why = ""
    cl = req.cl
    if placement == "opencl":
        if "opencl" not in offer.writes:
            placement, why = "host", f"'{offer.producer}' cannot write OpenCL device memory"
        else:
            dev = req.device or "GPU"
            ov_ctx = devices.openvino.remote_context(dev)
            cl = devices.opencl.adopt(ov_ctx, dev) if ov_ctx is not None else None
            if cl is None:
                placement, why = "host", f"{dev} has no OpenCL context to share"
    make = None
    if placement == "backend":  # memory the consumer's backend makes (its device declares ``own``)
        make, why = devices.backends.allocator(req.device or "")
        if make is None:
            placement = "host"
    alloc = Allocation(placement, req.device, cl, make=make, why=why)
    if req.batch > 1 and offer.tensor is not None and offer.model_preprocessing is None:
        nbytes = offer.tensor.nbytes * req.batch
        count = -(-min(in_flight(req.by), 64) // req.batch) + 2
        alloc.slots = BatchSlots(alloc.pool(nbytes, count), req.batch)
    return alloc
