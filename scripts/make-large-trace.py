#!/usr/bin/env python3
"""Writes torch.profiler-style traces of a pipeline-parallel run, one file per rank, of a given
size: the test inputs of the large-trace benchmarks (docs/BENCHMARKS.md, "Large traces").

Each rank runs one stage of a GPipe-like schedule (every forward, then every backward) for a
number of profiled steps. What torch.profiler writes for such a run is there: its header
(schemaVersion, distributedInfo), ProfilerStep#N spans, `PP:` action spans of
torch.distributed.pipelining (what traces/src/torch_profiler_actions.cpp parses), CPU operators
(aten::..., with record_shapes' args), CUDA runtime launches, GPU kernels with long templated
names and kineto's args (grid, block, stream, correlation), ac2g flows tying launches to
kernels, NCCL send/receive calls and kernels, and `[memory]` samples. The size is reached by
the number of operators each action runs. The output is deterministic for a seed.

    scripts/make-large-trace.py --ranks 2 --size-mb 500 --out-dir /tmp/big-traces [--gzip]
"""
import argparse
import gzip
import os
import random
import sys
import tempfile

BASE_US = 4661107204919.336
PID_BASE = 6647
GPU_PID = 0
STREAM = 7

KERNELS = [
    "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_128x128_32x4_tn_align8>"
    "(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_128x128_32x4_tn_align8::Params)",
    "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<"
    "at::native::CUDAFunctor_add<c10::BFloat16> >(at::TensorIteratorBase&, "
    "at::native::CUDAFunctor_add<c10::BFloat16> const&)::{lambda(int)#1}>(int, "
    "at::native::gpu_kernel_impl_nocast<at::native::CUDAFunctor_add<c10::BFloat16> >"
    "(at::TensorIteratorBase&, at::native::CUDAFunctor_add<c10::BFloat16> const&)::{lambda(int)#1})",
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>"
    "(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, "
    "c10::BFloat16*)",
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl("
    "at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::"
    "{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, "
    "at::detail::Array<char*, 2> >(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
    "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::"
    "{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2>)",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
]
OPERATORS = [
    ("aten::linear", [[8, 1024, 4096], [4096, 4096], [4096]], ["c10::BFloat16", "c10::BFloat16", "c10::BFloat16"]),
    ("aten::add", [[8, 1024, 4096], [8, 1024, 4096], []], ["c10::BFloat16", "c10::BFloat16", "Scalar"]),
    ("aten::layer_norm", [[8, 1024, 4096], [], [4096], [4096], [], []],
     ["c10::BFloat16", "ScalarList", "c10::BFloat16", "c10::BFloat16", "Scalar", "Scalar"]),
    ("aten::gelu", [[8, 1024, 16384], []], ["c10::BFloat16", "Scalar"]),
    ("aten::mm", [[8192, 4096], [4096, 16384]], ["c10::BFloat16", "c10::BFloat16"]),
]


def dims_text(dims):
    return "[" + ", ".join("[" + ", ".join(str(d) for d in shape) + "]" for shape in dims) + "]"


def types_text(types):
    return "[" + ", ".join('"' + t + '"' for t in types) + "]"


class RankWriter:
    """One rank's events, written as torch.profiler writes them (one event per line)."""

    def __init__(self, out, rank, ranks, rng):
        self.out = out
        self.rank = rank
        self.ranks = ranks
        self.rng = rng
        self.pid = PID_BASE + rank
        self.tid = self.pid
        self.correlation = 1000
        self.external = 1
        self.gpu_free_us = 0.0
        self.allocated = 1 << 30
        self.first = True

    def emit(self, text):
        self.out.write(text if self.first else ",\n" + text)
        self.first = False

    def header(self):
        self.out.write(
            '{\n  "schemaVersion": 1,\n  "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", '
            '"totalGlobalMem": 85045870592, "computeMajor": 9, "computeMinor": 0}],\n'
            f'  "distributedInfo": {{"backend": "nccl", "rank": {self.rank}, "world_size": {self.ranks}}},\n'
            '  "host_name": "bench-host",\n  "displayTimeUnit": "ms",\n'
            '  "baseTimeNanoseconds": 1790857026000000000,\n  "traceEvents": [\n')
        self.emit(f'{{"ph": "M", "name": "process_name", "pid": {self.pid}, "tid": 0, "args": {{"name": "python3"}}}}')
        self.emit(f'{{"ph": "M", "name": "thread_name", "pid": {self.pid}, "tid": {self.tid}, '
                  f'"args": {{"name": "thread {self.tid} (python3)"}}}}')
        self.emit(f'{{"ph": "M", "name": "process_name", "pid": {GPU_PID}, "tid": 0, "args": {{"name": "GPU 0"}}}}')

    def footer(self):
        self.out.write('\n  ],\n  "traceName": "rank%d.pt.trace.json"\n}\n' % self.rank)

    def span(self, cat, name, ts, dur, args=""):
        self.emit(f'{{"ph": "X", "cat": "{cat}", "name": "{name}", "pid": {self.pid}, "tid": {self.tid}, '
                  f'"ts": {ts:.3f}, "dur": {dur:.3f}, "args": {{"External id": {self.external}{args}}}}}')
        self.external += 1

    def memory(self, ts, delta):
        self.allocated = max(0, self.allocated + delta)
        self.emit(f'{{"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": {self.pid}, '
                  f'"tid": {self.tid}, "ts": {ts:.3f}, "args": {{"Total Reserved": {self.allocated * 2}, '
                  f'"Total Allocated": {self.allocated}, "Bytes": {delta}, "Device Id": 0, "Device Type": 1}}}}')

    def kernel_launch(self, ts, name, kernel_us):
        """A cudaLaunchKernel at `ts`, its kernel on the stream, and the ac2g flow between them."""
        c = self.correlation
        self.correlation += 1
        self.emit(f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": {self.pid}, '
                  f'"tid": {self.tid}, "ts": {ts:.3f}, "dur": 4.112, "args": {{"cbid": 211, "correlation": {c}, '
                  f'"External id": {self.external}}}}}')
        start = max(ts + 6.0, self.gpu_free_us)
        self.gpu_free_us = start + kernel_us
        grid = self.rng.choice((132, 264, 1056, 8192))
        self.emit(f'{{"ph": "X", "cat": "kernel", "name": "{name}", "pid": {GPU_PID}, "tid": {STREAM}, '
                  f'"ts": {start:.3f}, "dur": {kernel_us:.3f}, "args": {{"External id": {self.external}, '
                  f'"queued": 0, "device": 0, "context": 1, "stream": {STREAM}, "correlation": {c}, '
                  f'"registers per thread": 168, "shared memory": 213248, "blocks per SM": {grid / 132:.6f}, '
                  f'"warps per SM": {grid / 33:.6f}, "grid": [{grid}, 1, 1], "block": [384, 1, 1], '
                  f'"est. achieved occupancy %": 0}}}}')
        self.emit(f'{{"ph": "s", "id": {c}, "pid": {self.pid}, "tid": {self.tid}, "ts": {ts:.3f}, '
                  f'"cat": "ac2g", "name": "ac2g"}}')
        self.emit(f'{{"ph": "f", "id": {c}, "pid": {GPU_PID}, "tid": {STREAM}, "ts": {start:.3f}, '
                  f'"cat": "ac2g", "name": "ac2g", "bp": "e"}}')

    def operators(self, ts, count):
        """`count` CPU operators from `ts` on, each launching one kernel; returns the end."""
        for _ in range(count):
            name, dims, types = self.rng.choice(OPERATORS)
            dur = 20.0 + self.rng.random() * 30.0
            strides = "[" + ", ".join("[]" for _ in dims) + "]"
            self.span("cpu_op", name, ts, dur,
                      f', "Record function id": 0, "Concrete Inputs": {strides}, "Input type": {types_text(types)}, '
                      f'"Input Strides": {strides}, "Input Dims": {dims_text(dims)}, "Ev Idx": {self.external}')
            self.kernel_launch(ts + 5.0, self.rng.choice(KERNELS), 10.0 + self.rng.random() * 60.0)
            if self.rng.random() < 0.1:
                self.memory(ts + 2.0, self.rng.choice((1, -1)) * (1 << 20) * self.rng.randint(1, 64))
            ts += dur + 2.0
        return ts

    def action(self, name, ts, ops):
        end = self.operators(ts + 3.0, ops)
        self.span("user_annotation", "PP:" + name, ts, end + 3.0 - ts)
        return end + 5.0

    def transfer(self, name, ts, call):
        dims = "[[8, 1024, 4096]]"
        self.span("user_annotation", "PP:" + name, ts, 40.0)
        self.span("user_annotation", call, ts + 5.0, 30.0,
                  f', "Input type": ["c10::BFloat16"], "Input Dims": {dims}')
        self.kernel_launch(ts + 8.0, "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", 80.0)
        return ts + 45.0

    def step(self, number, ts, micro_batches, ops):
        """One ProfilerStep#N: this rank's stage forwards every micro-batch, then backwards them."""
        start = ts
        stage, last = self.rank, self.ranks - 1
        for mb in range(micro_batches):
            if stage > 0:
                ts = self.transfer(f"{stage}RECV_F{mb}", ts, "nccl:recv")
            ts = self.action(f"{stage}F{mb}", ts, ops)
            if stage < last:
                ts = self.transfer(f"{stage}SEND_F{mb}", ts, "nccl:send")
        for mb in range(micro_batches):
            if stage < last:
                ts = self.transfer(f"{stage}RECV_B{mb}", ts, "nccl:recv")
            ts = self.action(f"{stage}B{mb}", ts, 2 * ops)
            if stage > 0:
                ts = self.transfer(f"{stage}SEND_B{mb}", ts, "nccl:send")
        ts = self.operators(ts, 4)  # the optimizer's step
        self.span("user_annotation", f"ProfilerStep#{number}", start, ts - start)
        return ts + 50.0


def operators_per_action(size_bytes, steps, micro_batches):
    # One operator (its span, launch, kernel, flow ends and a tenth of a memory sample) is
    # about 1.5 KB of JSON; a step runs 3 * micro_batches * ops of them.
    return max(1, round(size_bytes / (1500 * steps * 3 * micro_batches)))


def write_rank(path, rank, args):
    rng = random.Random(args.seed * 1000 + rank)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".make-large-trace.", dir=folder)
    os.close(fd)
    try:
        opener = (lambda p: gzip.open(p, "wt", compresslevel=1, encoding="utf-8")) if args.gzip else \
            (lambda p: open(p, "w", encoding="utf-8", buffering=1 << 20))
        with opener(tmp) as out:
            w = RankWriter(out, rank, args.ranks, rng)
            w.header()
            ops = operators_per_action(args.size_mb * 1e6, args.steps, args.micro_batches)
            ts = BASE_US + 100.0 + rank * 3.0
            for n in range(args.steps):
                ts = w.step(n, ts, args.micro_batches, ops)
            w.footer()
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=2, help="files to write, one per rank (default 2)")
    p.add_argument("--size-mb", type=float, default=10, help="about this many MB of JSON per rank (default 10)")
    p.add_argument("--steps", type=int, default=2, help="ProfilerStep#N spans per rank (default 2)")
    p.add_argument("--micro-batches", type=int, default=8, help="micro-batches per step (default 8)")
    p.add_argument("--seed", type=int, default=1, help="random seed: one seed, one output (default 1)")
    p.add_argument("--gzip", action="store_true", help="write rankN.pt.trace.json.gz (gzip) instead of .json")
    p.add_argument("--out-dir", required=True, help="the folder to write into (made if missing)")
    args = p.parse_args()
    for name, value in (("--ranks", args.ranks), ("--steps", args.steps), ("--micro-batches", args.micro_batches)):
        if value < 1:
            sys.exit(f"make-large-trace.py: {name} must be at least 1 (got {value})")
    if not args.size_mb > 0:
        sys.exit(f"make-large-trace.py: --size-mb must be positive (got {args.size_mb})")
    os.makedirs(args.out_dir, exist_ok=True)
    for rank in range(args.ranks):
        name = f"rank{rank}.pt.trace.json" + (".gz" if args.gzip else "")
        path = os.path.join(args.out_dir, name)
        write_rank(path, rank, args)
        print(f"{path}: {os.path.getsize(path) / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
