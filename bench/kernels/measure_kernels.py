#!/usr/bin/env python3
"""Measures, on the GPU at hand, the kernels the device presets price (sim/src/efficiency.cpp):
the matrix products of the published H100 runs' layers by shape (forward, input gradient and
weight gradient; BF16 and FP8), the fused attention kernels by sequence length (FlashAttention-2
and cuDNN through torch's scaled_dot_product_attention, causal, BF16), and element-wise work
(copies, norms, activations, the FP8 cast). Writes one JSON file that
`bench/kernels/compare-presets.py` sets beside the presets' figures (docs/MODEL.md).

    python3 bench/kernels/measure_kernels.py --out kernels-h100.json [--quick]

Each figure is the median of timed repeats (CUDA events around a batch of launches) after
warm-ups, on random data; the GPU's name, clocks and the torch/CUDA/cuDNN versions go with it.
"""
import argparse
import json
import math
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

# The layer shapes of the published H100 runs in tests/sim/data/published_runs.json: model
# (hidden, heads, kv_heads, ffn_hidden, gated MLP, vocabulary, sequence) with the tensor and
# context parallel sizes and micro-batch size those runs use. Tokens per product: micro-batch x
# sequence / CP (sequence parallelism gathers the sequence before the products).
MODELS = {
    "llama31-8b": dict(hidden=4096, heads=32, kv=8, ffn=14336, gated=True, vocab=128256, seq=8192,
                       configs=[(1, 2, 1)]),
    "llama31-70b": dict(hidden=8192, heads=64, kv=8, ffn=28672, gated=True, vocab=128512, seq=8192,
                        configs=[(4, 2, 1), (4, 1, 1)]),
    "llama31-405b": dict(hidden=16384, heads=128, kv=8, ffn=53248, gated=True, vocab=129024, seq=8192,
                         configs=[(8, 2, 1)]),
    "gpt3-175b": dict(hidden=12288, heads=96, kv=96, ffn=49152, gated=False, vocab=50688, seq=2048,
                      configs=[(4, 1, 1)]),
    "nemotron4-15b": dict(hidden=6144, heads=48, kv=8, ffn=24576, gated=False, vocab=256000, seq=4096,
                          configs=[(4, 1, 4)]),
    "nemotron4-340b": dict(hidden=18432, heads=96, kv=8, ffn=73728, gated=False, vocab=256000, seq=4096,
                           configs=[(8, 1, 1)]),
}


def time_cuda(fn, warmup=3, repeats=7, inner=None, budget_s=0.05):
    """Median seconds of one call of fn: `inner` calls between two CUDA events, `repeats` times."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    if inner is None:
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        once = max(time.perf_counter() - start, 1e-6)
        inner = max(1, min(50, int(budget_s / once)))
    samples = []
    for _ in range(repeats):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        samples.append(begin.elapsed_time(end) / 1e3 / inner)
    return statistics.median(samples)


def products(model):
    """(name, n, k) of a layer's forward products for one tensor-parallel rank, plus the head."""
    m = MODELS[model]
    head_dim = m["hidden"] // m["heads"]
    rows = []
    for tp, cp, mbs in m["configs"]:
        tokens = mbs * m["seq"] // cp
        qkv = (m["hidden"] + 2 * m["kv"] * head_dim) // tp
        fc1 = m["ffn"] * (2 if m["gated"] else 1) // tp
        for name, n, k in (("qkv", qkv, m["hidden"]), ("proj", m["hidden"], m["hidden"] // tp),
                           ("fc1", fc1, m["hidden"]), ("fc2", m["hidden"], m["ffn"] // tp),
                           ("head", m["vocab"] // tp, m["hidden"])):
            rows.append(dict(model=model, tp=tp, cp=cp, mbs=mbs, product=name, tokens=tokens, n=n, k=k))
    return rows


def gemm_rows(precision, fp8_ok):
    out = []
    seen = set()
    for model in MODELS:
        for p in products(model):
            # forward y = x W^T (m = tokens), input gradient dx = dy W (n and k swapped), weight
            # gradient dW = dy^T x (m = n, k = tokens).
            for role, (mm, nn, kk) in (("forward", (p["tokens"], p["n"], p["k"])),
                                       ("input_grad", (p["tokens"], p["k"], p["n"])),
                                       ("weight_grad", (p["n"], p["k"], p["tokens"]))):
                key = (mm, nn, kk)
                row = dict(p, role=role, m=mm, gemm_n=nn, gemm_k=kk, precision=precision)
                if key in seen:
                    row["duplicate"] = True
                seen.add(key)
                out.append(row)
    # The anchor the presets are set by, and a sweep of square sizes.
    for size in (1024, 2048, 4096, 8192, 16384):
        out.append(dict(model="square", product=f"{size}^3", role="forward", m=size, gemm_n=size, gemm_k=size,
                        precision=precision, tokens=size, n=size, k=size))
    if precision == "fp8" and not fp8_ok:
        return []
    return out


def run_gemm(row):
    m, n, k = row["m"], row["gemm_n"], row["gemm_k"]
    if row["precision"] == "bf16":
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        fn = lambda: F.linear(x, w)
    else:
        x = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        w = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
        one = torch.ones((), device="cuda")
        fn = lambda: torch._scaled_mm(x, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    seconds = time_cuda(fn)
    del x, w
    return dict(row, seconds=seconds, tflops=2.0 * m * n * k / seconds / 1e12)


def attention_flops(batch, heads, seq_q, seq_k, head_dim, causal):
    full = 4.0 * batch * heads * seq_q * seq_k * head_dim
    return full / 2 if causal else full


def run_attention(backend_name, seq, heads, kv_heads, head_dim, batch, label):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[backend_name]
    q = torch.randn(batch, heads, seq, head_dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(batch, kv_heads, seq, head_dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(batch, kv_heads, seq, head_dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    if kv_heads != heads:
        # Grouped-query attention: the keys and values repeated, as Transformer Engine's flash path
        # sees them (FLOPs are the same).
        k2 = k.detach().repeat_interleave(heads // kv_heads, dim=1).requires_grad_()
        v2 = v.detach().repeat_interleave(heads // kv_heads, dim=1).requires_grad_()
    else:
        k2, v2 = k, v
    grad = torch.randn(batch, heads, seq, head_dim, device="cuda", dtype=torch.bfloat16)
    row = dict(label=label, backend=backend_name, seq=seq, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
               batch=batch)
    try:
        with sdpa_kernel(backend):
            forward = lambda: F.scaled_dot_product_attention(q, k2, v2, is_causal=True)
            out = forward()

            # torch.autograd.grad returns the gradients without adding them into .grad: an
            # accumulation would be timed as part of the backward otherwise.
            def both():
                o = F.scaled_dot_product_attention(q, k2, v2, is_causal=True)
                torch.autograd.grad(o, (q, k2, v2), grad)

            t_forward = time_cuda(forward)
            t_both = time_cuda(both)
    except Exception as error:  # a backend without a kernel for this shape on this GPU
        return dict(row, error=str(error).splitlines()[0][:200])
    del out
    flops = attention_flops(batch, heads, seq, seq, head_dim, True)
    t_backward = max(t_both - t_forward, 1e-9)
    return dict(row, forward_s=t_forward, backward_s=t_backward, forward_tflops=flops / t_forward / 1e12,
                backward_tflops=2.5 * flops / t_backward / 1e12)


def run_elementwise(rows_, hidden):
    x = torch.randn(rows_, hidden, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(rows_, hidden, device="cuda", dtype=torch.bfloat16)
    weight = torch.ones(hidden, device="cuda", dtype=torch.bfloat16)
    bias = torch.zeros(hidden, device="cuda", dtype=torch.bfloat16)
    gate = torch.randn(rows_, 2 * hidden, device="cuda", dtype=torch.bfloat16)
    elem = x.numel() * 2  # bytes of one BF16 tensor of this shape
    # Bytes as the eager kernels move them: the unfused compositions (swiglu, dropout_add, amax,
    # cast_fp8) write and read their intermediates, which Transformer Engine's fused kernels do not.
    cases = [
        ("copy", lambda: x.clone(), 2 * elem),
        ("add", lambda: x + y, 3 * elem),
        ("layer_norm", lambda: F.layer_norm(x, (hidden,), weight, bias), 2 * elem),
        ("gelu", lambda: F.gelu(x, approximate="tanh"), 2 * elem),
        ("swiglu", lambda: F.silu(gate[:, :hidden]) * gate[:, hidden:], 5 * elem),
        ("dropout_add", lambda: F.dropout(x, 0.1, training=True) + y, 5 * elem + elem // 2),
        ("amax", lambda: x.abs().amax(), 3 * elem),
        ("cast_fp8", lambda: (x * 1.0).to(torch.float8_e4m3fn), 3 * elem + elem // 4),
    ]
    if hasattr(F, "rms_norm"):
        cases.append(("rms_norm", lambda: F.rms_norm(x, (hidden,), weight), 2 * elem))
    out = []
    for name, fn, nbytes in cases:
        try:
            seconds = time_cuda(fn)
        except Exception as error:
            out.append(dict(op=name, rows=rows_, hidden=hidden, error=str(error).splitlines()[0][:200]))
            continue
        out.append(dict(op=name, rows=rows_, hidden=hidden, bytes=nbytes, seconds=seconds,
                        gb_per_s=nbytes / seconds / 1e9))
    return out


def burst_figure():
    """The 8192^3 BF16 product as a short burst (the mean of ten after three warm-ups, torch.matmul)
    and the same product held for about a second (F.linear, as the table's figures are taken):
    the first is how a lone product is usually quoted, the second what a GPU at its power limit
    sustains."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        torch.matmul(a, b)
    torch.cuda.synchronize()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(10):
        torch.matmul(a, b)
    end.record()
    end.synchronize()
    burst = begin.elapsed_time(end) / 1e3 / 10
    held = time_cuda(lambda: F.linear(a, b), repeats=5, inner=150)
    flops = 2.0 * 8192 ** 3
    return dict(burst_tflops=flops / burst / 1e12, held_tflops=flops / held / 1e12)


def device_facts():
    props = torch.cuda.get_device_properties(0)
    facts = dict(name=props.name, multiprocessors=props.multi_processor_count,
                 memory_bytes=props.total_memory, torch=torch.__version__, cuda=torch.version.cuda,
                 cudnn=torch.backends.cudnn.version())
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,clocks.max.mem,power.limit",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
        facts["nvidia_smi"] = smi.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return facts


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--quick", action="store_true", help="the square products and one attention size only")
    parser.add_argument("--only", choices=("gemm", "attention", "elementwise"), action="append",
                        help="measure these groups only (repeatable; default all)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("measure_kernels: error: no CUDA device")
    started = time.time()
    result = dict(device=device_facts(), gemm=[], attention=[], elementwise=[])
    fp8_ok = torch.cuda.get_device_capability(0) >= (8, 9) and hasattr(torch, "_scaled_mm")
    groups = set(args.only or ("gemm", "attention", "elementwise"))
    result["burst"] = burst_figure()
    for precision in ("bf16", "fp8") if "gemm" in groups else ():
        for row in gemm_rows(precision, fp8_ok):
            if args.quick and row["model"] != "square":
                continue
            if row.get("duplicate"):
                continue
            try:
                result["gemm"].append(run_gemm(row))
            except Exception as error:
                result["gemm"].append(dict(row, error=str(error).splitlines()[0][:200]))
            torch.cuda.empty_cache()
        print(f"measure_kernels: {precision} products done at {time.time() - started:.0f} s", flush=True)
    # FlashAttention-3 paper's sweep: head dimension 128, 16k tokens per batch, hidden 2048.
    seqs = (512, 1024, 2048, 4096, 8192, 16384) if not args.quick else (4096,)
    for backend in ("flash", "cudnn") if "attention" in groups else ():
        for seq in seqs:
            result["attention"].append(run_attention(backend, seq, 16, 16, 128, 16384 // seq, "fa3-sweep"))
        # The published runs' own attention per rank (heads / TP, sequence / CP).
        if not args.quick:
            for model, m in MODELS.items():
                for tp, cp, mbs in m["configs"]:
                    heads, kv = m["heads"] // tp, max(1, m["kv"] // tp)
                    result["attention"].append(run_attention(backend, m["seq"] // cp, heads, kv,
                                                             m["hidden"] // m["heads"], mbs,
                                                             f"{model} tp{tp} cp{cp} mbs{mbs}"))
        torch.cuda.empty_cache()
    print(f"measure_kernels: attention done at {time.time() - started:.0f} s", flush=True)
    for rows_, hidden in ((8192, 4096), (8192, 8192), (16384, 16384)) if "elementwise" in groups else ():
        result["elementwise"] += run_elementwise(rows_, hidden)
    result["seconds"] = time.time() - started
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"measure_kernels: {len(result['gemm'])} products, {len(result['attention'])} attention, "
          f"{len(result['elementwise'])} element-wise figures in {result['seconds']:.0f} s -> {args.out}")


if __name__ == "__main__":
    main()
