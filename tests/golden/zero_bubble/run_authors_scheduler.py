#!/usr/bin/env python3
"""Runs the Zero Bubble authors' automatic schedulers over the settings zb-auto is compared on,
and writes each setting's order: the greedy search their runtime uses for ZB-1p / ZB-2p
(`initial_solution` in megatron/core/pipeline_parallel/zerobubble/scheduler/zb.py of
sail-sg/zero-bubble-pipeline-parallelism), and their V-shape schedulers, ZB-V (zbv.py, built
from the costs) and V-Half / V-Min (zbv_greedy.py, from fixed patterns). Their code is read from
the repository given on the command line at run time; nothing of it is kept here.

usage:
  run_authors_scheduler.py REPO OUTPUT_DIR
      REPO: a checkout of the repository, or its git directory (files are then read with
      `git show HEAD:path`). Needs torch (zb.py imports it) and nothing else of Megatron.
      Writes OUTPUT_DIR/authors-zb.txt and OUTPUT_DIR/authors-v.txt.

authors-zb.txt holds, per setting:
    ## p=P m=M f=F b=B w=W c=C limit=N      (N: micro-batches of activations per stage)
    flags: <allow_bubble_before_first_b> <prioritize_b> <no_bubble_greedy>   (the winning setting, 0/1)
    authors_time: T                          (their best_time: the longest stage's span)
    r<stage>: F<mb> B<mb> W<mb> ...          (each stage's order, by completion time, as their
                                              create_scheduled_nodes sorts it)
or, when their search raises, the header and `refused: <message>`.
Memory per micro-batch: F +2, B -1, W -1 (zb-auto's defaults), each stage limited to 2N.

authors-v.txt holds, per setting:
    ## scheduler=S p=P m=M f=F b=B w=W c=C   (S: zbv, v-half, v-min; costs per chunk)
    r<rank>: F<chunk>.<mb> B<chunk>.<mb> W<chunk>.<mb> ...   (chunk 0: stage rank, 1: stage 2p-1-rank)
or `refused: <message>`. ZB-V runs with its default limit (2p chunk activations, 1F1B's memory);
the V-Half and V-Min patterns take no costs.
"""
import contextlib
import io
import os
import subprocess
import sys
import types

STAGES = (2, 3, 4, 6, 8, 12, 16)
V_STAGES = (2, 3, 4, 6, 8)
COSTS = ((1.0, 1.0, 1.0), (1.0, 1.5, 0.5), (1.0, 2.0, 1.0))
COMMS = (0.0, 0.1)
SCHEDULER = "megatron/core/pipeline_parallel/zerobubble/scheduler"
F_MEM, B_MEM, W_MEM = 2.0, -1.0, -1.0


def settings():
    for p in STAGES:
        for m in (p, 2 * p, 4 * p):
            for f, b, w in COSTS:
                for c in COMMS:
                    for limit in (p, 2 * p):
                        yield p, m, f, b, w, c, limit


def read_source(repo, path):
    if os.path.isfile(os.path.join(repo, path)):
        with open(os.path.join(repo, path)) as source:
            return source.read()
    return subprocess.run(["git", "--git-dir", repo, "show", f"HEAD:{path}"], check=True, capture_output=True,
                          text=True).stdout


def load_scheduler(repo):
    """zb.py and the graph.py it imports, as modules of their own (Megatron's package is not
    imported: nothing else of it is needed)."""
    graph = types.ModuleType("megatron.core.pipeline_parallel.zerobubble.scheduler.graph")
    exec(compile(read_source(repo, f"{SCHEDULER}/graph.py"), "graph.py", "exec"), graph.__dict__)
    for name in ("megatron", "megatron.core", "megatron.core.pipeline_parallel",
                 "megatron.core.pipeline_parallel.zerobubble", "megatron.core.pipeline_parallel.zerobubble.scheduler"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules[graph.__name__] = graph
    if "pulp" not in sys.modules:  # used only to read back solver values; the greedy needs none
        pulp = types.ModuleType("pulp")
        pulp.value = lambda x: x
        sys.modules["pulp"] = pulp
    zb = types.ModuleType("zb")
    exec(compile(read_source(repo, f"{SCHEDULER}/zb.py"), "zb.py", "exec"), zb.__dict__)
    return zb


def run_setting(zb, p, m, f, b, w, c, limit):
    config = zb.GraphConfig(
        mem_f=[F_MEM] * p, mem_b=[B_MEM] * p, mem_w=[W_MEM] * p, max_mem=[limit * F_MEM] * p,
        cost_f=[f] * p, cost_b=[b] * p, cost_w=[w] * p, cost_comm=c, print_scaling=1, n_stages=p, n_micro=m)
    graph = zb.Graph.build_graph(p, m, config)
    best_time, _, complete_time = zb.initial_solution(graph, print_result=False)
    # Which of the eight settings initial_solution kept: the one that gives these times.
    flags = None
    for allow in (True, False):
        for prioritize in (True, False):
            for greedy in (True, False):
                _, times, _ = graph.manual_order(allow_bubble_before_first_b=allow, prioritize_b=prioritize,
                                                 no_bubble_greedy=greedy)
                if flags is None and times == complete_time:
                    flags = (allow, prioritize, greedy)
    lines = [" ".join(str(int(x)) for x in flags), f"{best_time:.12g}"]
    for stage in range(p):
        nodes = [(kind, mb) for kind in range(3) for mb in range(m)]
        nodes.sort(key=lambda node: complete_time[graph.get_id(node[0], stage, node[1])])
        lines.append(f"r{stage}: " + " ".join("FBW"[kind] + str(mb) for kind, mb in nodes))
    return lines


def v_settings():
    for p in V_STAGES:
        for m in (2 * p, 4 * p):
            for f, b, w in COSTS:
                for c in COMMS:
                    for scheduler in ("zbv", "v-half", "v-min"):
                        yield scheduler, p, m, f, b, w, c


def load_v_schedulers(repo, zb):
    modules = {}
    for name in ("zbv", "zbv_greedy"):
        module = types.ModuleType(name)
        exec(compile(read_source(repo, f"{SCHEDULER}/{name}.py"), f"{name}.py", "exec"), module.__dict__)
        modules[name] = module
    return modules


def run_v_setting(zb, v_modules, scheduler, p, m, f, b, w, c):
    config = zb.GraphConfig(
        mem_f=[F_MEM] * p, mem_b=[B_MEM] * p, mem_w=[W_MEM] * p, max_mem=None, cost_f=[f] * p, cost_b=[b] * p,
        cost_w=[w] * p, cost_comm=c, print_scaling=1, max_chunks=2, n_stages=p, n_micro=m)
    if scheduler == "zbv":
        graph = v_modules["zbv"].PipelineGraph(p, m, f, b, w, c, f_mem=F_MEM, b_mem=B_MEM, w_mem=W_MEM, max_mem=None)
    else:
        mem_config = {"v-half": "half", "v-min": "min"}[scheduler]
        graph = v_modules["zbv_greedy"].PipelineGraph(p, m, mem_config, f, b, w, c)
    with contextlib.redirect_stdout(io.StringIO()):  # each prints a line of its own
        local_order = graph.create_schedule(config)
    return [f"r{rank}: " + " ".join(f"{node.type.value}{node.chunk}.{node.microbatch}" for node in nodes)
            for rank, nodes in enumerate(local_order)]


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    zb = load_scheduler(argv[1])
    os.makedirs(argv[2], exist_ok=True)
    out = ["# the Zero Bubble authors' greedy scheduler (zb.py initial_solution), run_authors_scheduler.py"]
    for p, m, f, b, w, c, limit in settings():
        out.append(f"## p={p} m={m} f={f:g} b={b:g} w={w:g} c={c:g} limit={limit}")
        try:
            flags, time, *orders = run_setting(zb, p, m, f, b, w, c, limit)
        except ValueError as error:
            out.append(f"refused: {error}")
            continue
        out += [f"flags: {flags}", f"authors_time: {time}"] + orders
    with open(os.path.join(argv[2], "authors-zb.txt"), "w") as file:
        file.write("\n".join(out) + "\n")

    v_modules = load_v_schedulers(argv[1], zb)
    out = ["# the Zero Bubble authors' V schedules (zbv.py, zbv_greedy.py create_schedule), run_authors_scheduler.py"]
    for scheduler, p, m, f, b, w, c in v_settings():
        out.append(f"## scheduler={scheduler} p={p} m={m} f={f:g} b={b:g} w={w:g} c={c:g}")
        try:
            out += run_v_setting(zb, v_modules, scheduler, p, m, f, b, w, c)
        except (AssertionError, ValueError, IndexError, KeyError) as error:
            out.append(f"refused: {type(error).__name__}: {' '.join(str(error).split())}")
    with open(os.path.join(argv[2], "authors-v.txt"), "w") as file:
        file.write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
