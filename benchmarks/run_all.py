"""The benchmarks' one command line, over the registry in benchmarks/harness.py.

    python benchmarks/run_all.py --list              # every benchmark: name, section, machine, command, latest result
    python benchmarks/run_all.py NAME [ARGS ...]     # runs one; ARGS, if any, replace its registered arguments
    python benchmarks/run_all.py [SUITE ARGS ...]    # the suite (sections 1-5: suite.py), then the report
    python benchmarks/run_all.py --results DIR NAME  # the result written under DIR (on the GPU machine: $OUT)

Each run is recorded as benchmarks/results/NAME_MACHINE.json in the one result schema (harness.py), replacing that
benchmark's earlier result on the same machine. ``python benchmarks/report.py`` renders the tables of BENCHMARKS.md
and the plots from those files.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import BENCHMARKS, BY_NAME, KINDS, RESULTS, latest, load, run, stale


def listing() -> str:
    rows = [("name", "section", "machine", "latest result", "command")]
    for b in BENCHMARKS:
        last = latest(b)
        when = f"{last.name} ({load(last).get('date', '')})" if last else "-"
        rows.append((b.name, b.section, ", ".join(b.machines), when, b.command(b.default_args(b.machines[0]))))
    width = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r[:4], width)) + "  " + r[4] for r in rows]
    lines += ["", "machines: " + "; ".join(f"{k}: {v}" for k, v in KINDS.items())]
    extra = stale()
    if extra:
        lines += ["", "not the latest of any benchmark on a machine (remove them; git keeps them): "
                  + ", ".join(p.name for p in extra)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    results = RESULTS
    if argv[:1] == ["--results"]:
        results, argv = Path(argv[1]), argv[2:]
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    if argv[:1] == ["--list"]:
        print(listing())
        return 0
    if argv and not argv[0].startswith("-"):
        if argv[0] not in BY_NAME:
            raise SystemExit(f"no benchmark named {argv[0]!r}; python benchmarks/run_all.py --list names them")
        print(f"wrote {run(BY_NAME[argv[0]], argv[1:] or None, results)}")
        return 0
    print(f"wrote {run(BY_NAME['suite'], argv or None, results)}")
    import report

    report.main([])
    return 0


if __name__ == "__main__":
    sys.exit(main())
