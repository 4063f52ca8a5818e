"""What the person detector (SSD MobileNet v2, COCO) says about the evaluation's photographs: on those with
animals whose faces the face detectors take for people's (the raccoon, the quokka, the mandrill, the squirrel,
the dog, the hiker's dog and horse), and on those with people. A face found inside an animal's box and no
person's is the context a face-blur graph could reject an animal's face by.

    python benchmarks/animal_context.py --out benchmarks/results/animal_context.json

Each photograph as the evaluation's clips are made from it, whole, through graphs/people_count.yaml's detector
(stretched to 300x300) with COCO's people and animals from 0.3; per photograph, the boxes found.
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from bench_results import publish

ROOT = Path(__file__).resolve().parent.parent
ANIMALS = ["cat", "dog", "horse", "sheep", "cow", "elephant", "bear", "zebra", "giraffe", "bird"]
WITH_ANIMALS = ["raccoon", "quokka", "mandrill", "squirrel", "dog", "hiker"]
WITH_PEOPLE = ["hat", "players", "footballer", "soldier", "bangs", "couple", "hopper", "table", "group", "sideline"]


def found(name: str) -> list[dict[str, Any]]:
    import cv2

    from flowpipe.eval.clips import _photo
    from flowpipe.eval.score import run_timed
    from flowpipe.graph import load_graph

    work = Path(tempfile.mkdtemp(prefix=f"flowpipe-context-{name}-"))
    (work / "in").mkdir()
    cv2.imwrite(str(work / "in" / f"{name}.png"), _photo(name))
    spec = load_graph(str(ROOT / "graphs" / "people_count.yaml"),
                      {"input": str(work / "in"), "output": str(work / "o.mp4"), "metadata": str(work / "o.jsonl"),
                       "events": str(work / "e"), "clips": str(work / "c"), "device": "CPU", "analytics": False,
                       "candidates": 0.3, "score": 0.3, "classes": ["person", *ANIMALS]})
    run_timed(spec, name)
    records = [json.loads(line) for line in (work / "o.jsonl").read_text().splitlines()]
    return [{"label": o["label"], "score": round(o["score"], 3), "box": [round(v) for v in o["box"]]}
            for o in (records[0]["objects"] if records else [])]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out")
    args = ap.parse_args()
    rows = []
    for name in WITH_ANIMALS + WITH_PEOPLE:
        objs = found(name)
        rows.append({"photo": name, "animals_in_it": name in WITH_ANIMALS, "found": objs,
                     "best_animal": max((o["score"] for o in objs if o["label"] in ANIMALS), default=0.0),
                     "best_person": max((o["score"] for o in objs if o["label"] == "person"), default=0.0)})
        print(rows[-1], flush=True)
    publish({"animals": ANIMALS, "rows": rows}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
