"""Save a PyTorch model as TorchScript in a form pipescope's splitter loads.

The models below are ordinary nn.Modules; nothing in them knows about pipelines. pipescope splits
the saved file at named submodules that forward() calls directly (here: inp, block0, block1,
head), so write forward() as a sequence of such calls and pass only tensors (or tuples of
tensors) from one submodule to the next.

    python save_scripted_model.py --out model.pt              # torch.jit.script
    python save_scripted_model.py --out model.pt --trace      # torch.jit.trace
    python save_scripted_model.py --out model.pt --transformer  # two transformer blocks
    pprun ... then load it with load_torchscript_model(path, {split_points = {"block1", "head"}})

pipescope links LibTorch 2.15 (PyPI's), which loads files saved by that torch or an older one;
see docs/TORCHSCRIPT.md.
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
    2.0 added (scaled_dot_product_attention), which Debian's LibTorch 1.13 did not have."""

    def __init__(self, hidden: int):
        super().__init__()
        self.qkv = nn.Linear(hidden, 3 * hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).unsqueeze(0).chunk(3, dim=-1)
        return x + torch.nn.functional.scaled_dot_product_attention(q, k, v).squeeze(0)


class TransformerBlock(nn.Module):
    """A pre-norm transformer block as in GPT-2 and Llama: causal multi-head self-attention
    through scaled_dot_product_attention (the fused operator every modern transformer calls),
    then a GELU MLP, each added to its input. Input and output: [batch, sequence, hidden]."""

    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.norm2 = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, 4 * hidden)
        self.fc2 = nn.Linear(4 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, sequence, hidden = x.size(0), x.size(1), x.size(2)
        # [3, batch, heads, sequence, hidden / heads]: the layout the attention operator takes.
        qkv = self.qkv(self.norm1(x)).view(batch, sequence, 3, self.heads, hidden // self.heads).permute(2, 0, 3, 1, 4)
        attended = torch.nn.functional.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, sequence, hidden))
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm2(x))))


class ScriptedTransformer(nn.Module):
    """[batch, sequence, features] -> [batch, classes]: an input projection, two transformer
    blocks, and a head over the mean of the sequence."""

    def __init__(self, features: int, hidden: int, heads: int, classes: int):
        super().__init__()
        self.inp = nn.Linear(features, hidden)
        self.block0 = TransformerBlock(hidden, heads)
        self.block1 = TransformerBlock(hidden, heads)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        h = self.block0(h)
        h = self.block1(h)
        return self.head(h.mean(dim=1))


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
    parser.add_argument("--transformer", action="store_true",
                        help="two transformer blocks over [batch, sequence, features] (torch >= 2.0 only)")
    parser.add_argument("--heads", type=int, default=4, help="attention heads (--transformer)")
    parser.add_argument("--sequence", type=int, default=6, help="sequence length of the example input (--trace --transformer)")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    if args.transformer:
        model = ScriptedTransformer(args.features, args.hidden, args.heads, args.classes)
        example = torch.randn(args.batch, args.sequence, args.features)
    else:
        model = ScriptedMlp(args.features, args.hidden, args.classes, args.attention)
        example = torch.randn(args.batch, args.features)
    if args.trace:
        scripted = torch.jit.trace(model, example)
    else:
        scripted = torch.jit.script(model)
    scripted.save(args.out)
    print(f"saved {args.out} (torch {torch.__version__})")


if __name__ == "__main__":
    main()
