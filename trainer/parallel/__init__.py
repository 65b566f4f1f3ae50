"""Data parallelism of one run over ranks started by a launcher (Ray Train's TorchTrainer,
or spawned gloo ranks in the tests): process-group facts (:mod:`~trainer.parallel.group`),
FSDP2 sharding and whole-model reads (:mod:`~trainer.parallel.shard`), each rank's share of a
step and the global reductions (:mod:`~trainer.parallel.batches`), sharded checkpoints
(:mod:`~trainer.parallel.checkpoint`) and the loop's rank-specific steps
(:mod:`~trainer.parallel.run`).  Without an initialized process group every helper is the
one-process identity, so ``trainer/algos`` and the single-process path never change."""

# The launcher's contract (sweeps/cli starts the ranks, e.g. Ray Train's TorchTrainer with
# ScalingConfig(num_workers=parallel.workers) and TorchConfig(backend="nccl" on GPUs, "gloo"
# on CPUs)): in each of parallel.workers processes, with RANK, WORLD_SIZE and LOCAL_RANK set
# and torch.distributed.init_process_group called, call
#     trainer.run.loop.train(cfg, run_id=run_id, resume=resume, progress=False)
# with the same cfg (parallel.workers == WORLD_SIZE, checked), the same output.dir on a
# filesystem every rank sees, and the same run_id (rank 0's is used). Rank 0 alone talks to
# MLflow; every rank returns the same RunResult. No process group: today's single process.
