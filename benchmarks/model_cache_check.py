"""Does a device's OpenVINO model cache hold? The models named are compiled in two processes, one after the
other, with one cache folder (empty at the start): per model, each start's compile time and whether the plugin
loaded it from the cache, and whether the first values of its first output on one fixed random input are the
same in both.

    python3 benchmarks/model_cache_check.py GPU blazeface_full.tflite:1,192,192,3 \\
        blazeface_short.tflite:1,128,128,3 [--cache DIR] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def start(device: str, cache: str, models: list[str]) -> dict[str, dict[str, object]]:
    """One process's start: every model compiled with the cache folder set (openvino imported here only)."""
    import numpy as np
    import openvino as ov

    core = ov.Core()
    out: dict[str, dict[str, object]] = {}
    for arg in models:
        path, dims = arg.rsplit(":", 1)
        shape = [int(d) for d in dims.split(",")]
        model = core.read_model(path)
        model.reshape(shape)
        t = time.perf_counter()
        compiled = core.compile_model(model, device, {"CACHE_DIR": cache, "PERFORMANCE_HINT": "THROUGHPUT"})
        ms = (time.perf_counter() - t) * 1e3
        x = np.random.default_rng(0).uniform(0, 1, shape).astype(np.float32)
        first = np.asarray(compiled({0: x})[compiled.outputs[0]]).ravel()[:5].tolist()
        out[Path(path).stem] = {"compile_ms": round(ms), "loaded_from_cache": bool(compiled.get_property(
            "LOADED_FROM_CACHE")), "first": first}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("device")
    ap.add_argument("models", nargs="+", metavar="MODEL:SHAPE", help="a model file and its input shape, 1,192,192,3")
    ap.add_argument("--cache", help="the cache folder (default: a new one, empty)")
    ap.add_argument("--json")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(start(a.device, a.cache, a.models)))
        return
    cache = a.cache or tempfile.mkdtemp(prefix="ovcache-")
    cmd = [sys.executable, __file__, a.device, *a.models, "--cache", cache, "--child"]
    first, second = (json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
                     for _ in range(2))
    runs = {m: {"first_start": {k: first[m][k] for k in ("compile_ms", "loaded_from_cache")},
                "second_start": {k: second[m][k] for k in ("compile_ms", "loaded_from_cache")},
                "outputs_equal": first[m]["first"] == second[m]["first"]} for m in first}
    result = {"device": a.device, "runs": runs}
    print(json.dumps(result))
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
