#!/usr/bin/env python3
"""Measures, on the GPU at hand, the kernels the device presets price (sim/src/efficiency.cpp):
the matrix products of the published H100 runs' layers by shape (forward, input gradient and
weight gradient; BF16 and FP8), the routed experts' products of the published MoE runs (one
product per expert, as sim/src/expert_layer.cpp prices them, and one grouped kernel), the fused
attention kernels by sequence length (FlashAttention-2 and cuDNN through torch's
scaled_dot_product_attention, causal, BF16), and element-wise work (copies, norms, activations,
the FP8 cast). Writes one JSON file that `bench_kernel_presets` (bench/kernels/kernel_presets.cpp)
sets beside the presets' figures (docs/MODEL.md).

    python3 bench/kernels/measure_kernels.py --out kernels-h100.json [--quick] [--only experts]
    python3 bench/kernels/measure_kernels.py --dry-run    # the shapes only; needs neither torch nor a GPU

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

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # --dry-run lists the shapes on a machine without torch
    torch = F = None

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


# The routed experts of the published MoE runs in tests/sim/data/published_runs.json (model
# files in tests/sim/data/published_models/): the model's hidden size, experts, top_k, expert
# width and gated MLP, the run's sequence, micro-batch size, tensor, context, expert and
# expert-tensor parallel sizes, and the precisions its published rows ran in. Runs that differ in
# nothing here share a row. No published run of Mixtral is among them.
EXPERT_RUNS = {
    # mbridge2606-qwen3-30b-a3b-fp8-16 (16 H100 FP8, EP 16; no TP, so no expert TP).
    "qwen3-30b-a3b": dict(hidden=2048, experts=128, top_k=8, moe_ffn=768, gated=True, seq=4096, mbs=1,
                          tp=1, cp=1, ep=16, etp=1, run_precisions=("fp8",)),
    # mbridge2604-qwen3-235b-a22b-fp8-256 and mbridge2511-qwen3-235b-a22b-fp8-256 (TP 2 with
    # sequence parallelism, EP 32, ETP 1).
    "qwen3-235b-a22b": dict(hidden=4096, experts=128, top_k=8, moe_ffn=1536, gated=True, seq=4096, mbs=1,
                            tp=2, cp=1, ep=32, etp=1, run_precisions=("fp8",)),
    # dgxc2505-deepseek-v3-bf16-512 and dgxc2505-deepseek-v3-bf16-1024 (TP 2 with sequence
    # parallelism, EP 64, ETP 1).
    "deepseek-v3": dict(hidden=7168, experts=256, top_k=8, moe_ffn=2048, gated=True, seq=4096, mbs=1,
                        tp=2, cp=1, ep=64, etp=1, run_precisions=("bf16",)),
    # dgxc2505-grok1-314b-bf16-512 and dgxc2505-grok1-314b-fp8-512 (TP 4 with sequence
    # parallelism, CP 2, EP 8, ETP 1).
    "grok1-314b": dict(hidden=6144, experts=8, top_k=2, moe_ffn=32768, gated=True, seq=8192, mbs=1,
                       tp=4, cp=2, ep=8, etp=1, run_precisions=("bf16", "fp8")),
    # dgxc2505-llama4-maverick-bf16-512 and dgxc2505-llama4-maverick-fp8-512 (TP 4 with sequence
    # parallelism, EP 128, ETP 4).
    "llama4-maverick": dict(hidden=5120, experts=128, top_k=1, moe_ffn=8192, gated=True, seq=8192, mbs=1,
                            tp=4, cp=1, ep=128, etp=4, run_precisions=("bf16", "fp8")),
}


def exact_division(numerator, denominator, what):
    quotient, remainder = divmod(numerator, denominator)
    if remainder:
        raise ValueError(f"{what}: {numerator} / {denominator} is not whole")
    return quotient


def expert_layer_shape(name):
    """One rank's routed experts in one micro-batch, as sim/src/expert_layer.cpp counts them with a
    balanced router (load factor 1, at which the capacity factor of 1 that DeepSeek-V3, Grok-1 and
    Llama 4 set drops nothing; the Qwen3 runs are dropless): the rank's tokens s b / C, split by T
    (Megatron routes each tensor-parallel rank's own tokens under the sequence parallelism it
    requires with MoE), top_k copies each, gathered over the expert-tensor-parallel group, shared
    by the E / EP experts on the rank; each expert's width divided by ETP, doubled for the gated
    first product."""
    r = EXPERT_RUNS[name]
    tokens_on_rank = exact_division(r["mbs"] * r["seq"], r["cp"], f"{name} tokens on a rank")
    routed_tokens = exact_division(tokens_on_rank, r["tp"], f"{name} routed tokens")
    rows_on_rank = routed_tokens * r["top_k"] * r["etp"]
    experts_here = exact_division(r["experts"], r["ep"], f"{name} experts on a rank")
    rows_per_expert = exact_division(rows_on_rank, experts_here, f"{name} rows per expert")
    width = exact_division(r["moe_ffn"], r["etp"], f"{name} expert width")
    first_width = (2 if r["gated"] else 1) * width
    return dict(model=name, tp=r["tp"], cp=r["cp"], ep=r["ep"], etp=r["etp"], mbs=r["mbs"],
                tokens_on_rank=tokens_on_rank, routed_tokens=routed_tokens, rows_on_rank=rows_on_rank,
                experts_here=experts_here, rows_per_expert=rows_per_expert, width=width,
                first_width=first_width)


def expert_products(name):
    """The six (m, n, k) of one expert's products in expert_times's order, each priced experts_here
    times: the first (fc1, to the gated width) and second (fc2) product's forward, input gradient
    and weight gradient. `grouped` is the dimension the experts' rows lie along: m for the forward
    and input gradient, k for the weight gradient."""
    shape = expert_layer_shape(name)
    h = EXPERT_RUNS[name]["hidden"]
    rows, width, first = shape["rows_per_expert"], shape["width"], shape["first_width"]
    out = []
    for product, role, m, n, k in (("fc1", "forward", rows, first, h),
                                   ("fc2", "forward", rows, h, width),
                                   ("fc1", "input_grad", rows, h, first),
                                   ("fc2", "input_grad", rows, width, h),
                                   ("fc1", "weight_grad", h, first, rows),
                                   ("fc2", "weight_grad", width, h, rows)):
        out.append(dict(shape, product=product, role=role, m=m, gemm_n=n, gemm_k=k,
                        grouped="k" if role == "weight_grad" else "m"))
    return out


def expert_rows(fp8_ok, quick=False):
    """Every expert product in both precisions and both ways of running it. FP8 is measured for the
    runs published in BF16 too (and BF16 for those in FP8): the same shape in both precisions
    tells the preset's FP8 fraction apart from its shape model, and `ppsim plan --fp8-format`
    weighs both precisions; `run_precision` marks the precision the published run used."""
    out = []
    for name in list(EXPERT_RUNS)[:1] if quick else EXPERT_RUNS:
        for precision in ("bf16", "fp8") if fp8_ok else ("bf16",):
            for p in expert_products(name):
                for method in ("per_expert", "grouped"):
                    out.append(dict(p, precision=precision, method=method,
                                    kernel=expert_kernel(precision, method),
                                    run_precision=precision in EXPERT_RUNS[name]["run_precisions"]))
    return out


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


def expert_kernel(precision, method):
    if method == "per_expert":
        return "F.linear" if precision == "bf16" else "torch._scaled_mm"
    return "torch._grouped_mm" if precision == "bf16" else "torch._scaled_grouped_mm"


def random_operand(*size, precision):
    x = torch.randn(*size, device="cuda", dtype=torch.bfloat16)
    return x.to(torch.float8_e4m3fn) if precision == "fp8" else x


def per_expert_call(row):
    """The rank's experts' products one after another, each a launch of its own on its own tokens
    (m x k) and weights (n x k): what the simulator prices, experts_here products of one expert's
    shape. FP8 as the gemm rows' products: e4m3 operands, per-tensor scales, BF16 result."""
    m, n, k, precision = row["m"], row["gemm_n"], row["gemm_k"], row["precision"]
    pairs = [(random_operand(m, k, precision=precision), random_operand(n, k, precision=precision))
             for _ in range(row["experts_here"])]
    if precision == "bf16":
        def call():
            for x, w in pairs:
                F.linear(x, w)
    else:
        one = torch.ones((), device="cuda")

        def call():
            for x, w in pairs:
                torch._scaled_mm(x, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    return call


def grouped_call(row):
    """The rank's experts' products in one grouped kernel: torch._grouped_mm (BF16) or
    torch._scaled_grouped_mm (FP8 e4m3, row-wise scales, the only scaling it takes on an H100;
    BF16 result). The experts' rows lie one after another along m (forward and input gradient:
    the tokens 2-D, the weights a 3-D stack) or along k (weight gradient: both 2-D); int32
    offsets mark each expert's end. Both operands keep F.linear's layout (k contiguous)."""
    m, n, k = row["m"], row["gemm_n"], row["gemm_k"]
    precision, experts = row["precision"], row["experts_here"]
    along_m = row["grouped"] == "m"
    step = m if along_m else k
    offsets = torch.arange(1, experts + 1, device="cuda", dtype=torch.int32) * step
    if along_m:
        a = random_operand(experts * m, k, precision=precision)
        b = random_operand(experts, n, k, precision=precision).transpose(-2, -1)
    else:
        a = random_operand(m, experts * k, precision=precision)
        b = random_operand(n, experts * k, precision=precision).t()
    kernel = expert_kernel(precision, "grouped")
    if not hasattr(torch, kernel.split(".")[1]):
        raise RuntimeError(f"torch {torch.__version__} has no {kernel}")
    if precision == "bf16":
        return lambda: torch._grouped_mm(a, b, offs=offsets)
    # One scale per row of a and per column of b, each expert's own: (experts m) and (experts, n)
    # along m, (m experts) and (n experts) along k.
    scale_a = torch.ones(experts * m, device="cuda", dtype=torch.float32)
    scale_b = torch.ones(*((experts, n) if along_m else (experts * n,)), device="cuda", dtype=torch.float32)
    return lambda: torch._scaled_grouped_mm(a, b, scale_a, scale_b, offs=offsets, out_dtype=torch.bfloat16)


def expert_flops(row):
    return 2.0 * row["experts_here"] * row["m"] * row["gemm_n"] * row["gemm_k"]


def run_expert(row):
    call = (per_expert_call if row["method"] == "per_expert" else grouped_call)(row)
    seconds = time_cuda(call)
    flops = expert_flops(row)
    return dict(row, flops=flops, seconds=seconds, tflops=flops / seconds / 1e12)


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


def print_shapes():
    """--dry-run: the experts' shapes as expert_layer_shape derives them, and how many figures each
    group would take; touches neither torch nor a GPU."""
    for name, run in EXPERT_RUNS.items():
        s = expert_layer_shape(name)
        print(f"{name}: TP {s['tp']} CP {s['cp']} EP {s['ep']} ETP {s['etp']} micro-batch {s['mbs']}: "
              f"{s['tokens_on_rank']} tokens on a rank, {s['routed_tokens']} routed, "
              f"{s['rows_on_rank']} rows over the rank's {s['experts_here']} of {run['experts']} experts, "
              f"{s['rows_per_expert']} rows each; expert width {s['width']} (first product "
              f"{s['first_width']}); published in {', '.join(run['run_precisions'])}")
        for p in expert_products(name):
            flops = expert_flops(p)
            print(f"  {p['product']} {p['role']:<11} {p['experts_here']} x "
                  f"({p['m']} x {p['gemm_n']} x {p['gemm_k']}), grouped along {p['grouped']}: "
                  f"{flops / 1e9:.1f} GFLOP")
    experts = expert_rows(True)
    products = [row for row in gemm_rows("bf16", True) if not row.get("duplicate")]
    print(f"experts: {len(experts)} figures ({len(EXPERT_RUNS)} runs x 6 products x BF16, FP8 x one product "
          f"per expert, one grouped kernel)")
    print(f"gemm: {len(products)} products in each of BF16 and FP8")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="JSON file to write")
    parser.add_argument("--quick", action="store_true",
                        help="the square products, one attention size and one MoE run's experts only")
    parser.add_argument("--only", choices=("gemm", "experts", "attention", "elementwise"), action="append",
                        help="measure these groups only (repeatable; default all)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the experts' shapes and each group's size; needs neither torch nor a GPU")
    args = parser.parse_args()
    if args.dry_run:
        print_shapes()
        return
    if not args.out:
        parser.error("--out is required (or --dry-run)")
    if torch is None:
        sys.exit("measure_kernels: error: torch is not importable")
    if not torch.cuda.is_available():
        sys.exit("measure_kernels: error: no CUDA device")
    started = time.time()
    result = dict(device=device_facts(), gemm=[], experts=[], attention=[], elementwise=[])
    fp8_ok = torch.cuda.get_device_capability(0) >= (8, 9) and hasattr(torch, "_scaled_mm")
    groups = set(args.only or ("gemm", "experts", "attention", "elementwise"))
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
    for row in expert_rows(fp8_ok, args.quick) if "experts" in groups else ():
        try:
            result["experts"].append(run_expert(row))
        except Exception as error:  # a grouped kernel this torch or GPU lacks
            text = str(error).strip().splitlines() or [repr(error)]
            result["experts"].append(dict(row, error=text[0][:200]))
        torch.cuda.empty_cache()
    if "experts" in groups:
        print(f"measure_kernels: experts done at {time.time() - started:.0f} s", flush=True)
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
    print(f"measure_kernels: {len(result['gemm'])} products, {len(result['experts'])} expert products, "
          f"{len(result['attention'])} attention, {len(result['elementwise'])} element-wise figures in "
          f"{result['seconds']:.0f} s -> {args.out}")


if __name__ == "__main__":
    main()
