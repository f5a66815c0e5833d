#!/usr/bin/env python3
"""Two versions of harness-code's kernel side by side: the tracing overhead
of each, on the same notebooks, in one run.

    eval "$(scripts/notebook-venv)"
    git show HEAD~3:harness-code/src/kernel/kernel.py > /tmp/old.py
    "$HARNESS_NOTEBOOK_PYTHON" benchmarks/scripts/kernel-ab.py \\
        /tmp/old.py harness-code/src/kernel/kernel.py \\
        harness-code/tests/notebooks/*.py NOTEBOOKS.ipynb ...

Each kernel file is started as the host starts it (`python -s -u -c FILE
CONFIG`, matplotlib on Agg; an .ipynb in its own directory, a script in
a fresh one) and sent every code
cell of each notebook (`# %%` scripts or .ipynb; lines of IPython magics
and shell escapes are dropped, `%time` and `%timeit` prefixes removed), once
traced and once untraced, the versions and modes alternating, REPEATS times
(default 5). Per cell it keeps the best kernel time traced (run plus the
trace's own overhead) and untraced (run), and prints per version the median
ratio, the mean of the ratios' logarithms (less sensitive to the cells near
the median than the median is), and the median and mean of the trace's
overhead in microseconds. benchmarks/scripts/bench-cells gives the figures
of the built kernel; this compares two edits of it, which a build of each
would otherwise take.
"""

import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile


def cells_of(path):
    if path.endswith(".ipynb"):
        with open(path, encoding="utf-8") as handle:
            notebook = json.load(handle)
        cells = ["".join(cell["source"]) for cell in notebook["cells"]
                 if cell["cell_type"] == "code"]
    else:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        cells = [cell.strip("\n") for cell in re.split(r"^# %%.*$", text, flags=re.M)[1:]]
    runnable = []
    for cell in cells:
        lines = [re.sub(r"^%time(it)? ", "", line) for line in cell.split("\n")]
        lines = [line for line in lines if not line.lstrip().startswith(("%", "!", "?"))
                 and not line.rstrip().endswith("?")]
        runnable.append("\n".join(lines))
    return runnable


def workdir(path, scratch):
    """Where a notebook runs: an .ipynb in its own directory (its data
    files are there), a `# %%` script in `scratch`, a fresh directory, so
    that the files the test notebooks write stay out of the repository."""
    if path.endswith(".ipynb"):
        return os.path.dirname(path) or "."
    return scratch


def run(source, path, trace, cells):
    """[(run µs, overhead µs) or None for a cell the kernel refused]. The
    directories the run makes (its blobs, a script's files) go with it."""
    with tempfile.TemporaryDirectory(prefix="kernel-ab-") as scratch:
        return run_in(source, path, trace, cells, scratch)


def run_in(source, path, trace, cells, scratch):
    blobs = os.path.join(scratch, ".blobs")
    config = {"trace": trace, "check_reads": trace, "blob_dir": blobs,
              "drop_privileges": False}
    env = dict(os.environ, MPLBACKEND="Agg")
    # A session of its own: the kernel's watchdog kills its process group.
    kernel = subprocess.Popen(
        [sys.executable, "-s", "-u", "-c", source, json.dumps(config)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=workdir(path, scratch),
        start_new_session=True, env=env)
    kernel.stdout.readline()
    times = []
    for i, cell in enumerate(cells):
        request = {"id": i, "op": "execute", "cell": str(i), "source": cell}
        kernel.stdin.write((json.dumps(request) + "\n").encode())
        kernel.stdin.flush()
        reply = json.loads(kernel.stdout.readline())
        if "duration_us" not in reply:
            times.append(None)
            continue
        times.append((reply["duration_us"], reply.get("trace", {}).get("overhead_us", 0)))
    kernel.stdin.close()
    kernel.wait()
    return times


def main():
    repeats = int(os.environ.get("REPEATS", "5"))
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    versions = sys.argv[1:3]
    sources = []
    for version in versions:
        with open(version, encoding="utf-8") as handle:
            sources.append(handle.read())
    ratios = [[] for _ in versions]
    overheads = [[] for _ in versions]
    for path in sys.argv[3:]:
        cells = cells_of(path)
        best = {}
        for _ in range(repeats):
            for v, source in enumerate(sources):
                for trace in (False, True):
                    for i, times in enumerate(run(source, path, trace, cells)):
                        if times is None:
                            continue
                        best[(v, trace, i)] = min(best.get((v, trace, i), math.inf), sum(times))
                        if trace:
                            best[(v, "o", i)] = min(best.get((v, "o", i), math.inf), times[1])
        line = os.path.basename(path)
        for v in range(len(versions)):
            cell_ratios = [best[(v, True, i)] / max(best[(v, False, i)], 1)
                           for i in range(len(cells))
                           if (v, True, i) in best and (v, False, i) in best]
            if not cell_ratios:
                continue
            ratios[v] += cell_ratios
            overheads[v] += [best[(v, "o", i)] for i in range(len(cells)) if (v, "o", i) in best]
            line += " | %s: %.2f" % (os.path.basename(versions[v]), statistics.median(cell_ratios))
        print(line, flush=True)
    for v, version in enumerate(versions):
        print("ALL %s: traced/untraced median %.3f, mean of logs %.3f (%d cells); trace overhead "
              "median %d us, mean %d us" % (
                  version, statistics.median(ratios[v]),
                  statistics.fmean(math.log(r) for r in ratios[v]), len(ratios[v]),
                  statistics.median(overheads[v]), statistics.fmean(overheads[v])))


if __name__ == "__main__":
    main()
