"""Analysis of tracked studies: computes, never draws (reports/ draws what it returns).

* ``analysis.loader``: MLflow runs -> tidy frames (runs, metric histories, per-turn records).
* ``analysis.stats``: mean/std, bootstrap and t CIs, IQM, paired tests, Holm, ``summarize``,
  ``per_cell``.
* ``analysis.ranks``: Spearman rho, weighted and with a cluster-bootstrap interval.
* ``analysis.diagnostics``: gate sensitivity, GiGPO step advantages, regional alignment,
  value alignment, staleness, writer reliability, compute cost; each returns a tidy frame
  or a ``Skipped`` with the reason.
* ``analysis.summaries``: a paper table's rows, per metric, against the table's baseline.
* ``analysis.cells``: per-run diagnostics onto table rows, statistics over seeds.
* ``analysis.curves``: training and evaluation curves with bands over seeds, budget axes.
* ``analysis.aggregate``: rliable aggregates across tasks (IQM, P(improvement), profiles).
* ``analysis.sensitivity``: a method's final metric against the params it varied.
* ``analysis.recovery``: ETRO's post-error recovery over tasks; ``analysis.theory``: closed
  forms of SEED's theory.

Modules are imported explicitly (``from analysis.stats import summarize``) so that pure
statistics do not pull in MLflow.
"""
