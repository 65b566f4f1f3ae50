"""The stages of a run, in order: the warm start of a tiny backbone
(:mod:`~trainer.stages.warm_start`), SEED's Stage 1 hindsight-skill SFT
(:mod:`~trainer.stages.skill_sft`; both fine-tune with :mod:`~trainer.stages.sft`), the RL
step (:mod:`~trainer.stages.rl`: rollout, write, score, advantage, update) and evaluation on
the fixed panels (:mod:`~trainer.stages.evaluate`)."""
