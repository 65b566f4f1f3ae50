"""Mixed precision (trainer/precision.py): float32 master weights and AdamW states whatever
``model.dtype`` says, the forward's matmuls in the compute dtype, the LM head's float32
log-softmax recomputed in the backward pass instead of kept."""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from support.paths import EXAMPLES
from sweeps.cli import main
from trainer.episodes.samples import TokenSequence
from trainer.episodes.scoring import sequence_logprobs
from trainer.models.backbones import load_pretrained
from trainer.models.precision import autocast, compute_dtype, frozen_copy
from trainer.stages.warm_start import bundle_path

EZPOINTS = EXAMPLES / "ezpoints_small.yaml"
MATRIX = "model.layers.0.mlp.down_proj.weight"


class MatmulDtypes(TorchDispatchMode):
    """Records the dtype of every matrix product's first operand."""

    OPS = ("mm", "addmm", "bmm", "baddbmm")

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        if name in self.OPS:
            operand = args[1] if name in ("addmm", "baddbmm") else args[0]
            self.seen.append(operand.dtype)
        return func(*args, **(kwargs or {}))


class Float32Bytes(TorchDispatchMode):
    """Counts the bytes of every float32 tensor an operator allocates (an output whose storage
    is none of its inputs': views such as ``detach`` allocate nothing)."""

    def __init__(self):
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.data_ptr() for t in (*args, *(kwargs or {}).values()) if isinstance(t, torch.Tensor)}
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.dtype == torch.float32 and not t._is_view() \
                    and t.data_ptr() not in inputs:
                self.bytes += t.numel() * t.element_size()
        return out


def sequences(tokenizer, n=2):
    ids = tokenizer.encode("Cards: 3 and 4. Formula: 3*4=12</action>")
    return [TokenSequence(tuple(ids), (0,) * 4 + (1,) * (len(ids) - 4), (-1,) * 4 + (0,) * (len(ids) - 4))] * n


def test_bf16_compute_keeps_float32_masters_and_runs_matmuls_in_bf16():
    model, tokenizer = load_pretrained(str(bundle_path("ezpoints")), torch.bfloat16, "cpu")
    assert compute_dtype(model) == torch.bfloat16
    assert {p.dtype for p in model.parameters()} == {torch.float32}  # the masters
    probe = MatmulDtypes()
    with probe:
        logp, _ = sequence_logprobs(model, sequences(tokenizer), grad=True, with_entropy=False)
    assert probe.seen and set(probe.seen) == {torch.bfloat16}
    assert logp.dtype == torch.float32
    logp.sum().backward()
    assert all(p.grad is None or p.grad.dtype == torch.float32 for p in model.parameters())
    reference = frozen_copy(model)  # never trains: stored in the compute dtype
    assert {p.dtype for p in reference.parameters()} == {torch.bfloat16}
    assert not any(p.requires_grad for p in reference.parameters())


def test_a_frozen_copy_never_holds_a_second_float32_model():
    """The reference is built tensor by tensor in the compute dtype: no float32 byte is
    allocated while it is copied (a deep copy then a cast clones every float32 master first),
    its weights equal the policy's cast, tied weights stay tied and the policy is untouched."""
    model, _ = load_pretrained(str(bundle_path("ezpoints")), torch.bfloat16, "cpu")
    masters = {k: v.clone() for k, v in model.state_dict().items()}
    with Float32Bytes() as probe:
        reference = frozen_copy(model)
    assert probe.bytes == 0
    weights = reference.state_dict()
    assert all(torch.equal(weights[k], v.to(torch.bfloat16) if v.is_floating_point() else v)
               for k, v in masters.items())
    assert reference.lm_head.weight is reference.model.embed_tokens.weight  # tied, as the policy's
    assert compute_dtype(reference) == torch.bfloat16 and not reference.training
    with torch.no_grad():
        next(reference.parameters()).add_(1.0)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in masters.items())  # nothing shared


def test_float32_compute_runs_no_autocast():
    model, tokenizer = load_pretrained(str(bundle_path("ezpoints")), torch.float32, "cpu")
    probe = MatmulDtypes()
    with probe, autocast(model):
        sequence_logprobs(model, sequences(tokenizer), with_entropy=False)
    assert set(probe.seen) == {torch.float32}


def test_the_lm_head_keeps_no_float32_vocabulary_tensor_for_backward():
    """With gradients the head's [tokens, V] float32 log-softmax is recomputed in the
    backward pass (activation checkpointing), not saved; the gradients are the same."""
    model, tokenizer = load_pretrained(str(bundle_path("ezpoints")), torch.float32, "cpu")
    vocab = model.get_output_embeddings().weight.shape[0]
    batch = sequences(tokenizer, 3)
    saved = []

    def pack(tensor):
        saved.append((tuple(tensor.shape), tensor.dtype))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logp, _ = sequence_logprobs(model, batch, grad=True, with_entropy=False)
    assert not [s for s in saved if s[1] == torch.float32 and len(s[0]) == 2 and s[0][1] == vocab], saved
    logp.sum().backward()
    recomputed = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    from trainer.episodes import scoring

    real = scoring.recomputed_head
    scoring.recomputed_head = scoring.head_logprobs  # the head without recomputation
    try:
        logp, _ = sequence_logprobs(model, batch, grad=True, with_entropy=False)
        logp.sum().backward()
    finally:
        scoring.recomputed_head = real
    for a, p in zip(recomputed, model.parameters()):
        torch.testing.assert_close(a, p.grad)


def test_one_bf16_adamw_step_at_lr_1e6_moves_the_masters(tmp_path):
    """Through ``hindsight train``: one GRPO step at lr 1e-6 with ``model.dtype: bfloat16``
    changes more than 90% of an MLP matrix of the (float32) master weights; the checkpoint
    keeps them in float32.  (bf16 weights stepped directly kept 1.3%.)"""
    out = tmp_path / "run"
    code = main(["train", str(EZPOINTS), "--set", "model.dtype=bfloat16", "--set", "algo.lr=1.0e-6",
                 "--set", "stages.rl.steps=1", "--set", "rollout.tasks_per_step=4",
                 "--set", "rollout.group_size=4", "--set", "eval.max_tasks=2", "--set", "eval.every=0",
                 "--set", "algo.minibatch_size=0", "--set", f"output.dir={out}",
                 "--set", f"tracking.uri=sqlite:///{tmp_path / 'mlruns.db'}"])
    assert code == 0
    before, _ = load_pretrained(str(bundle_path("ezpoints")), torch.float32, "cpu")
    after, _ = load_pretrained(str(out / "checkpoints" / "step_000001" / "model"), torch.float32, "cpu")
    saved = dict(after.named_parameters())[MATRIX]
    initial = dict(before.named_parameters())[MATRIX]
    moved = (saved != initial).float().mean().item()
    assert moved > 0.9, moved
    from safetensors import safe_open

    with safe_open(str(out / "checkpoints" / "step_000001" / "model" / "model.safetensors"), "pt") as f:
        assert f.get_tensor(MATRIX).dtype == torch.float32
