"""Checkpoints of a sharded run (``torch.distributed.checkpoint``), in the layout of
:mod:`trainer.run.checkpoint` plus the shards::

    model/                 an HF folder (safetensors, config, tokenizer) written by rank 0
                           from full tensors gathered one at a time: evaluation, the vLLM
                           engine and a resume's model all load it
    sharded/               DCP: the model's and AdamW's shards, each rank writing its own
    rng_rank<R>.pt         each rank's RNG states
    trainer_state.pt       the step, run id, counters (and rank 0's RNG), as one process's
    COMPLETE               written last, by rank 0, after every rank has finished

``--resume`` needs the same number of ranks (checked).  The run's KL reference is saved once
as DCP shards in ``checkpoints/rl_init_sharded/`` (one process: ``rl_init.pt``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from safetensors.torch import save_file
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)

from trainer.models.lora import has_adapters, save_adapter
from trainer.parallel.group import barrier, is_main, rank, world
from trainer.parallel.shard import full_tensors, unique_keys
from trainer.run.checkpoint import (
    TrainerState,
    checkpoint_dir,
    list_checkpoints,
    rng_state,
    set_rng_state,
)

SHARDS = "sharded"
RL_INIT_SHARDS = "rl_init_sharded"
SHARD_BYTES = 2 * 2**30  # an exported safetensors file holds at most about this much


def _rng_file(path: Path, r: int) -> Path:
    return path / f"rng_rank{r}.pt"


def save_sharded(root: str | Path, state: TrainerState, model, tokenizer, optimizer, keep: int = 2) -> Path:
    """Write a complete sharded checkpoint of ``state.step`` (every rank calls it); prune all
    but the newest ``keep``."""
    path = checkpoint_dir(root, state.step)
    if is_main():
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
    barrier()
    export_model(model, tokenizer, path / "model")
    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=str(path / SHARDS))
    torch.save(rng_state(), _rng_file(path, rank()))
    if is_main():
        torch.save({"state": state.__dict__, "optimizer": None, "rng": rng_state(), "world": world()},
                   path / "trainer_state.pt")
    barrier()
    if is_main():
        (path / "COMPLETE").write_text("ok\n")
        for old in list_checkpoints(root)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    barrier()
    return path


def load_sharded(path: str | Path, model, optimizer) -> TrainerState:
    """Restore the shards of the model and AdamW, this rank's RNG states and the trainer
    state from checkpoint ``path`` (written with as many ranks as now)."""
    path = Path(path)
    blob = torch.load(path / "trainer_state.pt", weights_only=False)
    if blob.get("world", 1) != world() or not (path / SHARDS).is_dir():
        raise ValueError(f"{path} was written by {blob.get('world', 1)} rank(s) "
                         f"{'without' if not (path / SHARDS).is_dir() else 'with'} shards; resume it with "
                         f"parallel.workers={blob.get('world', 1)} (now {world()})")
    model_state, optim_state = get_state_dict(model, optimizer)
    shards = {"model": model_state, "optim": optim_state}
    dcp.load(shards, checkpoint_id=str(path / SHARDS))
    set_state_dict(model, optimizer, model_state_dict=shards["model"], optim_state_dict=shards["optim"])
    set_rng_state(torch.load(_rng_file(path, rank()), weights_only=False))
    return TrainerState(**blob["state"])


def save_reference(reference, root: str | Path) -> None:
    """The sharded KL reference (the policy at the start of RL), once per run."""
    dcp.save({"model": get_model_state_dict(reference)},
             checkpoint_id=str(Path(root) / "checkpoints" / RL_INIT_SHARDS))


def load_reference(reference, root: str | Path) -> bool:
    """Restore the reference saved by :func:`save_reference`; False when there is none."""
    path = Path(root) / "checkpoints" / RL_INIT_SHARDS
    if not path.is_dir():
        return False
    shards = {"model": get_model_state_dict(reference)}
    dcp.load(shards, checkpoint_id=str(path))
    set_model_state_dict(reference, shards["model"])
    return True


def export_model(model, tokenizer, folder: str | Path, shard_bytes: int = SHARD_BYTES) -> None:
    """An HF folder of ``model`` (sharded or not): every rank gathers each full tensor in
    turn (a collective), rank 0 writes them in safetensors files of at most about
    ``shard_bytes`` (so at most one file's tensors are held at once), an index when there
    are several, the config and the tokenizer.  Tied duplicates (the LM head of tied
    embeddings) are left out, as ``save_pretrained`` does."""
    folder = Path(folder)
    if has_adapters(model):  # LoRA: the adapter and the name of its base (trainer.models.lora)
        save_adapter(model, folder)
        if is_main():
            tokenizer.save_pretrained(folder)
        barrier()
        return
    keep = unique_keys(model)
    files: list[dict[str, str]] = []
    part: dict[str, torch.Tensor] = {}
    size = 0

    def flush():
        nonlocal part, size
        if part and is_main():
            name = f"part-{len(files):05d}.safetensors"
            save_file(part, str(folder / name), metadata={"format": "pt"})
            files.append(dict.fromkeys(part, name))
        part, size = {}, 0

    if is_main():
        folder.mkdir(parents=True, exist_ok=True)
    for name, tensor in full_tensors(model):
        if name not in keep:
            continue
        if is_main():
            part[name] = tensor.detach().to("cpu", copy=True).contiguous()
            size += part[name].numel() * part[name].element_size()
        if size >= shard_bytes:
            flush()
    flush()
    if is_main():
        _name_files(folder, files)
        model.config.save_pretrained(folder)
        if getattr(model, "generation_config", None) is not None:
            model.generation_config.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    barrier()


def _name_files(folder: Path, files: list[dict[str, str]]) -> None:
    """HF's names: ``model.safetensors`` alone, else numbered files and their index."""
    if len(files) == 1:
        (folder / next(iter(files[0].values()))).rename(folder / "model.safetensors")
        return
    weight_map = {}
    for i, mapping in enumerate(files):
        final = f"model-{i + 1:05d}-of-{len(files):05d}.safetensors"
        (folder / next(iter(mapping.values()))).rename(folder / final)
        weight_map.update(dict.fromkeys(mapping, final))
    index = {"metadata": {}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=1) + "\n")
