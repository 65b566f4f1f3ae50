"""One run: its config resolved (:mod:`~trainer.run.resolve`), its components wired
(:mod:`~trainer.run.components`), the loop over the stages (:mod:`~trainer.run.loop`),
checkpoints (:mod:`~trainer.run.checkpoint`), MLflow (:mod:`~trainer.run.tracking`, the store
:mod:`~trainer.run.store`), the memory it needs (:mod:`~trainer.run.memory`) and the optional
packages it needs (:mod:`~trainer.run.dependencies`)."""
