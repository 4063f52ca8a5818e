"""Does a device's OpenVINO model cache hold? Run it twice, in two processes, on the device machine: each run
compiles the models named with the cache folder set and prints, per model, the compile time, whether the
plugin loaded it from the cache, and the first values of its first output on one fixed random input (the
second run's must equal the first's).

    python3 benchmarks/model_cache_check.py GPU /tmp/ovcache blazeface_full.tflite:1,192,192,3 \\
        blazeface_short.tflite:1,128,128,3
"""
from __future__ import annotations

import json
import sys
import time

import numpy as np
import openvino as ov


def main(device: str, cache: str, models: list[str]) -> dict[str, dict[str, object]]:
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
        out[path] = {"compile_ms": round(ms), "loaded_from_cache": bool(compiled.get_property("LOADED_FROM_CACHE")),
                     "first": first}
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2], sys.argv[3:])))
