"""What ``flowpipe serve`` runs, in a file for its next start (``--state``), and the secrets kept out of it.

The file is JSON, written whole into a temporary file beside it, synced, and renamed over the last one: a
crash at any moment leaves either the last state or the new one, never a mix. It holds no secret: no token
(the server never writes its token anywhere), and no camera password. A password given by reference to the
server's environment (``rtsp://admin:{FLOWPIPE_CAM_DOOR}@10.0.0.5/1``, as Frigate's ``{FRIGATE_...}``) is
kept as that reference and read from the environment again at each start; a password written into a URI is
used while the server runs but not saved (the URI is saved without it, marked), so that camera is not
restored.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

REFERENCE = re.compile(r"\{(FLOWPIPE_CAM_[A-Z0-9_]+)\}")
URI = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)
# a query's values that are credentials (``http://cam/video.cgi?user=admin&pwd=...``)
SECRET_QUERY = re.compile(r"(.*[_-])?(pass(word)?|passwd|pwd|secret|token|auth|api_?key|key|sig(nature)?)",
                          re.IGNORECASE)


class StateError(ValueError):
    """The state file cannot be read as one ``flowpipe serve`` wrote: one line naming it."""


def write(path: Path, doc: Any) -> None:
    """``doc`` as JSON in ``path``: a temporary file in the same folder, synced, renamed over ``path`` (the
    folder synced after), readable by this user alone (it lists cameras' addresses)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1, default=str)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)  # the rename itself survives a power loss
    finally:
        os.close(folder)


def read(path: Path) -> list[dict[str, Any]]:
    """The instances ``path`` lists (none where there is no file); a file that is not one ``write`` made
    (cut short, another file, edited by hand) raises ``StateError``."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as e:
        raise StateError(f"{path}: cannot be read ({e}); expected the state flowpipe serve writes") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise StateError(f"{path}: not JSON ({e.msg} at line {e.lineno} column {e.colno}); expected the state "
                         "flowpipe serve writes") from None
    if not isinstance(doc, list) or not all(
            isinstance(d, dict) and isinstance(d.get("id"), str) and isinstance(d.get("template"), str) for d in doc):
        raise StateError(f"{path}: not a list of instances, each with an id and a template; expected the state "
                         "flowpipe serve writes")
    return doc


def resolved(uri: str) -> str:
    """``uri`` with each ``{FLOWPIPE_CAM_NAME}`` replaced by that variable of the server's environment; a
    variable that is not set raises ``KeyError`` naming it."""
    def value(m: re.Match[str]) -> str:
        if m.group(1) not in os.environ:
            raise KeyError(m.group(1))
        return os.environ[m.group(1)]

    return REFERENCE.sub(value, uri) if URI.match(uri) else uri


def unsaid(uri: str) -> tuple[str, bool]:
    """``uri`` as the state file may hold it, and whether a secret was taken out: a password in its
    ``user:password@`` or a query value named like one (``pwd=``, ``token=``) that is not a reference to
    the environment is left out."""
    if not URI.match(uri):
        return uri, False
    parts = urlsplit(uri)
    netloc, query, cut = parts.netloc, parts.query, False
    user, at, host = netloc.rpartition("@")
    if at and ":" in user and _literal(user.split(":", 1)[1]):
        netloc, cut = f"{user.split(':', 1)[0]}@{host}", True
    if query:
        kept = []
        for item in query.split("&"):
            name, _, val = item.partition("=")
            if SECRET_QUERY.fullmatch(unquote(name)) and _literal(unquote(val)):
                cut = True
                continue
            kept.append(item)
        query = "&".join(kept)
    if not cut:
        return uri, False
    return parts._replace(netloc=netloc, query=query).geturl(), True


def _literal(secret: str) -> bool:
    """Whether ``secret`` holds more than references to the environment."""
    return bool(REFERENCE.sub("", secret))
