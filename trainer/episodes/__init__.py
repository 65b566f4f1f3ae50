"""Episodes as the model sees them: the sample builder that turns trajectories into token
sequences (:mod:`~trainer.episodes.samples`: window and full contexts, skill splicing), the
batched rollout (:mod:`~trainer.episodes.rollout`), the log-probs of sampled action tokens
(:mod:`~trainer.episodes.scoring`) and the per-turn records (:mod:`~trainer.episodes.records`)."""
