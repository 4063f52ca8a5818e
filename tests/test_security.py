"""What flowpipe lets in: only safe YAML, registered node types, explicit plugins, verified models,
loopback listeners by default, and no shell with user strings."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from flowpipe import GraphError, load_graph, models

ROOT = Path(__file__).resolve().parent.parent


def _calls(tree: ast.AST) -> list[str]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            base = getattr(f.value, "id", "") if isinstance(f, ast.Attribute) else ""
            out.append(f"{base}.{name}" if base else name)
            for kw in node.keywords:
                if kw.arg == "shell" and getattr(kw.value, "value", False) is True:
                    out.append("shell=True")
    return out


def test_no_shell_eval_or_exec_in_the_package() -> None:
    banned = {"os.system", "os.popen", "eval", "exec", "shell=True", "yaml.load", "pickle.load"}
    for py in list((ROOT / "flowpipe").rglob("*.py")) + list((ROOT / "nodes").rglob("*.py")):
        found = banned.intersection(_calls(ast.parse(py.read_text())))
        # procnode unpickles only what its own worker sent over a private socketpair
        if py.name == "procnode.py":
            found -= {"pickle.load"}
        assert not found, f"{py.relative_to(ROOT)} calls {found}"


def test_yaml_tags_never_construct_objects() -> None:
    with pytest.raises(GraphError, match="could not determine a constructor"):
        load_graph("g.yaml", text="nodes: !!python/name:os.system\n")


def test_python_only_through_an_explicit_plugins_list() -> None:
    with pytest.raises(GraphError, match=r"unknown node type 'os\.system'"):
        load_graph("g.yaml", text="nodes:\n  - {id: a, type: os.system}\n")
    with pytest.raises(GraphError, match="plugin 'no_such_plugin_mod' failed to import: ModuleNotFoundError"):
        load_graph("g.yaml", text="plugins: [no_such_plugin_mod]\nnodes:\n  - {id: a, type: synthetic_source}\n")


def test_listeners_default_to_loopback() -> None:
    from flowpipe.registry import registry

    for name in ("mjpeg_preview", "prometheus", "mqtt"):
        assert registry()[name].Config().host == "127.0.0.1"


def test_model_files_are_checked_against_sha256(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("FLOWPIPE_CACHE", str(tmp_path))
    path = models.cached_path("blazeface_short")
    path.write_bytes(b"tampered")
    with pytest.raises(FileNotFoundError, match="is not in the cache; run: flowpipe models pull blazeface_short"):
        models.resolve("blazeface_short", fetch=False)  # a tampered file is not used
    entry = dict(models.registry()["blazeface_short"], sha256="0" * 64)
    monkeypatch.setitem(models.builtin_registry(), "blazeface_short", entry)
    with pytest.raises(RuntimeError, match="sha256 mismatch: expected 0000"):
        models.pull("blazeface_short")


def test_serve_speaks_https_with_a_certificate_and_refuses_half_of_one(tmp_path) -> None:
    """``--tls-cert``/``--tls-key``: the API and console over HTTPS (the bearer token never in clear); one without
    the other, a file that is not there, or a token over plain HTTP off loopback without ``--insecure-http``, is
    refused in one line before anything starts."""
    import json
    import shutil
    import socket
    import ssl
    import subprocess
    import sys
    import time
    import urllib.request

    pytest.importorskip("uvicorn")
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed (it makes the test's certificate)")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    cli = [sys.executable, "-m", "flowpipe.cli", "serve", "--graphs", str(ROOT / "graphs"),
           "--output-dir", str(tmp_path / "out")]
    half = subprocess.run([*cli, "--tls-cert", str(cert)], capture_output=True, text=True, timeout=60)
    assert half.returncode == 2 and half.stderr.strip() == "error: TLS needs both --tls-cert and --tls-key (PEM files)"
    gone = subprocess.run([*cli, "--tls-cert", str(cert), "--tls-key", str(tmp_path / "nokey.pem")],
                          capture_output=True, text=True, timeout=60)
    assert gone.returncode == 2 and "--tls-key" in gone.stderr and "no such file" in gone.stderr
    clear = subprocess.run([*cli, "--host", "0.0.0.0", "--token", "t0k3n"], capture_output=True, text=True,  # noqa: S104
                           timeout=60)  # a token over plain HTTP off loopback: refused, unless said on purpose
    assert clear.returncode == 2 and clear.stderr.strip() == (
        "error: serving on 0.0.0.0 over plain HTTP sends the token in clear: --tls-cert and --tls-key serve HTTPS; "
        "--insecure-http if a TLS proxy in front of it speaks to the network")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = subprocess.Popen([*cli, "--port", str(port), "--token", "t0k3n", "--tls-cert", str(cert), "--tls-key",
                            str(key)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        trusted = ssl.create_default_context(cafile=str(cert))
        req = urllib.request.Request(f"https://127.0.0.1:{port}/pipelines", headers={"Authorization": "Bearer t0k3n"})
        deadline, body = time.monotonic() + 60, None
        while body is None:
            try:
                with urllib.request.urlopen(req, context=trusted, timeout=5) as r:  # noqa: S310 (https, ours)
                    body = json.loads(r.read())
            except (ConnectionError, urllib.error.URLError):
                assert time.monotonic() < deadline, "serve did not answer over HTTPS"
                time.sleep(0.3)
        assert any(t["name"] == "face_blur" for t in body)
        with pytest.raises((ConnectionError, urllib.error.URLError, OSError)):  # plain HTTP gets no answer
            urllib.request.urlopen(f"http://127.0.0.1:{port}/pipelines", timeout=5).read()
    finally:
        srv.terminate()
        srv.wait(30)
