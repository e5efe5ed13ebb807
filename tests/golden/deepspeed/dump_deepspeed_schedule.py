#!/usr/bin/env python3
"""Writes the golden listings of DeepSpeed's pipeline schedules, each produced by a release's
own deepspeed/runtime/pipe/schedule.py, read straight from the release's sdist (no torch, no
install: the module only imports call_to_str, stubbed here).

usage:
  dump_deepspeed_schedule.py write OUTPUT_DIR SDIST...
      one folder per release, OUTPUT_DIR/<version>/deepspeed-train.txt and
      deepspeed-inference.txt, each holding every case p = 1..8, m = 1..12
  dump_deepspeed_schedule.py compare SDIST...
      the releases (oldest first) whose TrainSchedule or InferenceSchedule listings differ from
      the release before, with how many cases differ and the first difference; and the
      releases whose schedule.py gained or lost a class

SDIST is a deepspeed-<version>.tar.gz as `pip download --no-deps --no-binary :all:` saves it.
A listing file holds, for each case, a header line and one line per (stage, step):
    ## p=<stages> m=<micro-batches> buffers=<num_pipe_buffers of stage 0>,<of stage 1>,...
    s<stage> t<step>: Op(buffer) Op(buffer) ... ReduceGrads OptimizerStep
An empty step is written with nothing after the colon.
"""
import os
import re
import sys
import tarfile
import types

STAGES = range(1, 9)
MICRO_BATCHES = range(1, 13)
KINDS = {"deepspeed-train": "TrainSchedule", "deepspeed-inference": "InferenceSchedule"}


def version_of(sdist):
    match = re.fullmatch(r"deepspeed-(\d+(?:\.\d+)*)\.tar\.gz", os.path.basename(sdist))
    if not match:
        sys.exit(f"{sdist}: not a deepspeed-<version>.tar.gz")
    return match.group(1)


def version_key(version):
    return tuple(int(part) for part in version.split("."))


def schedule_source(sdist):
    with tarfile.open(sdist) as tar:
        names = [n for n in tar.getnames() if n.endswith("deepspeed/runtime/pipe/schedule.py")]
        if len(names) != 1:
            sys.exit(f"{sdist}: expected one deepspeed/runtime/pipe/schedule.py, found {len(names)}")
        return tar.extractfile(names[0]).read().decode()


def load_schedule_module(source, version):
    # schedule.py does `from ..utils import call_to_str`; give it a tiny package to sit in.
    package = types.ModuleType("dspipe")
    package.__path__ = []
    sys.modules["dspipe"] = package
    utils = types.ModuleType("dspipe.utils")
    utils.call_to_str = lambda name, *args, **kwargs: name
    sys.modules["dspipe.utils"] = utils
    sys.modules["dspipe.pipe"] = types.ModuleType("dspipe.pipe")
    module = types.ModuleType(f"dspipe.pipe.schedule_{version.replace('.', '_')}")
    module.__package__ = "dspipe.pipe"
    exec(compile(source, f"deepspeed-{version}/deepspeed/runtime/pipe/schedule.py", "exec"), module.__dict__)
    return module


def render(instruction):
    buffer_id = getattr(instruction, "buffer_id", None)
    name = type(instruction).__name__
    return name if buffer_id is None else f"{name}({buffer_id})"


def case_lines(schedule_class, stages, micro_batches):
    """The header and step lines of one case."""
    buffers, steps = [], []
    for stage in range(stages):
        schedule = schedule_class(micro_batches=micro_batches, stages=stages, stage_id=stage)
        buffers.append(schedule.num_pipe_buffers())
        for step, cmds in enumerate(schedule):
            steps.append(f"s{stage} t{step}: " + " ".join(render(c) for c in cmds))
    header = f"## p={stages} m={micro_batches} buffers=" + ",".join(str(b) for b in buffers)
    return [header] + [line.rstrip() for line in steps]


def listings(module):
    """{(kind, p, m): lines} for every kind and case."""
    return {(kind, p, m): case_lines(getattr(module, class_name), p, m)
            for kind, class_name in KINDS.items() for p in STAGES for m in MICRO_BATCHES}


def schedule_classes(module):
    return sorted(name for name, value in vars(module).items()
                  if isinstance(value, type) and name.endswith("Schedule"))


def releases(sdists):
    """(version, module) for each sdist, oldest first."""
    by_version = sorted(((version_of(s), s) for s in sdists), key=lambda vs: version_key(vs[0]))
    for version, sdist in by_version:
        yield version, load_schedule_module(schedule_source(sdist), version)


def write(output_dir, sdists):
    script = os.path.basename(__file__)
    for version, module in releases(sdists):
        folder = os.path.join(output_dir, version)
        os.makedirs(folder, exist_ok=True)
        cases = listings(module)
        for kind, class_name in KINDS.items():
            lines = [f"# {kind}: DeepSpeed {version}'s {class_name}, p = 1..8, m = 1..12, via {script}"]
            for p in STAGES:
                for m in MICRO_BATCHES:
                    lines += cases[(kind, p, m)]
            with open(os.path.join(folder, f"{kind}.txt"), "w") as out:
                out.write("\n".join(lines) + "\n")
        print(f"{version}: {folder}")


def first_difference(before, after):
    for i, (a, b) in enumerate(zip(before, after)):
        if a != b:
            return f"line {i}: '{a}' -> '{b}'"
    return f"{len(before)} -> {len(after)} lines"


def compare(sdists):
    previous_version, previous, previous_classes = None, None, None
    for version, module in releases(sdists):
        cases, classes = listings(module), schedule_classes(module)
        if previous is None:
            print(f"{version}: first release compared; classes {', '.join(classes)}")
        else:
            for kind in KINDS:
                changed = [key for key in cases if key[0] == kind and cases[key] != previous[key]]
                if changed:
                    total = len(STAGES) * len(MICRO_BATCHES)
                    _, p, m = changed[0]
                    print(f"{version}: {kind} differs from {previous_version} in {len(changed)} of {total} cases; "
                          f"first p={p} m={m}, {first_difference(previous[changed[0]], cases[changed[0]])}")
            if classes != previous_classes:
                print(f"{version}: schedule classes {', '.join(previous_classes)} -> {', '.join(classes)}")
        previous_version, previous, previous_classes = version, cases, classes
    print(f"{previous_version}: last release compared")


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "write":
        write(sys.argv[2], sys.argv[3:])
    elif len(sys.argv) >= 3 and sys.argv[1] == "compare":
        compare(sys.argv[2:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
