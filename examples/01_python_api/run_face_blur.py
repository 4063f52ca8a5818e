"""Run the face-blur graph from Python and inspect the result."""
from __future__ import annotations

import json
from pathlib import Path

import flowpipe

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    spec = flowpipe.load_graph(ROOT / "graphs" / "face_blur.yaml",
                               {"output": "out/api_blur.mp4", "metadata": "out/api_faces.jsonl"})
    result = flowpipe.run(spec, max_frames=90)
    print("frames:", result.frames)
    print("inference:", {k: (v["device"], v["device_reason"]) for k, v in result.inference.items()})
    print("bytes copied between stages:", sum(e["bytes_copied"] for e in result.edges.values()))
    first = json.loads(Path("out/api_faces.jsonl").read_text().splitlines()[0])
    print("faces in frame 0:", [(o["box"], o["score"]) for o in first["objects"]])
    raise SystemExit(result.exit_code)


if __name__ == "__main__":
    main()
