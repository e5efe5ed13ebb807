"""Save a PyTorch model as TorchScript in a form pipescope's splitter loads.

The model below is an ordinary nn.Module; nothing in it knows about pipelines. pipescope splits
the saved file at named submodules that forward() calls directly (here: inp, block0, block1,
head), so write forward() as a sequence of such calls and pass only tensors (or tuples of
tensors) from one submodule to the next.

    python save_scripted_model.py --out model.pt              # torch.jit.script
    python save_scripted_model.py --out model.pt --trace      # torch.jit.trace
    pprun ... then load it with load_torchscript_model(path, {split_points = {"block1", "head"}})

LibTorch 1.13 reads files written by torch 1.13 (or older) and by later versions whose file
format it knows; see docs/TORCHSCRIPT.md for what to do when it refuses one.
"""
import argparse

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.fc = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.nn.functional.gelu(self.fc(self.norm(x)))


class Attention(nn.Module):
    """Self-attention over the rows of a [batch, hidden] input, through an operator that PyTorch
    2.0 added (scaled_dot_product_attention): LibTorch 1.13 refuses files that use it."""

    def __init__(self, hidden: int):
        super().__init__()
        self.qkv = nn.Linear(hidden, 3 * hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).unsqueeze(0).chunk(3, dim=-1)
        return x + torch.nn.functional.scaled_dot_product_attention(q, k, v).squeeze(0)


class ScriptedMlp(nn.Module):
    def __init__(self, features: int, hidden: int, classes: int, attention: bool):
        super().__init__()
        self.inp = nn.Linear(features, hidden)
        self.block0 = Block(hidden)
        self.block1 = Attention(hidden) if attention else Block(hidden)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.inp(x))
        h = self.block0(h)
        h = self.block1(h)
        return self.head(h)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="where to write the TorchScript file")
    parser.add_argument("--features", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--classes", type=int, default=5)
    parser.add_argument("--batch", type=int, default=4, help="rows of the example input (for --trace)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--trace", action="store_true", help="torch.jit.trace instead of torch.jit.script")
    parser.add_argument("--attention", action="store_true",
                        help="block1 is self-attention through scaled_dot_product_attention (torch >= 2.0 only)")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    model = ScriptedMlp(args.features, args.hidden, args.classes, args.attention)
    if args.trace:
        scripted = torch.jit.trace(model, torch.randn(args.batch, args.features))
    else:
        scripted = torch.jit.script(model)
    scripted.save(args.out)
    print(f"saved {args.out} (torch {torch.__version__})")


if __name__ == "__main__":
    main()
