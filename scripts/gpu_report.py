#!/usr/bin/env python3
"""The report of one ``scripts/gpu-measure.sh`` run: ``report.md`` for people and ``report.json`` for
programs (each under 1 MiB), from the run's work directory: ``steps.tsv`` (each step's outcome),
``logs/`` (each step's output), ``records.jsonl`` (every figure the benchmarks recorded, see
``record`` in scripts/bench_python.py), ``info.json`` (``h5gds info --json``) and ``damaged.json``
(scripts/gpu_damaged_chunks.py). It holds the machine, every step's outcome, the tests counted
(passed, failed, skipped) under "ON THE REAL GPU" only where libcuda was not h5gds's emulator,
every figure beside its comparison, and each goal the issues set, met or missed:

* issue 23: device writes at least 0.9x host writes and at least KvikIO's; device reads at least
  0.9x the pinned copy and at least KvikIO's; 4 ranks at least as fast as 1;
* issue 24: Zstandard and LZ4 decoded on the GPU at 20 GB/s or more, deflate at 5 GB/s or more, at
  every chunk size, and never below the host cores;
* issue 26: N threads at least 0.8 x min(N, cores) x one thread;
* issue 42: array-io's ``from_file`` at least 0.95x ``h5gds.from_file`` on the same dataset
  (benches/from_file_pair.py), into device and host memory, contiguous and chunked.

    python3 scripts/gpu_report.py --work DIR --out OUT [--seconds S --budget B]
"""

import argparse
import json
import re
import sys
from pathlib import Path

LIMIT = 1 << 20  # bytes per report file
NO_KVIKIO = "no KvikIO row: KvikIO is absent or cannot read here; the io log says why"


def read_steps(work):
    steps = []
    for line in (work / "steps.tsv").read_text().splitlines():
        name, group, outcome, seconds, limit = line.split("\t")
        log = work / "logs" / f"{name}.log"
        text = log.read_text(errors="replace") if log.exists() else ""
        if outcome == "skipped" and text.startswith("skipped: "):
            outcome = text.splitlines()[0]  # with why
        steps.append({"name": name, "group": group, "outcome": outcome, "seconds": int(seconds),
                      "limit": int(limit), "tail": text.strip().splitlines()[-6:], "log": text})
    return steps


def count_tests(step, damaged):
    """(passed, failed, skipped) of one check step, from its log; a step that ran nothing countable
    counts as one check, passed or failed by its outcome."""
    log, outcome = step["log"], step["outcome"]
    if outcome.startswith("skipped"):
        return 0, 0, 1
    if step["name"] == "rust-device-tests":
        found = re.findall(r"test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored", log)
        if found:
            p, f, i = (sum(int(x[k]) for x in found) for k in range(3))
            return p, f + (outcome != "passed" and f == 0), i
    elif step["name"] in ("python-device-tests", "mpi-2-ranks"):
        # pytest's own last line ("206 passed, 195 skipped in 7.10s"), not the lines tests print.
        summary = [line for line in log.splitlines()
                   if re.search(r"\d+ (passed|failed|errors?|skipped)\b", line) and re.search(r" in [\d.]+s\b", line)]
        if summary:
            last = summary[-1]
            n = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected)", last)}
            failed = n.get("failed", 0) + n.get("error", 0) + n.get("errors", 0)
            return n.get("passed", 0), failed + (outcome != "passed" and failed == 0), n.get("skipped", 0)
    elif step["name"] == "nvcomp-files":
        if "nvCOMP is needed for this check" in log:
            return 0, 0, 1
        p, f = len(re.findall(r"^ok: ", log, re.M)), len(re.findall(r"^FAILED: ", log, re.M))
        if p or f:
            return p, f + (outcome != "passed" and f == 0), 0
    elif step["name"] == "array-io-examples":
        p = sum(line in log for line in ("HDF5 ROUND TRIP OK", "HDF5 BATCHED READ OK"))
        return p, 2 - p, 0
    elif step["name"] == "damaged-chunks" and damaged:
        reads = sum(sum(c.values()) for c in damaged["codecs"].values())
        failed = sum(c["FAILED"] for c in damaged["codecs"].values())
        return reads - failed, failed + (outcome != "passed" and failed == 0), 0
    return (1, 0, 0) if outcome == "passed" else (0, 1, 0)


def machine_facts(work, steps):
    facts = {}
    for step in steps:
        if step["name"] == "machine":
            for line in step["log"].splitlines():
                key, sep, value = line.partition(": ")
                if sep and not key.startswith(" "):
                    facts[key] = value
    return facts


class Figures:
    """The recorded figures, looked up by what they are."""

    def __init__(self, records):
        self.records = records

    def find(self, **want):
        return [r for r in self.records if all(r.get(k) == v for k, v in want.items())]

    def one(self, **want):
        hits = self.find(**want)
        return hits[0] if hits else None


def goal(issue, what, measured, target, unit="x", note=""):
    """One goal's row: met when measured >= target; None (not measured) where either is missing."""
    met = None if measured is None or target is None else measured >= target
    return {"issue": issue, "goal": what, "measured": measured, "target": target, "unit": unit,
            "met": met, "note": note}


def ratio(a, b):
    return None if a is None or b is None or not b.get("gbps") else a["gbps"] / b["gbps"]


def goals(fig, cores):
    out = []
    # Issue 23: device reads and writes (scripts/bench_python.py), collective writes (mpi_tiles).
    writes = {r["role"]: r for r in fig.find(bench="bench_python", case="device writes")}
    out.append(goal(23, "device write at least 0.9x the host write (h5gds.write, same file)",
                    ratio(writes.get("h5gds"), writes.get("host")), 0.9))
    out.append(goal(23, "device write at least KvikIO's raw write", ratio(writes.get("h5gds"), writes.get("kvikio")),
                    1.0, note="" if "kvikio" in writes else NO_KVIKIO))
    for case in ("device reads, warm", "device reads, cold"):
        reads = {r["role"]: r for r in fig.find(bench="bench_python", case=case)}
        if case.endswith("warm"):
            out.append(goal(23, "device read at least 0.9x the pinned host-to-device copy",
                            ratio(reads.get("h5gds"), reads.get("limit")), 0.9,
                            note="" if "limit" in reads else "no pinned-copy row (this CuPy cannot pin memory)"))
        out.append(goal(23, f"device read at least KvikIO's raw read ({case.split(', ')[1]})",
                        ratio(reads.get("h5gds"), reads.get("kvikio")), 1.0,
                        note="" if "kvikio" in reads else NO_KVIKIO))
    one = fig.one(bench="mpi_tiles", ranks=1, what="write", memory="device")
    four = fig.one(bench="mpi_tiles", ranks=4, what="write", memory="device")
    out.append(goal(23, "collective device write with 4 ranks at least as fast as with 1", ratio(four, one), 1.0))
    # Issue 24: GPU decoding at every chunk size.
    for codec, floor in (("zstd", 20.0), ("lz4", 20.0), ("gzip", 5.0)):
        for gpu in fig.find(bench="compressed_read", codec=codec, role="gpu", rank=1):
            host = fig.one(bench="compressed_read", codec=codec, chunk=gpu["chunk"], role="host threads", rank=1)
            name = "deflate" if codec == "gzip" else codec
            out.append(goal(24, f"{name} decoded on the GPU, chunks of {gpu['chunk']}: at least {floor:g} GB/s",
                            gpu["gbps"], floor, unit="GB/s"))
            out.append(goal(24, f"{name}, chunks of {gpu['chunk']}: GPU never below the host cores "
                            f"({host['threads'] if host else '?'} threads)", ratio(gpu, host), 1.0))
    # Issue 26: each h5gds row's scaling against its one thread.
    for memory in ("host", "device"):
        rows = [r for r in fig.find(bench="threads", reader="h5gds", memory=memory) if not r["processes"]]
        for r in rows:
            if r["threads"] == 1:
                continue
            base = next((b for b in rows if b["case"] == r["case"] and b["threads"] == 1), None)
            n = r["threads"]
            target = 0.8 * min(n, r.get("cores") or cores or n)
            out.append(goal(26, f"{memory} rows, {r['case']}: {n} threads at least 0.8 x min({n}, cores) "
                            "x one thread", ratio(r, base), target))
    # Issue 42: array-io against the Python package, each memory and layout (benches/from_file_pair.py).
    for memory, like in (("device", "cupy"), ("host", "numpy")):
        for layout in ("contiguous", "chunked"):
            ours = fig.one(bench="from_file_pair", memory=memory, layout=layout, alternative="array-io from_file")
            python = fig.one(bench="from_file_pair", memory=memory, layout=layout, alternative="h5gds.from_file")
            out.append(goal(42, f"array-io from_file into {memory} memory, {layout}: at least 0.95x "
                            f"h5gds.from_file(..., like={like!r})", ratio(ours, python), 0.95,
                            note=debug_runner(ours)))
    return out


def debug_runner(record):
    """A note where array-io's figure came from a debug build (as in the rehearsal), else ""."""
    if record and "/debug/" in record.get("runner", ""):
        return "array-io's runner is a debug build: the ratio checks the step, not array-io's speed"
    return ""


def comparisons(fig):
    """The side-by-side figures the issue asked for, each as a ratio to what it is compared with."""
    rows = []

    def add(what, a, b, against):
        if a is not None and b is not None:
            rows.append({"what": what, "gbps": a["gbps"], "against": against, "against_gbps": b["gbps"],
                         "ratio": ratio(a, b), "emulated": a["emulated"] or b["emulated"]})

    for case in sorted({r["case"] for r in fig.find(bench="bench_device_read")}):
        add(f"array-io from_file into device memory, {case}", fig.one(bench="bench_device_read", case=case, role="gds"),
            fig.one(bench="bench_device_read", case=case, role="staged"), "the 128 MB staged path")
    for case in ("device reads, warm", "device reads, cold"):
        roles = {r["role"]: r for r in fig.find(bench="bench_python", case=case)}
        for other, name in (("users", "h5py + cupy.asarray"), ("limit", "pinned host-to-device copy"),
                            ("kvikio", "KvikIO raw read"), ("disk", "the disk's O_DIRECT read (dd)")):
            add(f"h5gds.read into CuPy ({case.split(', ')[1]})", roles.get("h5gds"), roles.get(other), name)
    roles = {r["role"]: r for r in fig.find(bench="bench_python", case="device writes")}
    for other, name in (("users", "cupy.asnumpy + h5py"), ("host", "h5gds.write from NumPy"),
                        ("kvikio", "KvikIO raw write")):
        add("h5gds.write from CuPy", roles.get("h5gds"), roles.get(other), name)
    for gpu in fig.find(bench="compressed_read", role="gpu"):
        for other, name in (("users", "h5py + hdf5plugin + cupy.asarray"), ("host threads", "the host cores")):
            add(f"{gpu['codec']} decoded on the GPU, chunks of {gpu['chunk']} (rank {gpu['rank']})", gpu,
                fig.one(bench="compressed_read", codec=gpu["codec"], chunk=gpu["chunk"], rank=gpu["rank"], role=other),
                name)
    for size in ("4K", "256M"):
        ours = fig.one(bench="first_read", size=size, device=True, alternative="h5gds.from_file(p, 'x', like='cupy')")
        theirs = fig.one(bench="first_read", size=size, device=True, reference=True)
        if ours and theirs:
            # Times, not rates: the ratio is h5py's time over h5gds's (> 1: h5gds's first read is faster).
            rows.append({"what": f"first device read in a fresh process ({size})", "seconds": ours["seconds"],
                         "against": "h5py + cupy.asarray", "against_seconds": theirs["seconds"],
                         "ratio": theirs["seconds"] / ours["seconds"], "emulated": ours["emulated"]})
    for memory, like in (("device", "cupy"), ("host", "numpy")):
        for layout in ("contiguous", "chunked"):
            add(f"array-io from_file into {memory} memory, {layout}",
                fig.one(bench="from_file_pair", memory=memory, layout=layout, alternative="array-io from_file"),
                fig.one(bench="from_file_pair", memory=memory, layout=layout, alternative="h5gds.from_file"),
                f"h5gds.from_file(..., like={like!r})")
    for ranks in (2, 4):
        for what in ("write", "read"):
            add(f"collective device {what}, {ranks} ranks", fig.one(bench="mpi_tiles", ranks=ranks, what=what),
                fig.one(bench="mpi_tiles", ranks=1, what=what), "1 rank")
    return rows


def number(x, digits=2):
    return "-" if x is None else f"{x:.{digits}f}"


def markdown(report):
    label = report["device_label"]
    lines = [f"# h5gds on a GPU: `scripts/gpu-measure.sh` report, {report['date']}", "",
             f"**{label}**: {report['tests']['headline']}", "",
             f"Run time {report['seconds']} s of a budget of {report['budget']} s. "
             + ("Every device figure below is EMULATED (h5gds's CPU emulators of CUDA, cuFile and nvCOMP): "
                "it checks the command, not the GPU." if report["emulated"] else ""), "", "## Machine", ""]
    lines += [f"- {k}: {v}" for k, v in report["machine"].items()]
    if report["info"]:
        lines += ["", "`h5gds info`:", "", "```", *report["info"], "```"]
    lines += ["", "## Steps", "", "| step | group | outcome | seconds (limit) | passed | failed | skipped |",
              "|---|---|---|---|---|---|---|"]
    for s in report["steps"]:
        c = s.get("tests", ("", "", ""))
        lines.append(f"| {s['name']} | {s['group']} | {s['outcome']} | {s['seconds']} ({s['limit']}) | "
                     f"{c[0]} | {c[1]} | {c[2]} |")
    bad = [s for s in report["steps"] if s["outcome"] != "passed" and not s["outcome"].startswith("skipped")]
    for s in bad:
        lines += ["", f"`{s['name']}` {s['outcome']}; its log ends:", "", "```", *s["tail"], "```"]
    if report["damaged"]:
        lines += ["", "## Damaged chunks through the GPU decoder", ""]
        for codec, counts in report["damaged"]["codecs"].items():
            lines.append(f"- {codec}: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
        lines += [f"- FAILED: {f}" for f in report["damaged"]["failures"]]
    tag = " (EMULATED)" if report["emulated"] else ""
    lines += ["", f"## Goals{tag}", "", "| issue | goal | measured | target | met |", "|---|---|---|---|---|"]
    for g in report["goals"]:
        met = {True: "met", False: "**missed**", None: "not measured"}[g["met"]]
        note = f" ({g['note']})" if g["note"] else ""
        lines.append(f"| {g['issue']} | {g['goal']} | {number(g['measured'])} {g['unit']} | {g['target']:.2f} "
                     f"{g['unit']} | {met}{note} |")
    lines += ["", f"## Side by side{tag}", "", "| what | figure | against | its figure | ratio |",
              "|---|---|---|---|---|"]
    for c in report["comparisons"]:
        if "gbps" in c:
            lines.append(f"| {c['what']} | {c['gbps']:.2f} GB/s | {c['against']} | {c['against_gbps']:.2f} GB/s | "
                         f"x{c['ratio']:.2f} |")
        else:
            lines.append(f"| {c['what']} | {c['seconds'] * 1e3:.0f} ms | {c['against']} | "
                         f"{c['against_seconds'] * 1e3:.0f} ms | x{c['ratio']:.2f} (time ratio) |")
    lines += ["", f"## Every figure{tag}", "",
              "Medians of interleaved repetitions; the logs (logs.tar.xz) hold each benchmark's own table.", "",
              "| benchmark | case | alternative | GB/s | ms |", "|---|---|---|---|---|"]
    for r in report["figures"]:
        case = r.get("case") or ", ".join(f"{k} {r[k]}" for k in ("codec", "chunk", "ranks", "size") if k in r)
        lines.append(f"| {r['bench']} | {case} | {r['alternative']}{' EMULATED' if r['emulated'] else ''} | "
                     f"{number(r['gbps'])} | {r['seconds'] * 1e3:.1f} |")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seconds", type=int, default=0)
    parser.add_argument("--budget", type=int, default=0)
    args = parser.parse_args()
    steps = read_steps(args.work)
    facts = machine_facts(args.work, steps)
    records = [json.loads(line) for line in (args.work / "records.jsonl").read_text().splitlines() if line.strip()]
    damaged_file = args.work / "damaged.json"
    damaged = json.loads(damaged_file.read_text()) if damaged_file.exists() else None
    info_file = args.work / "info.json"
    info_text = next((s["log"] for s in steps if s["name"] == "info"), "")
    # The machine counts as emulated when libcuda was the emulator or any figure says so.
    emulated = facts.get("emulated") == "True" or any(r["emulated"] for r in records)
    totals = [0, 0, 0]
    for s in steps:
        if s["group"] == "checks":
            s["tests"] = count_tests(s, damaged)
            totals = [a + b for a, b in zip(totals, s["tests"])]
    device_label = ("EMULATED (h5gds's CPU emulators of CUDA, cuFile and nvCOMP; no GPU)" if emulated
                    else "ON THE REAL GPU")
    headline = f"{totals[0]} passed, {totals[1]} failed, {totals[2]} skipped"
    try:
        cores = int(facts.get("cores", "").split(",")[0])
    except ValueError:
        cores = None
    fig = Figures(records)
    report = {
        "date": facts.get("date", "?"), "emulated": emulated, "device_label": device_label,
        "seconds": args.seconds, "budget": args.budget, "machine": facts,
        "info": info_text.splitlines()[:60],
        "info_json": json.loads(info_file.read_text()) if info_file.exists() and info_file.stat().st_size else None,
        "steps": [{k: v for k, v in s.items() if k != "log"} for s in steps],
        "tests": {"passed": totals[0], "failed": totals[1], "skipped": totals[2],
                  "headline": f"{headline} (tests and checks: Rust device tests, the package's device tests, "
                              "nvCOMP files, array-io examples, MPI, damaged chunks)"},
        "damaged": damaged, "goals": goals(fig, cores), "comparisons": comparisons(fig), "figures": records,
    }
    met = [g for g in report["goals"] if g["met"]]
    missed = [g for g in report["goals"] if g["met"] is False]
    unmeasured = len(report["goals"]) - len(met) - len(missed)
    report["goals_summary"] = f"{len(met)} met, {len(missed)} missed, {unmeasured} not measured"
    text = markdown(report)
    data = json.dumps(report, indent=1)
    for name, body in (("report.md", text), ("report.json", data)):
        if len(body.encode()) > LIMIT:
            sys.exit(f"{name} would be {len(body.encode())} bytes, over {LIMIT}: fewer figures needed")
        (args.out / name).write_text(body)
    print(f"{device_label}: {headline}; goals {report['goals_summary']}")
    print(f"report: {args.out / 'report.md'}, {args.out / 'report.json'}")


if __name__ == "__main__":
    main()
