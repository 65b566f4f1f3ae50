"""Paper-style figures (matplotlib, Agg, no pyplot state), one module per kind: each function
takes analysis frames and an output path stem, writes ``<stem>.png`` and ``<stem>.pdf`` and
returns both paths, or returns the :class:`~analysis.diagnostics.Skipped` it was given / that
explains what is missing.

* :mod:`.curves` -- :func:`training_curves`: per table row, the mean over seeds of a
  training metric at each step with its 95% t interval (ETRO Fig. 3, SEED Fig. 8);
  :func:`evaluation_curves`: evaluation success against step, environment steps and
  tokens; :func:`performance_profiles`: rliable's profiles across tasks.
* :mod:`.gate` -- :func:`gate_sensitivity`: final metric vs beta_opd (or lambda_opd) with
  CI error bars (SEED review, critique 4); :func:`gate_curves`: the measured gate g by
  region (from the per-turn records), final success against beta_opd when a study varies
  it, and g = sigmoid(beta * Delta) at the study's betas with the measured Delta range
  (SEED Eq. 1).
* :mod:`.alignment` -- :func:`regional_alignment`: Spearman rho of delta_pos / delta_neg
  with GiGPO step advantages per region (prefix / error / suffix) with cluster-bootstrap
  CIs (ETRO Fig. 1); :func:`delta_profile`: mean |Delta| by turn and by offset from the
  diagnosed error (where a skill lands).
* :mod:`.cost` -- :func:`compute_cost`: stacked wall time per phase per method, overhead vs
  GRPO.
* :mod:`.studies` -- :func:`sensitivity`: a sensitivity study as a curve, a heatmap or a
  search's slices and contours.
* :mod:`.base` -- what they share (saving, panels, legends, labels in table order).

The figure functions are imported here, so ``reports.figures.<name>`` names each of them.
"""

from reports.figures.alignment import delta_profile, regional_alignment
from reports.figures.cost import compute_cost
from reports.figures.curves import evaluation_curves, performance_profiles, training_curves
from reports.figures.gate import gate_curves, gate_sensitivity
from reports.figures.studies import sensitivity

__all__ = ["compute_cost", "delta_profile", "evaluation_curves", "gate_curves", "gate_sensitivity",
           "performance_profiles", "regional_alignment", "sensitivity", "training_curves"]
