"""Analysis of tracked studies: computes, never draws.

* ``analysis.loader``: MLflow runs -> tidy frames (runs, metric histories, per-turn records).
* ``analysis.stats``: mean/std, bootstrap CIs, IQM, paired tests, Holm, ``summarize``.
* ``analysis.diagnostics``: gate sensitivity, GiGPO step advantages, regional alignment,
  value alignment, staleness, writer reliability, compute cost; each returns a tidy frame
  or a ``Skipped`` with the reason.

Modules are imported explicitly (``from analysis.stats import summarize``) so that pure
statistics do not pull in MLflow.
"""
