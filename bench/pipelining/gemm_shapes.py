"""The matrix products of one Linear layer of the pipelining benchmark's mlp (32 x 1024 by
1024 x 1024) in PyTorch on one thread: forward x W^T, input gradient g W, weight gradient g^T x.
bench_exec's BM_LinearGemm times the same products in pipescope's LibTorch; side by side they
separate the BLAS libraries from the pipeline runtimes. Prints the best mean of 5 runs of 50."""
import time

import torch

torch.set_num_threads(1)
x, w, g = torch.randn(32, 1024), torch.randn(1024, 1024), torch.randn(32, 1024)
products = {
    "x W^T (forward)": lambda: x @ w.t(),
    "g W (input gradient)": lambda: g @ w,
    "g^T x (weight gradient)": lambda: g.t() @ x,
}
for name, product in products.items():
    for _ in range(10):
        product()
    best_s = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(50):
            product()
        best_s = min(best_s, (time.perf_counter() - start) / 50)
    print(f"{name:26} {best_s * 1e6:8.0f} us")
