#!/usr/bin/env python3
"""Writes the golden listings of DeepSpeed's pipeline schedules, produced by DeepSpeed's own
deepspeed/runtime/pipe/schedule.py (no torch needed: the module only imports call_to_str).

usage: dump_deepspeed_schedule.py PATH/TO/deepspeed/runtime/pipe/schedule.py OUTPUT_DIR

One file per case, NAME_pP_mM.txt, one line per (stage, step):
    s<stage> t<step>: Op(buffer) Op(buffer) ... ReduceGrads OptimizerStep
An empty step is written with nothing after the colon.
"""
import importlib.util
import os
import sys
import types

CASES = {
    "deepspeed-train": [(1, 1), (1, 3), (2, 1), (2, 3), (3, 2), (4, 4), (4, 8), (5, 3), (8, 12)],
    "deepspeed-inference": [(1, 2), (2, 3), (3, 2), (4, 4), (5, 7)],
}


def load_schedule_module(path):
    # schedule.py does `from ..utils import call_to_str`; give it a tiny package to sit in.
    package = types.ModuleType("dspipe")
    package.__path__ = []
    sys.modules["dspipe"] = package
    utils = types.ModuleType("dspipe.utils")
    utils.call_to_str = lambda name, **kwargs: name
    sys.modules["dspipe.utils"] = utils
    spec = importlib.util.spec_from_file_location("dspipe.pipe.schedule", path)
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "dspipe.pipe"
    sys.modules["dspipe.pipe"] = types.ModuleType("dspipe.pipe")
    spec.loader.exec_module(module)
    return module


def render(instruction):
    buffer_id = getattr(instruction, "buffer_id", None)
    name = type(instruction).__name__
    return name if buffer_id is None else f"{name}({buffer_id})"


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    module = load_schedule_module(sys.argv[1])
    classes = {"deepspeed-train": module.TrainSchedule, "deepspeed-inference": module.InferenceSchedule}
    os.makedirs(sys.argv[2], exist_ok=True)
    for name, cases in CASES.items():
        for stages, micro_batches in cases:
            lines = [f"# {name} p={stages} m={micro_batches}, DeepSpeed schedule.py via {os.path.basename(__file__)}"]
            for stage in range(stages):
                schedule = classes[name](micro_batches=micro_batches, stages=stages, stage_id=stage)
                for step, cmds in enumerate(schedule):
                    lines.append(f"s{stage} t{step}: " + " ".join(render(c) for c in cmds))
            path = os.path.join(sys.argv[2], f"{name}_p{stages}_m{micro_batches}.txt")
            with open(path, "w") as out:
                out.write("\n".join(line.rstrip() for line in lines) + "\n")


if __name__ == "__main__":
    main()
