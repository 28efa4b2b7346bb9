#!/usr/bin/env python3
"""The agent session's FUSE requests by opcode, by step and by turn.

Reads the JSON of `scripts/bench.py --only 11 --requests` (each FUSE way's
runs carry `requests_by_step`: "TURN STEP" -> {opcode: count}, counted by
bench_reqs.py from the kernel's `fuse:fuse_request_send` tracepoint) and
prints two Markdown tables per way and tree size: opcodes by step (summed
over the turns) and opcodes by turn. Each cell is the median over the runs.

  scripts/agent_census.py RESULTS.json [--way opfs] [--files 3000]
"""

import argparse
import json
import statistics
import sys

STEPS = ["grep", "read+edit+create+delete", "sed -i", "mv", "git status",
         "git diff --stat", "checkpoint", "last export"]
SHORT = {"read+edit+create+delete": "python reads/edits", "git diff --stat": "git diff"}


def cells(runs, key_of):
    """{(opcode, column): median over runs} where key_of maps a part's label
    to its column (or None to skip it)."""
    per_run = []
    for r in runs:
        c = {}
        for label, ops in r.get("requests_by_step", {}).items():
            col = key_of(label)
            if col is None:
                continue
            for op, n in ops.items():
                c[(op, col)] = c.get((op, col), 0) + n
        per_run.append(c)
    keys = set().union(*per_run) if per_run else set()
    return {k: statistics.median(c.get(k, 0) for c in per_run) for k in keys}


def table(med, cols, title):
    ops = sorted({op for op, _ in med}, key=lambda o: -sum(med.get((o, c), 0) for c in cols))
    fmt = lambda x: f"{x:,.0f}" if x == int(x) else f"{x:,.1f}"
    out = [f"**{title}**", "", "| opcode | " + " | ".join(SHORT.get(str(c), str(c)) for c in cols)
           + " | total |", "| --- |" + " --- |" * (len(cols) + 1)]
    for op in ops + ["total"]:
        row = [sum(med.get((o, c), 0) for o in ops) if op == "total" else med.get((op, c), 0)
               for c in cols]
        name = "**total**" if op == "total" else op
        out.append(f"| {name} | " + " | ".join(fmt(x) if x else "" for x in row)
                   + f" | {fmt(sum(row))} |")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results")
    ap.add_argument("--way", action="append", help="ways to show (default: every way counted)")
    ap.add_argument("--files", action="append", help="tree sizes to show (default: all)")
    a = ap.parse_args()
    with open(a.results) as f:
        res = json.load(f)["results"]["11 agent session"]
    for n, by in res.items():
        if a.files and n not in a.files:
            continue
        for way, r in by.items():
            runs = [x for x in r["runs"] if "requests_by_step" in x]
            if not runs or (a.way and way not in a.way):
                continue
            turns = sorted({int(lbl.split(" ", 1)[0]) for x in runs for lbl in x["requests_by_step"]
                            if lbl.split(" ", 1)[0].isdigit()})

            def step_of(label):
                head, _, rest = label.partition(" ")
                return rest if head.isdigit() else (label or None)

            def turn_of(label):
                head = label.split(" ", 1)[0]
                return int(head) if head.isdigit() else None

            by_step = cells(runs, step_of)
            steps = [s for s in STEPS if any(c == s for _, c in by_step)]
            print(table(by_step, steps, f"{way}, {n} files: requests by step, all turns "
                        f"(median of {len(runs)} runs)"))
            print(table(cells(runs, turn_of), turns, f"{way}, {n} files: requests by turn"))
            t1 = cells(runs, lambda lbl: step_of(lbl) if turn_of(lbl) == 1 else None)
            print(table(t1, [s for s in STEPS if any(c == s for _, c in t1)],
                        f"{way}, {n} files: turn 1 by step"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
