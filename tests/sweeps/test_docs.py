"""docs/: the study-file reference agrees with the schema (keys, types, defaults, allowed
values), and the README links every page, which exists and cites what it should."""

from __future__ import annotations

import re
from dataclasses import fields

from support.paths import ROOT
from sweeps import docs
from sweeps.study import (
    PARAM_FIELDS,
    REQUIRED,
    RESOURCE_FIELDS,
    SEARCH_FIELDS,
    STUDY_FIELDS,
    Resources,
    SearchSpec,
    parse_study,
)
from trainer.config import RunConfig, flatten


def test_the_page_is_generated_from_the_schema():
    assert docs.main(["--check"]) == 0, "run `python -m sweeps.docs`"


def test_the_check_fails_when_page_and_schema_disagree(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "study-file.md"
    stale.write_text(
        docs.render().replace(
            "| `search.trials` | integer | `8` |", "| `search.trials` | integer | `10` |"
        )
    )
    monkeypatch.setattr(docs, "PAGE", stale)
    assert docs.main(["--check"]) == 1
    assert "out of date" in capsys.readouterr().err


def test_documented_defaults_are_what_the_parser_gives(tmp_path):
    study = parse_study(
        {
            "name": "d",
            "search": {"space": {"algo.beta_opd": {"type": "float", "low": 1.0, "high": 2.0}}},
        },
        folder=tmp_path,
    )
    assert study.max_concurrent == STUDY_FIELDS["max_concurrent"].default
    assert study.tracking_uri == STUDY_FIELDS["tracking_uri"].default
    assert study.ray_address == STUDY_FIELDS["ray_address"].default
    for key in ("trials", "sampler_seed", "seeds_per_trial", "metric", "mode"):
        assert getattr(study.search, key) == SEARCH_FIELDS[key].default == getattr(SearchSpec, key)
    assert study.search.storage.endswith("/" + SEARCH_FIELDS["storage"].default)
    assert study.search.space[0].log is PARAM_FIELDS["log"].default
    for f in fields(Resources):
        value = getattr(study.resources, f.name)
        value = dict(value) if f.name == "custom" else value  # pairs, documented as a mapping
        assert value == RESOURCE_FIELDS[f.name].default
    assert set(RESOURCE_FIELDS) == {f.name for f in fields(Resources)}
    assert STUDY_FIELDS["name"].default is REQUIRED


def test_every_run_config_key_is_documented_with_its_default_and_meaning():
    page = (ROOT / "docs" / "study-file.md").read_text()
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `([\w.]+)` \|.*$", page, re.M)}
    for key, default in flatten(RunConfig()).items():
        assert key in rows, key
        cells = [c.strip() for c in rows[key].split(" | ")]
        assert cells[2] == docs._show(default), (key, cells)
        assert cells[4].rstrip(" |"), f"{key} has no meaning; add a comment above the field"
    assert "| `algo.method` | string | `grpo` |" in page
    assert "| `algo.std_mode` | string | `unbiased` | unbiased, population, none |" in page
    assert "| `algo.lambda_opd` | number or null | `null` | >= 0 |" in page


def test_readme_links_every_docs_page_and_the_concepts_cite_both_papers():
    readme = (ROOT / "README.md").read_text()
    for page in ("docs/concepts.md", "docs/study-file.md", "docs/mlflow-ui.md"):
        assert f"]({page})" in readme, page
        assert (ROOT / page).is_file(), page
    concepts = (ROOT / "docs" / "concepts.md").read_text()
    assert "arxiv.org/abs/2607.14777" in concepts and "arxiv.org/abs/2610.23048" in concepts
    for term in (
        "GRPO",
        "OPD",
        "hindsight skill",
        "SEED",
        "ETRO",
        "gate",
        "boundary",
        "cell",
        "study",
        "beta_opd",
        "lambda_opd",
        "alpha",
    ):
        assert re.search(rf"^#+ .*{re.escape(term)}", concepts, re.M | re.I), term
