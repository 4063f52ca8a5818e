"""The REST API and web console of ``flowpipe serve`` (FastAPI).

Paths in the shape of DL Streamer Pipeline Server's: ``/pipelines`` lists templates, ``POST
/pipelines/{name}`` starts an instance, ``/pipelines/status`` and ``/pipelines/{id}/status`` report,
``DELETE /pipelines/{id}`` stops; streams of a running instance under ``/pipelines/{id}/streams``; every
instance's events, kept across restarts, at ``/events``. Every error is a 4xx with one line of JSON
(``{"error": "..."}``); the service stays up. The schema is at ``/openapi.json``, the console at ``/``.
"""
from __future__ import annotations

import hmac
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..cluster.agent import FilePart, Span
from .events import event_key, inside, when
from .instances import Instances, RequestError

MAX_BODY = 64 * 1024  # bytes: a request is a few names and URIs
NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class StreamRequest(BaseModel):
    """A stream to add: its id, its URI, and settings of its source node (e.g. reconnect_attempts)."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(pattern=NAME, description="the stream's name (letters, digits, _ . -)")
    uri: str = Field(min_length=1, max_length=2048, description="rtsp://, http(s)://, 'sample', or a file in the "
                                                               "media folder")
    like: str | None = Field(None, pattern=NAME, description="the source node it copies (default: the only one)")
    options: dict[str, Any] = Field(default_factory=dict, description="source settings over the template's")


class StartRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    parameters: dict[str, Any] = Field(default_factory=dict, description="the template's params")
    streams: list[StreamRequest] = Field(default_factory=list, max_length=256,
                                         description="streams to start with (the graph's own source is then "
                                                     "their pattern, not run)")
    processes: int = Field(1, ge=1, le=64, description="worker processes the streams are spread over")


class RetuneRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    parameters: dict[str, Any] = Field(min_length=1, description="the template's params to change while it runs "
                                                                 "(zones, lines, rules, thresholds)")
    stream: str | None = Field(None, description="one camera's own values (zones and lines); the others keep theirs")


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message.splitlines()[0] if message else "error"}, status_code=status)


def create_app(instances: Instances, token: str | None = None) -> FastAPI:
    """The service over ``instances``; with ``token``, every request but the console page needs
    ``Authorization: Bearer TOKEN``."""
    app = FastAPI(title="flowpipe", description="Video-analytics graphs: templates, instances, streams.")

    @app.middleware("http")
    async def limit_body(request: Request, call_next: Any) -> Any:
        size = request.headers.get("content-length")
        if size is not None and (not size.isdigit() or int(size) > MAX_BODY):
            return _error(413, f"request body over {MAX_BODY} bytes")
        if request.method in ("POST", "PUT", "PATCH"):
            body = await request.body()
            if len(body) > MAX_BODY:
                return _error(413, f"request body over {MAX_BODY} bytes")
            if body.strip():  # whatever its content type says: the API reads JSON alone
                try:
                    json.loads(body)
                except ValueError as e:
                    return _error(400, f"malformed JSON: {getattr(e, 'msg', e)}; expected a JSON object")
        return await call_next(request)

    @app.exception_handler(RequestError)
    async def bad_request(_: Request, e: RequestError) -> JSONResponse:
        return _error(e.status, str(e))

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, e: RequestValidationError) -> JSONResponse:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err.get("loc", ()) if x != "body")
        if err.get("type") == "json_invalid":
            return _error(400, f"malformed JSON: {err.get('ctx', {}).get('error', err['msg'])}")
        if err.get("type") == "missing" and tuple(err.get("loc", ())) == ("body",):
            return _error(400, "no request body; expected a JSON object")
        if not where and tuple(err.get("loc", ())) == ("body",):
            return _error(422, f"request body: {err['msg']}; expected a JSON object")
        return _error(422, f"{where}: {err['msg']}" if where else str(err["msg"]))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, e: StarletteHTTPException) -> JSONResponse:
        return _error(e.status_code, str(e.detail))

    async def authorized(request: Request) -> None:
        if token is None:
            return
        got = request.headers.get("authorization", "")
        if not hmac.compare_digest(got.encode(), f"Bearer {token}".encode()):
            raise RequestError("missing or wrong bearer token", 401)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def console() -> str:
        return (Path(__file__).with_name("console.html")).read_text(encoding="utf-8")

    app.include_router(_routes(instances), dependencies=[Depends(authorized)])
    return app


def _routes(instances: Instances) -> APIRouter:
    """The API's paths over ``instances`` (each behind the service's token, where it has one), in the order
    they are matched: templates and instances, what changes while an instance runs, what it shows."""
    api = APIRouter()
    for paths in (_instance_routes, _running_routes, _view_routes):
        paths(api, instances)
    return api


def _instance_routes(api: APIRouter, instances: Instances) -> None:
    """Templates, and instances started, listed and stopped."""

    @api.get("/pipelines", summary="graph templates")
    def templates() -> list[dict[str, Any]]:
        instances.reload()
        return [t.describe() for t in instances.templates.values()]

    @api.get("/pipelines/status", summary="every instance")
    async def all_status() -> list[dict[str, Any]]:
        return [i.status() for i in list(instances.instances.values())]

    @api.get("/pipelines/{name}", summary="one template")
    def template(name: str) -> dict[str, Any]:
        t = instances.templates.get(name)
        if t is None:
            raise RequestError(f"no pipeline template {name!r}", 404)
        return t.describe()

    @api.post("/pipelines/{name}", status_code=201, summary="start an instance of a template")
    def start(name: str, req: StartRequest) -> dict[str, Any]:
        inst = instances.start(name, req.parameters, [s.model_dump() for s in req.streams], req.processes)
        return {"id": inst.id, "status": inst.status()}

    @api.get("/pipelines/{iid}/status", summary="one instance")
    async def status(iid: str) -> dict[str, Any]:
        return instances.get(iid).status()

    @api.delete("/pipelines/{iid}", summary="stop an instance (its streams drain)")
    def stop(iid: str) -> dict[str, Any]:
        return instances.stop(instances.get(iid))


def _running_routes(api: APIRouter, instances: Instances) -> None:
    """A running instance's streams and parameters: listed, added, removed, changed."""

    @api.get("/pipelines/{iid}/streams", summary="the streams of an instance")
    async def streams(iid: str) -> list[dict[str, Any]]:
        return instances.get(iid).status()["streams"]  # type: ignore[no-any-return]

    @api.get("/pipelines/{iid}/parameters", summary="an instance's parameters, and which can change as it runs")
    def parameters(iid: str, stream: str | None = None) -> list[dict[str, Any]]:
        return instances.parameters(instances.get(iid), stream)

    @api.patch("/pipelines/{iid}/parameters", summary="change parameters while it runs (from the next frame)")
    def retune(iid: str, req: RetuneRequest) -> list[dict[str, Any]]:
        return instances.retune(instances.get(iid), req.parameters, req.stream)

    @api.post("/pipelines/{iid}/streams", status_code=201, summary="add a stream")
    def add_stream(iid: str, req: StreamRequest) -> dict[str, Any]:
        return instances.add_stream(instances.get(iid), req.model_dump())

    @api.delete("/pipelines/{iid}/streams/{sid}",
                summary="remove a stream (its frames drain, its files close)")
    def remove_stream(iid: str, sid: str) -> dict[str, Any]:
        return instances.remove_stream(instances.get(iid), sid)


def _view_routes(api: APIRouter, instances: Instances) -> None:
    """What the console shows of an instance: a stream's picture and live view, the events and their files."""

    def _stream_of(iid: str, sid: str) -> Any:
        """The instance ``iid``, for its stream ``sid`` (a name the API takes, else 404)."""
        inst = instances.get(iid)
        if not re.match(NAME, sid):
            raise RequestError(f"no stream {sid!r}", 404)
        return inst

    @api.get("/pipelines/{iid}/streams/{sid}/preview.jpg", summary="the stream's newest picture",
             response_class=Response, responses={200: {"content": {"image/jpeg": {}}}})
    def preview(iid: str, sid: str) -> Response:
        inst = _stream_of(iid, sid)
        jpeg = inst.runner.live.picture(sid)
        if jpeg is None:
            known = {s["stream"] for s in inst.streams()}
            raise RequestError(f"no picture of stream {sid!r} yet" if sid in known else
                               f"instance {iid} has no stream {sid!r}; streams: {', '.join(sorted(known)) or 'none'}",
                               404)
        return Response(jpeg, media_type="image/jpeg", headers={"Cache-Control": "no-store"})

    @api.get("/pipelines/{iid}/events", summary="the newest events of an instance's analytics, newest first: "
             "those it holds now and those the event index keeps (an earlier run's, before a restart)")
    def events(iid: str, limit: int = 50) -> list[dict[str, Any]]:
        folder = instances.folder_of(iid)  # running, or one whose events the index keeps
        inst = instances.instances.get(iid)
        n = max(1, min(limit, 1000))
        got: dict[tuple[Any, ...], dict[str, Any]] = {}
        for e in instances.events.find(n, instance=iid):  # (files named inside the folder)
            for k in ("instance", "pipeline"):
                e.pop(k, None)
            got[event_key(e)] = e
        for e in inst.events() if inst is not None else []:  # as it stands now: a clip named since
            e = dict(e, **{k: inside(folder, e[k]) for k in ("snapshot", "clip") if isinstance(e.get(k), str)})
            got[event_key(e)] = e
        out = sorted(got.values(), key=lambda e: float(e.get("at") or 0.0), reverse=True)[:n]
        for e in out:
            for key in ("snapshot", "clip"):
                if isinstance(e.get(key), str):
                    e[key] = _file_url(iid, e[key], e.get("host"))
        return out

    @api.get("/events", summary="every instance's events, kept across restarts, newest first")
    def history(instance: str | None = None, stream: str | None = None, kind: str | None = None,
                rule: str | None = None,
                after: str | None = Query(None, description="raised after: seconds since the epoch, or ISO 8601 "
                                                            "(UTC where it names no offset)"),
                before: str | None = Query(None, description="raised before (as after)"),
                limit: int = Query(50, ge=1, le=1000)) -> list[dict[str, Any]]:
        named = {"instance": instance, "stream": stream, "kind": kind, "rule": rule}
        try:
            times = {k: when(v, k) if v is not None else None for k, v in (("after", after), ("before", before))}
        except ValueError as bad:
            raise RequestError(str(bad)) from None
        out = instances.events.find(limit, **named, **times)
        for e in out:
            folder = instances.output_dir / e["instance"]
            for key in ("snapshot", "clip"):
                # a file the graph's own retention deleted since is no longer named (one on a host is read there)
                gone = e[key] is not None and e.get("host") is None and not (folder / e[key]).is_file()
                e[key] = None if gone else _file_url(e["instance"], e[key], e.get("host"))
        return out

    @api.get("/pipelines/{iid}/files/{path:path}", summary="an event's snapshot or clip",
             response_class=Response, responses={200: {"content": {"image/jpeg": {}, "video/mp4": {}}}})
    def files(iid: str, path: str, request: Request, host: str | None = None) -> Response:
        folder = instances.folder_of(iid)  # (an instance that has ended: its events' files, as /events names them)
        kinds = {".jpg": "image/jpeg", ".mp4": "video/mp4"}
        target = folder / path
        if inside(folder, str(target)) is None or target.suffix.lower() not in kinds:
            raise RequestError(f"no file {path!r} of this instance", 404)
        kind, fresh = kinds[target.suffix.lower()], {"Cache-Control": "no-store"}
        inst = instances.instances.get(iid)
        live = inst.runner.live if inst is not None else None
        if host is not None and live is not None and not getattr(live, "closed", False):
            # a cluster's host wrote it: read there while the run goes, if one of that host's events names it
            # (once it ended, the server's folder, where it is when that is storage the hosts share)
            read = getattr(live, "file", None)
            span = _span(request.headers.get("range"))
            part = read(host, str(target), span) if read is not None else None
            if part is None:
                raise RequestError(f"no file {path!r} of this instance on host {host!r}", 404)
            return _part(part, span, kind, fresh)
        if not target.is_file():
            raise RequestError(f"no file {path!r} of this instance", 404)
        return FileResponse(target, media_type=kind, headers=fresh)

    @api.get("/pipelines/{iid}/streams/{sid}/live.mp4", summary="the stream live: H.264 in fragmented MP4",
             response_class=StreamingResponse, responses={200: {"content": {"video/mp4": {}}}})
    def live(iid: str, sid: str) -> StreamingResponse:
        inst = _stream_of(iid, sid)
        if inst.runner.live.video(sid, -1) is None:
            raise RequestError("this graph makes no live view (it has no preview node)", 404)
        return StreamingResponse(_live_chunks(inst, sid), media_type="video/mp4",
                                 headers={"Cache-Control": "no-store"})


_RANGE = re.compile(r"bytes=(\d*)-(\d*)", re.IGNORECASE)


def _span(header: str | None) -> Span:
    """The one byte range a ``Range`` header names, as a browser's video element asks for it (None: the
    whole file, also for a header this does not read, several ranges or another unit, as HTTP lets a server
    answer)."""
    m = _RANGE.fullmatch((header or "").strip())
    if m is None or m.group(1) == m.group(2) == "":
        return None
    first, last = (int(m.group(1)) if m.group(1) else None), (int(m.group(2)) if m.group(2) else None)
    if first is not None and last is not None and last < first:
        return None
    return first, last


def _part(part: FilePart, span: Span, kind: str, headers: dict[str, str]) -> Response:
    """A file's part read on a host as the local files' route answers: the whole (200), the range asked for
    (206), or 416 where none of it is in the file."""
    size, start, data = part
    headers = {**headers, "Accept-Ranges": "bytes"}
    if span is None:
        return Response(data, media_type=kind, headers=headers)
    if start < 0:
        return Response(b"", status_code=416, media_type=kind, headers={**headers, "Content-Range": f"bytes */{size}"})
    return Response(data, status_code=206, media_type=kind,
                    headers={**headers, "Content-Range": f"bytes {start}-{start + len(data) - 1}/{size}"})


def _file_url(iid: str, rel: str | None, host: Any) -> str | None:
    """Where this API serves an event's file (``rel``: inside the instance's folder, else None); on a cluster,
    read on the host that raised the event (its address in the query)."""
    if rel is None:
        return None
    return f"/pipelines/{iid}/files/{rel}" + (f"?{urlencode({'host': host})}" if isinstance(host, str) else "")


def _live_chunks(inst: Any, sid: str, stall_s: float = 10.0) -> Iterator[bytes]:
    """A viewer's live MP4: the initialization segment, the newest fragment (each begins with a keyframe),
    then each new one as it comes; it ends with the instance, or after ``stall_s`` without a fragment."""
    seq, sent_init, last = -1, False, time.monotonic()
    while inst.result is None and not inst.stopping:
        got = inst.runner.live.video(sid, seq)
        if got is None:
            return
        init, frags = got
        if init is not None and frags and not sent_init:
            yield init
            sent_init = True
        if sent_init and frags:
            for s, data in frags:
                yield data
                seq = s
            last = time.monotonic()
        elif time.monotonic() - last > stall_s:
            return
        else:
            time.sleep(0.05)

