#!/usr/bin/env python3
"""Writes the golden per-rank orders of Megatron-Core's pipeline schedules, each produced by
running megatron-core's own `forward_backward_pipelining_without_interleaving` and
`forward_backward_pipelining_with_interleaving` (megatron/core/pipeline_parallel/schedules.py)
on the CPU, once per pipeline rank.

Nothing of a model runs: the forward and backward steps are replaced by recorders (a forward
returns a one-element tensor tagged with its chunk and micro-batch; the backward that
Megatron hands that tensor back to records the tag), the point-to-point communicator returns
one-element tensors and sends nothing, and the process groups are stand-ins that answer
size() and rank(). Every decision of the order (warm-up length, the schedule table of
micro-batch groups, which chunk a backward belongs to, which inputs are refused and why) is
Megatron's own code.

usage:
  make_goldens.py MEGATRON_DIR OUTPUT_DIR
      MEGATRON_DIR holds the `megatron` package (an unpacked megatron-core wheel, or
      site-packages); writes OUTPUT_DIR/1f1b.txt and OUTPUT_DIR/interleaved-1f1b.txt. Releases
      before 0.10 (no group size) are driven through parallel_state and p2p_communication, as
      their schedules ask them, with G = p in every case.
  make_goldens.py MEGATRON_DIR --show P V M [G]
      prints one case

Needs torch (any CPU-capable build) and numpy, packaging; megatron-core 0.19.x needs
Python >= 3.12. The files hold, for each case, a header and one line per rank:
    ## p=P v=V m=M g=G          (g: microbatch_group_size_per_vp_stage; v=1 has no g)
    r<rank>: F<chunk>.<micro-batch> B<chunk>.<micro-batch> ...
or, when Megatron refuses the case, the header and
    refused: <ExceptionType>: <Megatron's message>
"""
import contextlib
import os
import sys

STAGES = range(2, 9)
# Fragments of the messages with which Megatron's schedules refuse their inputs.
REFUSALS = ("contiguous micro-batches in a virtual pipeline stage", "remainder of M",
            "is not divisible by pipeline-model-parallel-size")
CHUNKS = range(1, 5)


def group_sizes(p, m):
    """The microbatch_group_size_per_vp_stage values tried for one (p, m): the default p for
    every m; p + 1 and 2p wherever m >= p (accepted or refused, by remainder or by range); and
    at m = 2p the two just outside Megatron's range [p, m]."""
    wanted = {p}
    if m >= p:
        wanted |= {p + 1, 2 * p}
    if m == 2 * p:
        wanted |= {p - 1, m + 1}
    return sorted(wanted)


def load_megatron(megatron_dir):
    sys.path.insert(0, os.path.abspath(megatron_dir))
    import torch

    # Megatron allocates a token counter on "cuda"; on this CPU-only run it goes to the CPU.
    real_zeros = torch.zeros

    def zeros_on_cpu(*args, **kwargs):
        kwargs.pop("device", None)
        return real_zeros(*args, **kwargs)

    torch.zeros = zeros_on_cpu
    from megatron.core import model_parallel_config
    from megatron.core.pipeline_parallel import p2p_communication, schedules
    try:
        from megatron.core import process_groups_config
    except ImportError:  # before 0.13: the schedules ask parallel_state instead
        process_groups_config = None

    return torch, schedules, p2p_communication, model_parallel_config, process_groups_config


class Group:
    """A process group as far as the schedules ask: its size and this process's rank in it."""

    def __init__(self, size, rank):
        self._size, self._rank = size, rank

    def size(self):
        return self._size

    def rank(self):
        return self._rank


def run_case(mods, p, v, m, g, rank):
    """Megatron's order on `rank`, as ["F0.3", "B1.2", ...], or raises what Megatron raises."""
    torch, schedules, p2p, mpc, pgc = mods
    if not hasattr(schedules, "get_schedule_table"):
        return run_case_before_0_10(mods, p, v, m, rank)
    from megatron.core.enums import ModelType
    pp_group = Group(p, rank)

    config = mpc.ModelParallelConfig(
        pipeline_model_parallel_size=p,
        virtual_pipeline_model_parallel_size=v if v > 1 else None,
        pipeline_dtype=torch.float32,
        microbatch_group_size_per_vp_stage=g,
    )
    config.hidden_size = 1  # a TransformerConfig field the schedules read for tensor shapes

    class Communicator(p2p.P2PCommunicator):
        # Megatron's communicator with its transfers replaced: receives give a fresh
        # one-element tensor, sends go nowhere.
        def __init__(self):
            self.pp_group = pp_group
            self.config = config
            self.next_rank = (rank + 1) % p
            self.prev_rank = (rank - 1) % p
            self.virtual_pipeline_model_parallel_size = config.virtual_pipeline_model_parallel_size

        def _communicate(self, *, tensor_send_next, tensor_send_prev, recv_prev, recv_next, tensor_shape,
                         wait_on_reqs=True):
            prev = torch.zeros(1, requires_grad=True) if recv_prev else None
            nxt = torch.zeros(1) if recv_next else None
            return prev, nxt, (None if wait_on_reqs else [])

    order = []

    def forward_step(forward_step_func, data_iterator, model, num_microbatches, input_tensor,
                     forward_data_store, config, cp_group_size, collect_non_loss_data=False,
                     checkpoint_activations_microbatch=None, is_first_microbatch=False,
                     current_microbatch=None, vp_stage=None, is_last_stage=True):
        chunk = vp_stage if vp_stage is not None else 0
        order.append(f"F{chunk}.{current_microbatch}")
        output = torch.zeros(1)
        output.pipescope_tag = (chunk, current_microbatch)
        return output, torch.zeros([], dtype=torch.int)

    def backward_step(input_tensor, output_tensor, output_tensor_grad, config):
        chunk, micro_batch = output_tensor.pipescope_tag
        order.append(f"B{chunk}.{micro_batch}")
        return torch.zeros(1)

    class Chunk(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.config = config
            self.model_type = ModelType.encoder_or_decoder

    pg_collection = pgc.ProcessGroupCollection()
    pg_collection.tp = Group(1, 0)
    pg_collection.cp = Group(1, 0)
    pg_collection.pp = pp_group

    with patched(schedules, forward_step=forward_step, backward_step=backward_step):
        if v == 1:
            schedules.forward_backward_pipelining_without_interleaving(
                forward_step_func=None, data_iterator=None, model=[Chunk()], num_microbatches=m,
                seq_length=1, micro_batch_size=1, p2p_communicator=Communicator(), pg_collection=pg_collection)
        else:
            schedules.forward_backward_pipelining_with_interleaving(
                forward_step_func=None, data_iterator=[None] * v, model=[Chunk() for _ in range(v)],
                num_microbatches=m, seq_length=1, micro_batch_size=1, p2p_communicator=Communicator(),
                pg_collection=pg_collection)
    return order


def run_case_before_0_10(mods, p, v, m, rank):
    """The same for megatron-core 0.1 .. 0.9, whose schedules ask parallel_state where they run
    and call p2p_communication's functions (no group size: they take none)."""
    torch, schedules, p2p, mpc, _ = mods
    from megatron.core import parallel_state
    from megatron.core.enums import ModelType

    parallel_state.set_pipeline_model_parallel_world_size(p)
    parallel_state.set_pipeline_model_parallel_rank(rank)
    parallel_state.set_virtual_pipeline_model_parallel_world_size(v if v > 1 else None)
    parallel_state.set_virtual_pipeline_model_parallel_rank(0)
    config = mpc.ModelParallelConfig(pipeline_model_parallel_size=p,
                                     virtual_pipeline_model_parallel_size=v if v > 1 else None,
                                     pipeline_dtype=torch.float32)
    config.hidden_size = 1

    def communicate(*, tensor_send_next, tensor_send_prev, recv_prev, recv_next, tensor_shape, config,
                    wait_on_reqs=True):
        prev = torch.zeros(1, requires_grad=True) if recv_prev else None
        nxt = torch.zeros(1) if recv_next else None
        return prev, nxt, (None if wait_on_reqs else [])

    order = []
    forwards = [0] * v  # each chunk forwards its micro-batches in order: the k-th is micro-batch k

    def forward_step(forward_step_func, data_iterator, model, num_microbatches, input_tensor,
                     forward_data_store, config, *args, **kwargs):
        chunk = model.pipescope_chunk
        micro_batch = forwards[chunk]
        forwards[chunk] += 1
        order.append(f"F{chunk}.{micro_batch}")
        output = torch.zeros(1)
        output.pipescope_tag = (chunk, micro_batch)
        return output, torch.zeros([], dtype=torch.int)

    def backward_step(input_tensor, output_tensor, output_tensor_grad, *args, **kwargs):
        chunk, micro_batch = output_tensor.pipescope_tag
        order.append(f"B{chunk}.{micro_batch}")
        return torch.zeros(1)

    class Chunk(torch.nn.Module):
        def __init__(self, index):
            super().__init__()
            self.config = config
            self.model_type = ModelType.encoder_or_decoder
            self.pipescope_chunk = index

    real_cuda = torch.Tensor.cuda
    torch.Tensor.cuda = lambda self, *args, **kwargs: self  # a token counter moved to the GPU
    try:
        with patched(schedules, forward_step=forward_step, backward_step=backward_step), \
                patched(p2p, _communicate=communicate), \
                patched(parallel_state, get_context_parallel_world_size=lambda: 1,
                        get_tensor_model_parallel_world_size=lambda: 1):
            if v == 1:
                schedules.forward_backward_pipelining_without_interleaving(
                    forward_step_func=None, data_iterator=None, model=[Chunk(0)], num_microbatches=m,
                    seq_length=1, micro_batch_size=1)
            else:
                schedules.forward_backward_pipelining_with_interleaving(
                    forward_step_func=None, data_iterator=[None] * v, model=[Chunk(c) for c in range(v)],
                    num_microbatches=m, seq_length=1, micro_batch_size=1)
    finally:
        torch.Tensor.cuda = real_cuda
    return order


@contextlib.contextmanager
def patched(module, **replacements):
    saved = {name: getattr(module, name) for name in replacements}
    for name, value in replacements.items():
        setattr(module, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)


def case_lines(mods, p, v, m, g):
    header = f"## p={p} v={v} m={m}" + (f" g={g}" if v > 1 else "")
    lines = [header]
    try:
        for rank in range(p):
            lines.append(f"r{rank}: " + " ".join(run_case(mods, p, v, m, g, rank)))
    except (ValueError, RuntimeError) as error:
        message = " ".join(str(error).split())
        # Only the schedules' own checks of their inputs count as refusals; anything else is
        # this script failing to drive them, and stops it.
        if not any(reason in message for reason in REFUSALS):
            raise
        return [header, f"refused: {type(error).__name__}: {message}"]
    return lines


def cases(v, has_group_size):
    for p in STAGES:
        for m in range(1, 4 * p + 1):
            if v == 1:
                yield p, m, None
            else:
                for g in group_sizes(p, m) if has_group_size else [p]:
                    yield p, m, g


def main(argv):
    if len(argv) >= 3 and argv[2] == "--show":
        mods = load_megatron(argv[1])
        p, v, m = (int(x) for x in argv[3:6])
        g = int(argv[6]) if len(argv) > 6 else p
        print("\n".join(case_lines(mods, p, v, m, g)))
        return 0
    if len(argv) != 3:
        sys.exit(__doc__)
    mods = load_megatron(argv[1])
    os.makedirs(argv[2], exist_ok=True)
    import megatron.core

    # package_info appends the short hash of whatever git checkout the script runs in: not its own.
    version = getattr(megatron.core, "__version__", "unknown").split("+")[0]
    has_group_size = hasattr(mods[1], "get_schedule_table")  # 0.10 on
    for name, chunk_counts in (("1f1b", [1]), ("interleaved-1f1b", [c for c in CHUNKS if c > 1])):
        out = [f"# megatron-core {version}, make_goldens.py: p = {STAGES.start}..{STAGES.stop - 1}, "
               f"v = {', '.join(map(str, chunk_counts))}, m = 1..4p"]
        accepted = refused = 0
        for v in chunk_counts:
            for p, m, g in cases(v, has_group_size):
                lines = case_lines(mods, p, v, m, g)
                refused += lines[1].startswith("refused:")
                accepted += not lines[1].startswith("refused:")
                out.extend(lines)
        with open(os.path.join(argv[2], name + ".txt"), "w") as f:
            f.write("\n".join(out) + "\n")
        print(f"{name}: {accepted} cases run, {refused} refused", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
