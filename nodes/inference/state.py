"""Stateful models (recurrent, with ``ReadValue``/``Assign``): one state per stream over one infer request."""
from __future__ import annotations

from typing import Any

from flowpipe.frame import Frame


class StreamStates:
    """The state of a stateful model kept per stream: saved when another stream's frame comes, restored
    when the stream returns (with ``reset_state: per_stream``), reset at its first frame or on demand
    (``frame.meta['reset_state']``)."""

    def __init__(self, reset: str = "per_stream"):
        self.reset = reset
        self._last_stream: str | None = None
        self._states: dict[str, list[Any]] = {}

    def switch(self, req: Any, frame: Frame) -> None:
        """Before ``frame`` runs on ``req``: the state of ``frame``'s stream in the request."""
        import openvino as ov

        if frame.stream != self._last_stream:
            if self._last_stream is not None and self.reset == "per_stream":
                self._states[self._last_stream] = [st.state.data.copy() for st in req.query_state()]
            saved = self._states.pop(frame.stream, None)
            if saved is not None and frame.index != 0:
                for st, value in zip(req.query_state(), saved):
                    st.state = ov.Tensor(value)
            elif self._last_stream is not None or frame.index == 0:
                req.reset_state()
        elif frame.index == 0 or frame.meta.get("reset_state"):
            req.reset_state()
        self._last_stream = frame.stream
