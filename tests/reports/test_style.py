"""reports.style: every method's label comes from its MethodSpec and reads as the reports
printed it before the labels moved there; the table order follows the paper layouts; each
label of a figure gets its own colour and marker."""

from __future__ import annotations

import pytest

from reports import style
from reports.layouts import LAYOUTS
from trainer.algos.methods import METHODS, REMOVED_METHODS, method_names

# The labels reports printed when they came from reports.layouts.METHOD_LABELS (ab953e3).
PRINTED = {
    "grpo": "GRPO", "grpo_opsd": "GRPO+OPSD", "opsd": "OPSD", "skill_sd": "Skill-SD",
    "rlsd": "RLSD", "sdar": "SDAR", "gated_static": "Gated static skill", "seed": "SEED",
    "etro": "ETRO", "seed_no_sft": "w/o skill SFT", "seed_no_self_evolving": "w/o self-evolving",
    "seed_stale": "stale analyzer", "seed_constrained": "constrained writer",
    "seed_writer_replay": "writer replay (not SEED)",
    "seed_static": "static skill library",
    "seed_static_oracle": "static oracle library", "skill_grpo": "Skill-GRPO",
    "skill_grpo_star": "Skill-GRPO*", "skill_prompt": "Skill-Prompt", "vanilla": "Vanilla",
    "etro_global_positive": "Global Positive", "etro_global_negative": "Global Negative",
    "etro_global_both": "Global Both", "etro_positive_only": "Positive Only",
    "etro_negative_only": "Negative Only", "etro_suffix_positive": "Suffix Positive",
    "etro_suffix_negative": "Suffix Negative", "etro_random_boundary": "Random Boundary",
    "etro_neg_prefix": "Negative at prefix", "etro_neg_suffix": "Negative at suffix",
    "opid": "OPID", "icsd": "ICSD",
    "opd_only": "OPD only", "opd_only_shuffled": "OPD only (shuffled skills)",  # issue 44
    "opd_only_signed": "OPD only, signed", "opd_only_signed_shuffled": "OPD only, signed (shuffled skills)",
}


@pytest.mark.parametrize("name", method_names())
def test_every_method_is_labelled_from_its_spec_as_before(name):
    assert style.method_label(name) == METHODS[name].label == PRINTED[name]
    assert style.variant_label(name, name) == PRINTED[name]


def test_labels_cover_methods_and_reported_rows_only_and_tell_them_apart():
    labels = style.method_labels()
    assert labels == PRINTED
    assert len(set(labels.values())) == len(labels)
    # the names that are not methods are the reported rows, SDAR (removed) among them
    assert set(style.REPORTED_LABELS) == set(PRINTED) - set(METHODS)
    assert set(REMOVED_METHODS) <= set(style.REPORTED_LABELS)
    assert style.method_labels({"seed": "SEED (full)"})["seed"] == "SEED (full)"
    assert style.method_label("not-a-method") == "not-a-method"


def test_variant_and_row_labels():
    assert style.variant_label("seed", "seed (β=1)") == "SEED (β=1)"
    assert style.variant_label("seed", "seed (β=1)", {"seed": "SEED (full)"}) == "SEED (full), β=1"
    assert style.row_label("seed (β=1) [cell abc123]") == "SEED (β=1) [cell abc123]"
    assert style.row_label("etro") == "ETRO" and style.row_label("icsd") == "ICSD"


def test_method_order_is_the_paper_tables_first_appearance_order():
    rows = tuple(dict.fromkeys(m for layout in LAYOUTS.values() for m in layout.methods))
    assert style.METHOD_ORDER == rows
    assert style.method_rank("grpo") == 0 and style.method_rank("etro") == 5  # Table 1 order
    assert style.method_rank("not-a-method") == len(style.METHOD_ORDER)
    assert style.table_order([(1, "SEED (β=20)"), (1, "SEED (β=5)"), (0, "GRPO"),
                              (1, "SEED (β=5)")]) == ["GRPO", "SEED (β=5)", "SEED (β=20)"]


def test_styles_tell_twenty_methods_apart():
    labels = [f"m{i}" for i in range(20)]
    styles = style.styles(labels)
    assert len({(s["color"], s["marker"]) for s in styles.values()}) == 20
    assert len({s["color"] for s in styles.values()}) == 20
