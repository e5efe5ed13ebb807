#!/usr/bin/env python3
"""Regenerates docs/VALIDATION.md's table: every published run of tests/sim/data/published_runs.json
predicted by `ppsim simulate --json`, converted to the published metric, with its error.

Usage (from the repository root, after building ppsim):
  scripts/validation-table.py [--ppsim build/ci/sim/ppsim] [--update docs/VALIDATION.md] [--set-tolerances]
Without --update the table goes to stdout; with it, the text between the doc's
"<!-- validation-table:begin -->" and "<!-- validation-table:end -->" lines is replaced (atomically).
--set-tolerances rewrites each run's tolerances in the data file to its current errors (rounded up
to a whole percent, plus a point): for a deliberate change to the cost model, reviewed in the diff.
Only the ppsim binary is run; tests/sim/test_validation.cpp makes the same predictions and checks
each error against the run's tolerance.
"""
import argparse
import concurrent.futures
import functools
import json
import math
import os
import subprocess
import sys
import tempfile

DATA = "tests/sim/data/published_runs.json"
BEGIN = "<!-- validation-table:begin -->"
END = "<!-- validation-table:end -->"
GIB = 2**30


def fail(message):
    print(f"validation-table: {message}", file=sys.stderr)
    sys.exit(1)


def megatron_eq3_flops(model, global_batch):
    """Narayanan et al. 2021, eq. 3: the GEMM FLOPs of one iteration with full recomputation."""
    s, l, h, v = model["seq"], model["layers"], model["hidden"], model["vocab"]
    return 96.0 * global_batch * s * l * h * h * (1 + s / (6.0 * h) + v / (16.0 * l * h))


def predicted_metric(run, model, iteration_s):
    if run["metric"] == "tflops_per_gpu_megatron_eq3":
        return megatron_eq3_flops(model, run["global_batch"]) / (iteration_s * run["gpus"]) / 1e12
    if run["metric"] == "samples_per_gpu_per_s":
        return run["global_batch"] / (iteration_s * run["gpus"])
    if run["metric"] == "iteration_time_s":
        return iteration_s
    fail(f"run {run['id']}: unknown metric '{run['metric']}'")


def throughput_error(run, value):
    """The prediction's error as throughput (+: predicted faster), whatever the metric: a time's is inverted."""
    if run["metric"] == "iteration_time_s":
        return run["published"] / value - 1
    return value / run["published"] - 1


UNITS = {"tflops_per_gpu_megatron_eq3": "TFLOP/s", "samples_per_gpu_per_s": "samples/s/GPU", "iteration_time_s": "s"}


def simulate(ppsim, args, run_id):
    done = subprocess.run([ppsim, "simulate", *args, "--json"], capture_output=True, text=True)
    if done.returncode != 0:
        fail(f"run {run_id}: ppsim simulate {' '.join(args)} failed: {done.stderr.strip()}")
    return json.loads(done.stdout)


def predict_all(ppsim, runs):
    """Each run's ppsim arguments and summary, two simulations at a time."""
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        summaries = list(pool.map(lambda run: simulate(ppsim, run["args"], run["id"]), runs))
    return {run["id"]: {"args": list(run["args"]), "summary": summary} for run, summary in zip(runs, summaries)}


@functools.lru_cache(maxsize=None)
def model_file(path):
    with open(path) as f:
        return json.load(f)


def model_of(run):
    """The run's model file, read once however many runs and tables ask for it."""
    return model_file(run["args"][run["args"].index("--model") + 1])


def schedule_ranking(group_runs, values):
    return " > ".join(r["schedule_label"] for r in sorted(group_runs, key=lambda r: -values[r["id"]]))


def device_of(run):
    args = run["args"]
    return args[args.index("--gpu") + 1] if "--gpu" in args else "h100"


def row_line(run, results, predicted, time_errors, memory_errors):
    summary = results[run["id"]]["summary"]
    value = predicted_metric(run, model_of(run), summary["iteration_time_s"])
    predicted[run["id"]] = value
    error = throughput_error(run, value)
    time_errors.append(abs(error))
    memory_cell, memory_error_cell = "", ""
    if "published_memory_gib" in run:
        peak = max(r["peak_memory_bytes"] for r in summary["ranks"]) / GIB
        memory_error = peak / run["published_memory_gib"] - 1
        memory_errors.append(abs(memory_error))
        memory_cell = f"{run['published_memory_gib']} / {peak:.1f}"
        memory_error_cell = f"{100 * memory_error:+.1f} % (±{100 * run['memory_tolerance']:.0f} %)"
    unit = UNITS[run["metric"]]
    return (f"| {run['id']} ({run['row']}) | {run['published']:g} {unit} | {value:.3g} | {100 * error:+.1f} % (±{100 * run['time_tolerance']:.0f} %) | "
            f"{memory_cell} | {memory_error_cell} | `{' '.join(results[run['id']]['args'])}` |")


def stats(errors):
    return f"mean |error| {100 * sum(errors) / len(errors):.1f} %, max {100 * max(errors):.1f} %"


def fit_name(run):
    """What a fitted run is named by in the summaries: its model family, or its source."""
    return run.get("family", run["source"])


MICRO_BATCH_BANDS = [(1, 1), (2, 16), (17, 63), (64, None)]


def micro_batch_table(data, predicted):
    """The held-out dense runs of the families (the H100 and H200 ones) by micro-batches a pipeline a step: the signed
    mean shows where a step's fixed part, which few micro-batches leave exposed, is mispriced (docs/VALIDATION.md).
    Mixtures of experts are left out: their all-to-all misses are another matter."""
    by_band = {band: [] for band in MICRO_BATCH_BANDS}
    for run in data["runs"]:
        if "family" not in run or run.get("fitted") or "--micro-batches" not in run["args"]:
            continue
        if model_of(run).get("num_experts", 0) > 0:
            continue
        m = int(run["args"][run["args"].index("--micro-batches") + 1])
        for low, high in MICRO_BATCH_BANDS:
            if m >= low and (high is None or m <= high):
                by_band[(low, high)].append(throughput_error(run, predicted[run["id"]]))
    lines = ["", "| held out, dense, micro-batches a pipeline | runs | mean error (+: predicted fast) | mean \\|error\\| | max \\|error\\| |",
             "|---|---|---|---|---|"]
    for (low, high), errors in by_band.items():
        if not errors:
            continue
        label = str(low) if low == high else f"{low}-{high}" if high else f"{low} and more"
        magnitudes = [abs(e) for e in errors]
        lines.append(f"| {label} | {len(errors)} | {100 * sum(errors) / len(errors):+.1f} % | "
                     f"{100 * sum(magnitudes) / len(magnitudes):.1f} % | {100 * max(magnitudes):.1f} % |")
    return lines


def table(data, results):
    """For each device (in the file's order), the runs held out of its preset's fit, then the runs the preset was
    fitted on, each with its summary ("A100, held out: N runs, ...", "H100, fitted on (nemotron4-15b): ..."); then
    the summaries over everything (which tests/sim/test_validation.cpp checks)."""
    heading = ["| run | published | predicted | error (tolerance) | memory published / predicted (GiB) | error (tolerance) "
               "| command (`ppsim simulate ... --json`) |",
               "|---|---|---|---|---|---|---|"]
    devices = list(dict.fromkeys(device_of(r) for r in data["runs"]))
    sections = []
    for device in devices:
        sections.append((f"{device.upper()}, held out", lambda r, d=device: device_of(r) == d and not r.get("fitted")))
        sections.append((f"{device.upper()}, fitted on", lambda r, d=device: device_of(r) == d and r.get("fitted")))
    lines, time_errors, memory_errors, predicted = [], [], [], {}
    section_errors = {}
    for title, member in sections:
        runs = [r for r in data["runs"] if member(r)]
        if not runs:
            continue
        if title.endswith(", fitted on"):
            names = list(dict.fromkeys(fit_name(r) for r in runs))
            title = f"{title} ({', '.join(names)})"
        lines += [f"**{title}**", ""] + heading
        errors = []
        for run in runs:
            lines.append(row_line(run, results, predicted, errors, memory_errors))
        time_errors += errors
        section_errors[title] = errors
        lines += ["", f"{title}: {len(errors)} runs, {stats(errors)}.", ""]
    lines.append(f"Throughput over {len(time_errors)} runs: mean |error| {100 * sum(time_errors) / len(time_errors):.1f} %, "
                 f"max {100 * max(time_errors):.1f} %.")
    if memory_errors:
        lines.append(f"Peak memory over {len(memory_errors)} runs: mean |error| "
                     f"{100 * sum(memory_errors) / len(memory_errors):.1f} %, max {100 * max(memory_errors):.1f} %.")
    for source in data["sources"]:
        source_errors = [abs(throughput_error(r, predicted[r["id"]])) for r in data["runs"] if r["source"] == source]
        lines.append(f"{source}: {len(source_errors)} runs, {stats(source_errors)}.")
    families = {}
    for run in data["runs"]:
        if "family" in run:
            families.setdefault((run["family"], "fitted" if run.get("fitted") else "held out"), []).append(
                abs(throughput_error(run, predicted[run["id"]])))
    if families:
        lines += ["", "| H100 and H200 family | runs | mean \\|error\\| | max |", "|---|---|---|---|"]
        for (family, role), errors in sorted(families.items()):
            lines.append(f"| {family} ({role}) | {len(errors)} | {100 * sum(errors) / len(errors):.1f} % | {100 * max(errors):.1f} % |")
    lines += micro_batch_table(data, predicted)
    groups = {}
    for run in data["runs"]:
        if "ranking_group" in run and "ranking_excluded" not in run:
            groups.setdefault(run["ranking_group"], []).append(run)
    if groups:
        lines += ["", "| setting | measured ranking | predicted ranking | same |", "|---|---|---|---|"]
        published = {r["id"]: r["published"] for r in data["runs"]}
        for group, group_runs in groups.items():
            measured, ours = schedule_ranking(group_runs, published), schedule_ranking(group_runs, predicted)
            lines.append(f"| {group} | {measured} | {ours} | {'yes' if measured == ours else 'NO'} |")
    return "\n".join(lines) + "\n"


def set_tolerances(path, data, results):
    """Each run's tolerances become its current errors rounded up to a whole percent, plus one point."""
    def band(error):
        return (math.ceil(abs(error) * 100) + 1) / 100
    for run in data["runs"]:
        summary = results[run["id"]]["summary"]
        run["time_tolerance"] = band(throughput_error(run, predicted_metric(run, model_of(run), summary["iteration_time_s"])))
        if "published_memory_gib" in run:
            peak = max(r["peak_memory_bytes"] for r in summary["ranks"]) / GIB
            run["memory_tolerance"] = band(peak / run["published_memory_gib"] - 1)
    write_atomically(path, json.dumps(data, indent=1) + "\n")


def write_atomically(path, text):
    fd, temp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".validation-table-")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(temp, path)


def replace_between_markers(path, text):
    with open(path) as f:
        doc = f.read()
    if BEGIN not in doc or END not in doc:
        fail(f"--update {path}: the doc lacks the lines {BEGIN} and {END}")
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    write_atomically(path, head + BEGIN + "\n" + text + END + tail)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ppsim", default="build/ci/sim/ppsim")
    parser.add_argument("--data", default=DATA)
    parser.add_argument("--update", metavar="DOC", help="replace the table in DOC instead of printing it")
    parser.add_argument("--set-tolerances", action="store_true",
                        help="rewrite the data file's tolerances to the current errors (after a deliberate model change)")
    options = parser.parse_args()
    if not os.access(options.ppsim, os.X_OK):
        fail(f"--ppsim {options.ppsim}: not an executable (build the ppsim target first)")
    with open(options.data) as f:
        data = json.load(f)
    results = predict_all(options.ppsim, data["runs"])
    if options.set_tolerances:
        set_tolerances(options.data, data, results)
    text = table(data, results)
    if options.update:
        replace_between_markers(options.update, text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
