"""Data-parallel jobs on spawned gloo ranks, run as a script (independent of pytest's import
mode): ``python ranks.py launch WORLD JOB OUT ARGS_JSON`` starts WORLD processes of
``python ranks.py rank R WORLD JOB OUT ARGS_JSON`` with the environment a launcher gives
(RANK, WORLD_SIZE, LOCAL_RANK, one thread each) and a ``file://`` rendezvous in OUT, waits
for all, and exits with the first failure's status.  Each rank runs ``JOB`` and writes its
results as ``OUT/<job>_rank<R>.json``.

Jobs: ``update`` (a 2-rank update against the one-process update on the same trajectories),
``stage1`` (SEED's Stage 1 on the sharded policy against one process's),
``train`` (:func:`trainer.run.loop.train` end to end, optionally crashing in a given step).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

MICRO = Path(__file__).resolve().parents[2] / "support" / "data" / "train_micro.yaml"


def launch(world: int, job: str, out: str, args: dict, timeout: float = 900) -> float:
    """Run ``job`` on ``world`` ranks; returns the wall time (raises when a rank fails)."""
    Path(out).mkdir(parents=True, exist_ok=True)
    store = Path(out) / f"rendezvous_{job}_{time.monotonic_ns()}"
    start = time.perf_counter()
    procs = []
    for r in range(world):
        env = {**os.environ, "RANK": str(r), "WORLD_SIZE": str(world), "LOCAL_RANK": str(r),
               "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HINDSIGHT_RENDEZVOUS": str(store)}
        procs.append(subprocess.Popen([sys.executable, __file__, "rank", job, out, json.dumps(args)], env=env))
    codes = [p.wait(timeout=timeout) for p in procs]
    if any(codes):
        raise RuntimeError(f"{job}: rank exit codes {codes}")
    return time.perf_counter() - start


def _init() -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{os.environ['HINDSIGHT_RENDEZVOUS']}",
                            rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))


def _finish() -> None:
    """Leave the process group together: a rank that exits while its peer still works (rank 0
    compares with its one-process run last) tears gloo's connections down under it, and one CI
    run saw that rank abort (exit -6) at shutdown.  A launcher (Ray Train, torchrun) does this
    for the trainer."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def _write(out: str, job: str, payload) -> None:
    path = Path(out) / f"{job}_rank{os.environ['RANK']}.json"
    path.write_text(json.dumps(payload, indent=1))


# ---- job "update": the 2-rank update equals the 1-rank update on the same trajectories


def _context(out: str, method: str, mode: str, lora: int = 0, **algo):
    from trainer.algos import get_method
    from trainer.hindsight.writers import PrivilegedContext
    from trainer.run.components import build_components, start_rl
    from trainer.run.resolve import load_config, resolve

    cfg = resolve(load_config(MICRO, [f"algo.method={method}", "writer.kind=oracle", f"env.context={mode}",
                                      "rollout.tasks_per_step=2", "rollout.group_size=3",
                                      f"output.dir={out}/{method}-{mode}", f"model.lora.rank={lora}"]))
    cfg = dataclasses.replace(cfg, algo=dataclasses.replace(cfg.algo, **algo))
    ctx = build_components(cfg)
    ctx.spec = get_method(method)
    ctx.privileged = PrivilegedContext(ctx.make_env) if "privileged" in ctx.spec.skills else None
    start_rl(ctx)
    return ctx


def _with_advantages(batch):
    """Advantages of both signs on every token (the untrained policy's GRPO ones tie at 0)."""
    import torch

    noise = torch.randn(batch.advantages.shape, generator=torch.Generator().manual_seed(0))
    batch.advantages = noise * batch.old.mask
    return batch


def _rows(value, rows: list[int], n: int):
    """``value`` (a StepBatch, its tensors, lists and dicts) restricted to trajectory ``rows``."""
    import torch

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: _rows(getattr(value, f.name), rows, n)
                                            for f in dataclasses.fields(value) if f.init})
    if isinstance(value, torch.Tensor) and value.dim() and value.shape[0] == n:
        return value[rows]
    if isinstance(value, list) and len(value) == n:
        return [value[i] for i in rows]
    if isinstance(value, dict):
        return {k: _rows(v, rows, n) for k, v in value.items()}
    return value


def _one_update(ctx, batch):
    """One update with AdamW (lr 1e-3); returns its metrics and, per optimizer step, the
    gradients before clipping by parameter name (gathered whole from the shards)."""
    import torch
    from torch.distributed.tensor import DTensor

    import trainer.stages.rl as rl

    ctx.optimizer = torch.optim.AdamW(ctx.model.parameters(), lr=1e-3)
    grads, real_clip = [], torch.nn.utils.clip_grad_norm_

    def clip(parameters, *args, **kwargs):  # the update clips right before its optimizer step
        parameters = list(parameters)
        named = {id(p): n for n, p in ctx.model.named_parameters(remove_duplicate=False)}
        grads.append({named[id(p)]: (p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad).clone()
                      for p in parameters if p.grad is not None})
        return real_clip(parameters, *args, **kwargs)

    torch.nn.utils.clip_grad_norm_ = clip
    try:
        metrics, finite = rl.update(ctx, batch, 1, rl.PhaseTimer())
    finally:
        torch.nn.utils.clip_grad_norm_ = real_clip
    assert finite
    return metrics, grads


def job_update(out: str, args: dict) -> None:
    """For every case: the one-process update (before the process group exists), then the
    same update on ``world`` ranks holding their block of whole groups; the max abs weight
    difference after the update and the loss metrics of both.  ``tokens``: the ranks cut
    micro-batches by that token budget (the one process by ``micro`` sequences), and count
    the update's micro-batch plans whose number another rank exceeded (``uneven``)."""
    import trainer.parallel.batches as batches
    import trainer.stages.rl as rl
    from trainer.parallel.group import rank, world
    from trainer.parallel.run import shard_policy
    from trainer.parallel.shard import full_tensors
    from trainer.stages.rl import PhaseTimer, collect_batch

    prepared = []
    for case in args["cases"]:
        method, agg, minibatches, mode, *teacher = case  # a fifth entry: algo.teacher
        ctx = _context(out, method, mode, args.get("lora", 0), loss_agg=agg, minibatch_size=6 // minibatches,
                       kl_coef=0.01, micro_batch_size=args.get("micro", 2), **dict(zip(["teacher"], teacher)))
        batch = _with_advantages(collect_batch(ctx, 1, PhaseTimer()))
        start = (copy.deepcopy(ctx.model), copy.deepcopy(ctx.reference))
        single = copy.copy(ctx)
        single.model = copy.deepcopy(start[0])
        metrics, grads = _one_update(single, copy.deepcopy(batch))
        prepared.append((case, ctx, batch, start, single.model.state_dict(), metrics, grads))
    if args.get("break_weighting"):  # the check that the test can fail: local counts only
        batches.global_counts = lambda mask: (None, None)
        import trainer.stages.rl as rl
        rl.global_counts = batches.global_counts
    _init()
    results = []
    for case, ctx, batch, start, expected, metrics, grads in prepared:
        n = len(batch.trajectories)
        share = n // world()
        mine = list(range(rank() * share, (rank() + 1) * share))  # whole groups: 3 rows each
        ranked = copy.copy(ctx)
        ranked.model, ranked.reference = copy.deepcopy(start[0]), copy.deepcopy(start[1])
        if args.get("tokens"):
            ranked.cfg = dataclasses.replace(ctx.cfg, algo=dataclasses.replace(
                ctx.cfg.algo, micro_batch_tokens=args["tokens"]))
        shard_policy(ranked)
        uneven = []

        def most(count: int, seen: list = uneven) -> int:  # the update's pairing of micro-batch counts
            top = batches.most(count)
            seen.append(top > count)
            return top

        rl.most = most
        try:
            got, got_grads = _one_update(ranked, _rows(copy.deepcopy(batch), mine, n))
        finally:
            rl.most = batches.most
        assert len(got_grads) == len(grads), (len(got_grads), len(grads))
        grad_diff = max(float((b[k] - a[k]).abs().max() / a[k].abs().max().clamp(min=1e-12))
                        for a, b in zip(grads, got_grads) for k in a)
        diff = 0.0
        for name, tensor in full_tensors(ranked.model):
            diff = max(diff, float((tensor - expected[name]).abs().max()))
        change = {k: float((expected[k] - v).abs().max()) for k, v in start[0].state_dict().items()}
        moved = max(change.values())
        results.append({"case": case, "max_abs_diff": diff, "moved": moved, "grad_rel_diff": grad_diff,
                        "moved_base": max(v for k, v in change.items() if ".lora_" not in k),
                        "grad_names": sorted({n for g in got_grads for n in g}),
                        "loss_single": metrics.get("loss/total"), "loss_ranks": got.get("loss/total"),
                        "uneven": sum(uneven)})
    _write(out, "update", results)


# ---- job "stage1": Stage 1 on the sharded policy equals one process's Stage 1


def _stage1(ctx):
    """Stage 1 on ``ctx``; its metrics and, per optimizer step, the gradients before clipping
    by parameter name (gathered whole from the shards)."""
    import torch
    from torch.distributed.tensor import DTensor

    from trainer.stages.skill_sft import skill_sft

    grads, real_clip = [], torch.nn.utils.clip_grad_norm_

    def clip(parameters, *args, **kwargs):  # sft clips right before each optimizer step
        parameters = list(parameters)
        named = {id(p): n for n, p in ctx.model.named_parameters()}
        grads.append({named[id(p)]: (p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad).clone()
                      for p in parameters if p.grad is not None})
        return real_clip(parameters, *args, **kwargs)

    torch.nn.utils.clip_grad_norm_ = clip
    try:
        metrics = skill_sft(ctx)
    finally:
        torch.nn.utils.clip_grad_norm_ = real_clip
    return metrics, grads


def _grad_diff(expected: list[dict], got: list[dict]) -> float:
    """The largest gradient difference relative to the parameter's largest entry, over steps."""
    assert len(expected) == len(got) and all(a.keys() == b.keys() for a, b in zip(expected, got))
    return max(float((b[k] - a[k]).abs().max() / a[k].abs().max().clamp(min=1e-12))
               for a, b in zip(expected, got) for k in a)


def job_stage1(out: str, args: dict) -> None:
    """Stage 1 in one process (rank 0, before the process group exists), annotated by the
    fake endpoint under ``/single``; then on ``world`` ranks with the policy sharded first,
    under ``/ranks``: the examples, gradients at every step and weights against the one
    process's, the KL reference :func:`~trainer.run.components.start_rl` freezes from the
    shards, the warm-start cache written from the shards, and the writer panel's metrics;
    last, with every rank training the whole of each
    minibatch (``/broken``: what summing without a block each gives), its gradients."""
    import torch

    import trainer.stages.sft as sft
    from trainer.models.backbones import load_pretrained
    from trainer.parallel.group import world
    from trainer.parallel.run import shard_policy
    from trainer.parallel.shard import full_tensors, is_sharded
    from trainer.run.components import build_components, start_rl
    from trainer.run.resolve import load_config, resolve
    from trainer.stages.skill_sft import writer_validity
    from trainer.stages.warm_start import load_cached_warm_start, save_warm_start

    def context(phase: str):
        cfg = resolve(load_config(MICRO, [*args["overrides"], f"writer.endpoint={args['endpoint']}/{phase}/v1",
                                          f"output.dir={out}/{phase}"]))
        return build_components(cfg)

    single = None
    if os.environ["RANK"] == "0":
        ctx = context("single")
        start = {k: v.clone() for k, v in ctx.model.state_dict().items()}
        metrics, grads = _stage1(ctx)
        single = (metrics, grads, {k: v.clone() for k, v in ctx.model.state_dict().items()}, ctx.replay, start)
    _init()
    ctx = context("ranks")
    shard_policy(ctx)
    metrics, grads = _stage1(ctx)
    weights = {k: v.clone() for k, v in full_tensors(ctx.model)}
    save_warm_start(ctx, Path(out) / "warm", {})  # a sharded warm start's cache: every rank gathers
    start_rl(ctx)
    reference = {k: v.clone() for k, v in full_tensors(ctx.reference)}
    result = {"metrics": metrics, "panel": writer_validity(ctx, size=4),
              "reference_sharded": is_sharded(ctx.reference) and is_sharded(ctx.model),
              "reference_diff": max(float((reference[k] - v).abs().max()) for k, v in weights.items()),
              "reference_trains": any(p.requires_grad for p in ctx.reference.parameters())}
    broken = context("broken")
    shard_policy(broken)
    sft.blocks = lambda n: [(0, n)] * world()  # every rank backpropagates the whole minibatch
    _, broken_grads = _stage1(broken)
    if single is not None:
        expected_metrics, expected_grads, expected, examples, start = single
        saved = load_pretrained(load_cached_warm_start(Path(out) / "warm"), torch.float32, "cpu")[0].state_dict()
        result.update({
            "single_metrics": expected_metrics, "steps": len(grads),
            "same_examples": ctx.replay == examples and len(examples) > 0,
            "max_abs_diff": max(float((weights[k] - v).abs().max()) for k, v in expected.items()),
            "moved": max(float((expected[k] - v).abs().max()) for k, v in start.items()),
            "grad_rel_diff": _grad_diff(expected_grads, grads),
            "broken_grad_rel_diff": _grad_diff(expected_grads, broken_grads),
            "export_diff": max(float((saved[k] - v).abs().max()) for k, v in weights.items())})
    _write(out, "stage1", result)


# ---- job "train": trainer.run.loop.train on every rank


def job_train(out: str, args: dict) -> None:
    import torch

    import trainer.run.loop as loop
    from trainer.parallel.shard import full_tensors  # noqa: F401  (the ranks' module, imported once)
    from trainer.run.resolve import load_config

    _init()
    cfg = load_config(args["config"], args["overrides"])
    if args.get("no_push"):  # the engines keep the weights they started with
        from trainer.models.vllm_backend import VLLMBackend

        VLLMBackend._push = lambda self: setattr(self, "_synced", None)
    if args.get("crash_in_step"):
        real, calls = loop.update, []

        def crash(*a, **k):
            calls.append(1)
            if len(calls) == args["crash_in_step"]:
                raise KeyboardInterrupt(f"simulated kill in step {len(calls)}")
            return real(*a, **k)

        loop.update = crash
    start = time.perf_counter()
    try:
        result = loop.train(cfg, resume=args.get("resume", False), progress=False)
    except KeyboardInterrupt as exc:
        _write(out, "train", {"crashed": str(exc)})
        return
    _write(out, "train", {"run_id": result.run_id, "status": result.status, "final": result.final_metrics,
                          "seconds": time.perf_counter() - start, "threads": torch.get_num_threads()})


# ---- job "generate": the transformers backend on a sharded policy


def job_generate(out: str, args: dict) -> None:
    """Sample with the policy whole (before the process group exists), then with the same
    policy sharded under :func:`~trainer.run.components.generating`'s context, each rank making a
    different number of calls with prompts of different lengths; then a forward and backward
    on the shards (they are sharded again) and the full tensors against the original state."""
    import copy

    import torch
    from torch.distributed.tensor import DTensor

    from trainer.models.backbones import load_pretrained
    from trainer.models.transformers_backend import TransformersBackend
    from trainer.parallel.shard import full_tensors, shard, unsharded
    from trainer.stages.warm_start import bundle_path

    model, tok = load_pretrained(str(bundle_path("ezpoints")), torch.float32, "cpu")
    rank = int(os.environ["RANK"])
    texts = ["Reach 24 with 3 8 1 1.", "Numbers 4 4 6 2, target 10.", "Start."][: 2 + rank]
    calls = [[tok.encode(t) for t in texts[: 1 + i]] for i in range(1 + rank)]  # rank r: r + 1 calls

    def sample(backend):
        start = time.perf_counter()
        got = [[(g.token_ids, g.logprobs) for g in backend.generate(
            prompts, max_new_tokens=args.get("tokens", 24), temperature=1.0, seeds=list(range(len(prompts))),
            stop_strings=(), stop_token_ids=[])] for prompts in calls]
        return got, time.perf_counter() - start

    original = copy.deepcopy(model.state_dict())
    expected, plain_s = sample(TransformersBackend(model, tok))
    _init()
    shard(model)
    full = sum(p.numel() * p.element_size() for p in original.values())
    local = sum(p.to_local().numel() * p.element_size() for p in model.parameters())
    with unsharded(model):
        got, sharded_s = sample(TransformersBackend(model, tok))
    assert all(isinstance(p, DTensor) for p in model.parameters())  # sharded again
    loss = model(input_ids=torch.tensor([calls[0][0]])).logits.float().logsumexp(-1).sum()
    loss.backward()
    diff, keys = 0.0, []
    for name, tensor in full_tensors(model):
        keys.append(name)
        diff = max(diff, float((tensor - original[name]).abs().max()))
    _write(out, "generate", {"same": got == expected, "calls": len(calls), "plain_s": plain_s,
                             "sharded_s": sharded_s, "full_bytes": full, "shard_bytes": local,
                             "keys_equal": keys == list(original), "full_tensor_diff": diff})


# ---- job "heads": gradients of a tied and an untied LM head through the sharded root


def job_heads(out: str, args: dict) -> None:
    """The scoring path (decoder, then the head called on its own) on a sharded model gives
    the one-process gradients of every parameter, the LM head tied to the embeddings or not
    (Qwen2.5-7B's is untied): the relative max difference per case."""
    import copy

    import torch

    from trainer.episodes.samples import TokenSequence
    from trainer.episodes.scoring import sequence_logprobs
    from trainer.models.backbones import load_pretrained
    from trainer.parallel.shard import shard
    from trainer.stages.warm_start import bundle_path

    sequences = [TokenSequence(tuple(range(5, 5 + n)), (0,) * 3 + (1,) * (n - 3), (-1,) * 3 + (0,) * (n - 3))
                 for n in (9, 14, 6, 11)]
    cases = {}
    for tied in (True, False):
        model, _ = load_pretrained(str(bundle_path("ezpoints")), torch.float32, "cpu")
        if not tied:
            model.config.tie_word_embeddings = False
            model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone() * 1.5)
        cases[tied] = (model, copy.deepcopy(model))

    def loss(m, rows):
        logp = sequence_logprobs(m, [sequences[i] for i in rows], 2, grad=True, with_entropy=False)[0]
        return logp.sum() / 4  # a share of the 4-sequence batch

    expected = {}
    for tied, (_, single) in cases.items():
        loss(single, range(4)).backward()
        expected[tied] = {n: p.grad.clone() for n, p in single.named_parameters()}
    _init()
    rank = int(os.environ["RANK"])
    result = {}
    for tied, (model, _) in cases.items():
        shard(model)
        loss(model, [2 * rank, 2 * rank + 1]).backward()
        got = {n: p.grad.full_tensor() for n, p in model.named_parameters(remove_duplicate=False)}
        result["tied" if tied else "untied"] = max(
            float((got[n] - g).abs().max() / g.abs().max().clamp(min=1e-12)) for n, g in expected[tied].items())
    _write(out, "heads", result)


def job_reference(out: str, args: dict) -> None:
    """The reference of a sharded bfloat16-compute policy, built sharded
    (:func:`~trainer.parallel.shard.frozen_shards`): the float32 bytes allocated while it is
    built, whether each local shard is the policy's cast, and its log-probs against the
    one-process reference (:func:`~trainer.models.precision.frozen_copy`)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from trainer.models.backbones import load_pretrained
    from trainer.models.precision import frozen_copy
    from trainer.parallel.shard import frozen_shards, is_sharded, shard, unsharded
    from trainer.stages.warm_start import bundle_path

    class Float32Bytes(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.bytes = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            result = func(*args, **(kwargs or {}))
            inputs = {t.data_ptr() for t in (*args, *(kwargs or {}).values())
                      if isinstance(t, torch.Tensor) and t.device.type != "meta"}
            for t in result if isinstance(result, (tuple, list)) else (result,):
                if isinstance(t, torch.Tensor) and t.dtype == torch.float32 and t.device.type != "meta" \
                        and not t._is_view() and t.data_ptr() not in inputs:
                    self.bytes += t.numel() * t.element_size()
            return result

    model, _ = load_pretrained(str(bundle_path("ezpoints")), torch.bfloat16, "cpu")
    ids = torch.arange(5, 25)[None]
    with torch.no_grad():
        expected = frozen_copy(model)(ids).logits.float()
    _init()
    shard(model)
    with Float32Bytes() as probe:
        reference = frozen_shards(model)
    policy = dict(model.named_parameters())
    same = all(torch.equal(p.to_local(), policy[n].to_local().to(torch.bfloat16))
               for n, p in reference.named_parameters())
    with torch.no_grad(), unsharded(reference):
        got = reference(ids).logits.float()
    _write(out, "reference", {
        "float32_bytes": probe.bytes, "sharded": is_sharded(reference), "shards_equal": same,
        "dtypes": sorted({str(p.dtype) for p in reference.parameters()}),
        "trains": reference.training or any(p.requires_grad for p in reference.parameters()),
        "logits_max_diff": float((got - expected).abs().max())})


# ---- job "nll": the SFT stages' backward on a sharded model, ranks cutting unequal micro-batch counts


def job_nll(out: str, args: dict) -> None:
    """:func:`trainer.stages.sft.nll_backward` by a token budget on two ranks whose examples
    pack into 3 and 1 micro-batches: the summed gradients of the sharded model against one
    process running both ranks' calls (relative max difference)."""
    import torch

    from trainer.episodes.samples import TokenSequence
    from trainer.episodes.scoring import MicroBatching
    from trainer.models.backbones import load_pretrained
    from trainer.parallel.shard import shard
    from trainer.stages.sft import nll_backward
    from trainer.stages.warm_start import bundle_path

    def example(n: int) -> TokenSequence:
        return TokenSequence(tuple(range(5, 5 + n)), (0,) * 3 + (1,) * (n - 3), (-1,) * 3 + (0,) * (n - 3))

    shares = [[example(n) for n in (9, 14, 6, 11)], [example(n) for n in (8, 7)]]
    budget = MicroBatching(tokens=20)  # rank 0: [14], [11], [9, 6]; rank 1: [8, 7]
    single, _ = load_pretrained(str(bundle_path("ezpoints")), torch.float32, "cpu")
    model = copy.deepcopy(single)
    for share in shares:
        nll_backward(single, share, micro_batch=budget)
    expected = {n: p.grad.clone() for n, p in single.named_parameters()}
    _init()
    rank = int(os.environ["RANK"])
    shard(model)
    nll_backward(model, shares[rank], micro_batch=budget)
    got = {n: p.grad.full_tensor() for n, p in model.named_parameters(remove_duplicate=False)}
    _write(out, "nll", {"plans": [len(budget.plan([len(s) for s in share])) for share in shares],
                        "grad_rel_diff": max(float((got[n] - g).abs().max() / g.abs().max().clamp(min=1e-12))
                                             for n, g in expected.items())})


JOBS = {"update": job_update, "stage1": job_stage1, "train": job_train, "generate": job_generate, "heads": job_heads,
        "reference": job_reference, "nll": job_nll}


if __name__ == "__main__":
    if sys.argv[1] == "launch":
        world_size, job, out, payload = int(sys.argv[2]), sys.argv[3], sys.argv[4], json.loads(sys.argv[5])
        print(f"{job}: {launch(world_size, job, out, payload):.1f} s")
    else:
        JOBS[sys.argv[2]](sys.argv[3], json.loads(sys.argv[4]))
        _finish()
