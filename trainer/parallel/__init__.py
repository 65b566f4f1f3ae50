"""Data parallelism of one run over ranks started by a launcher (Ray Train's TorchTrainer,
or spawned gloo ranks in the tests): process-group facts (:mod:`~trainer.parallel.group`),
FSDP2 sharding and whole-model reads (:mod:`~trainer.parallel.shard`), each rank's share of a
step and the global reductions (:mod:`~trainer.parallel.batches`), sharded checkpoints
(:mod:`~trainer.parallel.checkpoint`) and the loop's rank-specific steps
(:mod:`~trainer.parallel.run`).  Without an initialized process group every helper is the
one-process identity, so ``trainer/algos`` and the single-process path never change."""
