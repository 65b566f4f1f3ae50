"""Hindsight: the analyzer's prompt and parser (:mod:`~trainer.hindsight.analyzer`) and the
writers that answer it, one interface for the policy itself, a frozen snapshot, the oracle,
an external endpoint and a static library (:mod:`~trainer.hindsight.writers`)."""
