"""sweeps.study: loading/validating study files, expansion into (cell, seed) trials, and
the skip/retry/continue plan, and what a local Ray is started with (no Ray, no MLflow)."""

from __future__ import annotations

import ctypes.util
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from support.paths import EXAMPLES
from sweeps import ray_session
from sweeps.runner import engine_env, reuse_actors
from sweeps.study import load_study, parse_study
from sweeps.trial_runs import plan_trials
from sweeps.trials import expand
from trainer.config import ConfigError
from trainer.run.tracking import cell_id

EXAMPLE = EXAMPLES / "smoke_study.yaml"


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # default outputs go to ./runs/<name>


def _write(tmp_path, data: dict, name: str = "study.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def _study(tmp_path, **extra):
    data = {"name": "s", "base": {"model": {"backbone": "tiny"}},
            "grid": {"algo.method": ["grpo", "seed"], "seed": [0, 1]}, **extra}
    return load_study(_write(tmp_path, data))


def test_example_expands_to_8_trials_in_4_cells(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    study = load_study(EXAMPLE)
    trials = expand(study)
    assert len(trials) == 8 and len({t.cell_id for t in trials}) == 4
    assert study.out_dir == tmp_path / "runs" / "smoke"  # ./runs/<name> of the cwd
    assert study.store_uri == f"sqlite:///{tmp_path / 'runs' / 'smoke' / 'mlruns.db'}"
    first = trials[0]
    assert first.cfg.output.dir == str(tmp_path / "runs" / "smoke" / "trials" / first.name)
    assert first.cfg.tracking.study == "smoke" and first.cfg.tracking.uri == study.store_uri
    assert (first.cfg.algo.method, first.cfg.algo.beta_opd, first.seed) == ("grpo", 1.0, 0)


def test_cell_ids_stable_and_seed_independent(tmp_path):
    a, b = expand(_study(tmp_path)), expand(_study(tmp_path))
    assert [t.key for t in a] == [t.key for t in b]  # same file content -> same ids
    by_method = {}
    for t in a:
        by_method.setdefault(t.cfg.algo.method, set()).add(t.cell_id)
        assert t.cell_id == cell_id(t.cfg)  # the id the run logger tags the run with
    assert all(len(ids) == 1 for ids in by_method.values())  # seeds share the cell
    assert by_method["grpo"] != by_method["seed"]


def test_adding_axis_value_adds_only_new_cells(tmp_path):
    old = expand(_study(tmp_path))
    bigger = _study(tmp_path, grid={"algo.method": ["grpo", "seed", "etro"], "seed": [0, 1]})
    new = expand(bigger)
    assert {t.key for t in old} < {t.key for t in new}
    assert {t.cfg.algo.method for t in new if t.key not in {o.key for o in old}} == {"etro"}


def test_explicit_out_and_tracking_uri(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:////tmp/env.db")
    study = _study(tmp_path, out="results")
    assert study.out_dir == tmp_path / "results"  # relative to the study file
    assert study.store_uri == "sqlite:////tmp/env.db"
    assert _study(tmp_path, tracking_uri="http://h:5000").store_uri == "http://h:5000"
    assert load_study(_write(tmp_path, {"name": "s"}), out=tmp_path / "o").out_dir == tmp_path / "o"
    # --out (the person running the study) may choose any folder; the file may not.
    assert load_study(_write(tmp_path, {"name": "s", "out": "/etc"}), out=tmp_path / "o").out_dir \
        == tmp_path / "o"
    assert _study(tmp_path, out=str(tmp_path / "abs")).out_dir == tmp_path / "abs"


def test_name_and_out_cannot_leave_the_output_folder(tmp_path, monkeypatch):
    """Every path a study writes is under its output folder, whatever the name says."""
    monkeypatch.chdir(tmp_path)
    study = load_study(_write(tmp_path, {"name": "a.b_c-1", "grid": {"seed": [0, 1]}}))
    assert study.out_dir == tmp_path / "runs" / "a.b_c-1"
    for trial in expand(study):
        assert Path(trial.cfg.output.dir).resolve().is_relative_to(study.out_dir)


@pytest.mark.parametrize("data, fragment", [
    ({"name": "s", "grd": {}}, "did you mean 'grid'"),
    ({"name": "s", "grid": {"algo.betta_opd": [1.0]}}, "did you mean 'algo.beta_opd'"),
    ({"name": "s", "grid": {"algo.method": ["sed"]}}, "did you mean 'seed'"),
    ({"name": "s", "grid": {"algo.beta_opd": ["high"]}}, "algo.beta_opd: expected a number"),
    ({"name": "s", "grid": {"algo.beta_opd": 5.0}}, "expected a non-empty list"),
    ({"name": "s", "grid": {"env.name": ["househol"]}}, "did you mean 'household'"),
    ({"name": "s", "resources": {"cpu": 1}}, "did you mean 'cpus'"),
    ({"name": "s/x"}, "name: expected a non-empty name"),
    ({"name": "../../x"}, "name: expected a non-empty name"),
    ({"name": ".."}, "name: expected a non-empty name"),
    ({"name": ".hidden"}, "name: expected a non-empty name"),
    ({"name": "s", "out": "../../x"}, "out: '../../x' is outside the study file's folder"),
    ({"name": "s", "out": "/etc"}, "choose another output folder with --out DIR"),
    ({"name": "s", "out": "ok/../../x"}, "is outside the study file's folder"),
    ({"name": "s", "search": {"space": {"algo.beta_opd": {"type": "float", "low": 1, "high": 5}},
                              "storage": "../../optuna.db"}}, "storage: '../../optuna.db' leaves"),
    ({"name": "s", "search": {"space": {"algo.beta_opd": {"type": "float", "low": 5, "high": 1}}}},
     "low 5 must be below high 1"),
    ({"name": "s", "search": {"space": {"algo.beta_opd": {"type": "uniform"}}}},
     "valid: float, int, categorical"),
    ({"name": "s", "search": {"space": {"algo.beta_opd": {"type": "float", "low": 0, "high": 1,
                                                          "log": True}}}}, "log scale needs low > 0"),
    ({"name": "s", "grid": {"seed": [0]},
      "search": {"space": {"algo.beta_opd": {"type": "float", "low": 1, "high": 5}}}},
     "grid and search cannot be combined"),
])
def test_bad_study_one_line_error(tmp_path, data, fragment):
    with pytest.raises(ConfigError) as info:
        load_study(_write(tmp_path, data))
    message = str(info.value)
    assert fragment in message and "\n" not in message
    assert message.startswith("study.yaml")


def test_search_block_defaults(tmp_path):
    study = _study(tmp_path, grid=None, search={
        "space": {"algo.beta_opd": {"type": "float", "low": 1, "high": 5, "log": True},
                  "algo.method": {"type": "categorical", "choices": ["seed", "etro"]}},
        "seeds_per_trial": 3})
    spec = study.search
    assert [p.key for p in spec.space] == ["algo.beta_opd", "algo.method"]
    assert (spec.space[0].low, spec.space[0].high, spec.space[0].log) == (1.0, 5.0, True)
    assert spec.storage == f"sqlite:///{study.out_dir / 'optuna.db'}"
    assert study.seeds == (0, 1, 2)
    rdb = _study(tmp_path, grid=None, search={"space": {"seed": {"type": "int", "low": 0, "high": 3}},
                                               "storage": "postgresql://u@h/db"})
    assert rdb.search.storage == "postgresql://u@h/db"


def _run(status: str, start: int, run_id: str):
    return SimpleNamespace(info=SimpleNamespace(status=status, start_time=start, run_id=run_id))


def test_plan_skips_finished_and_failed_and_continues_unfinished(tmp_path):
    trials = expand(_study(tmp_path))  # 4 trials
    t0, t1, t2, t3 = trials
    children = {
        t0.key: [_run("FAILED", 1, "a"), _run("FINISHED", 2, "b")],
        t1.key: [_run("FAILED", 1, "c"), _run("FAILED", 5, "d")],
        t2.key: [_run("RUNNING", 3, "e")],
    }
    plan = plan_trials(trials, children)
    assert plan.finished == [t0] and plan.failed == [t1]
    assert [(x.trial, x.run_id, x.resume) for x in plan.launch] == [(t2, "e", True), (t3, None, False)]
    retry = plan_trials(trials, children, retry_failed=True)
    assert [(x.trial, x.run_id, x.resume) for x in retry.launch][:1] == [(t1, "d", True)]
    assert "skip   " + t0.describe() + " (finished)" in plan.format()
    scheduled = plan_trials([t3], {t3.key: [_run("SCHEDULED", 1, "f")]})
    assert [(x.run_id, x.resume) for x in scheduled.launch] == [("f", False)]


def test_parse_inline_dict_matches_file(tmp_path):
    data = {"name": "s", "grid": {"seed": [4, 5]}}
    from_dict = parse_study(data, folder=tmp_path)
    assert [t.seed for t in expand(from_dict)] == [4, 5]


def test_study_set_overrides_the_base_for_every_cell(tmp_path):
    data = {"name": "s", "base": {"stages": {"rl": {"steps": 20}}}, "set": {"stages.rl.steps": 3},
            "grid": {"algo.method": ["grpo", "seed"]}}
    study = parse_study(data, folder=tmp_path)
    assert study.base.stages.rl.steps == 3
    assert all(t.cfg.stages.rl.steps == 3 for t in expand(study))
    with pytest.raises(ConfigError, match="study.set: unknown key 'stages.rl.stepz'"):
        parse_study({**data, "set": {"stages.rl.stepz": 3}}, folder=tmp_path)
    with pytest.raises(ConfigError, match="study.set: expected a mapping"):
        parse_study({**data, "set": [1]}, folder=tmp_path)


def test_trials_that_run_a_vllm_engine_get_a_process_of_their_own(tmp_path):
    """Tune reuses a finished trial's process unless a trial runs a vLLM engine in it: the
    engine's memory is never given back, and the third SmolLM2 trial of one process was killed
    by Ray's OOM killer at 21 GB."""
    assert reuse_actors(load_study(EXAMPLES / "quickstart.yaml"))
    assert not reuse_actors(load_study(EXAMPLES / "cpu_reference_smollm2.yaml"))
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"name": "g", "base": str(EXAMPLES / "ezpoints_small.yaml"),
                                    "grid": {"model.backend": ["transformers", "vllm"], "seed": [0]}}))
    assert not reuse_actors(load_study(grid))


def _tcmalloc(installed: bool):
    return lambda name: "libtcmalloc_minimal.so.4" if installed and name == "tcmalloc_minimal" else None


def test_a_local_ray_of_vllm_cpu_trials_preloads_tcmalloc(tmp_path, monkeypatch):
    """vLLM's CPU engine asks for tcmalloc preloaded (a SmolLM2 step 191 -> 158 s here): a local
    Ray's processes get it when a trial runs the engine on CPU, nothing else changes."""
    monkeypatch.setattr(ctypes.util, "find_library", _tcmalloc(True))
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    smol = load_study(EXAMPLES / "cpu_reference_smollm2.yaml")
    assert engine_env(smol) == {"LD_PRELOAD": "libtcmalloc_minimal.so.4"}
    assert engine_env(smol, "local") == {"LD_PRELOAD": "libtcmalloc_minimal.so.4"}
    assert engine_env(load_study(EXAMPLES / "quickstart.yaml")) == {}  # no engine
    assert engine_env(smol, "10.0.0.7:6379") == {}  # a cluster's nodes are started by their owners
    gpu = tmp_path / "gpu.yaml"
    gpu.write_text(yaml.safe_dump({"name": "g", "base": str(EXAMPLES / "ezpoints_small.yaml"),
                                   "set": {"model.backend": "vllm"}, "resources": {"cpus": 1, "gpus": 1},
                                   "grid": {"seed": [0]}}))
    assert engine_env(load_study(gpu)) == {}  # CUDA trials: not the CPU engine's allocator
    monkeypatch.setenv("LD_PRELOAD", "libfoo.so")
    assert engine_env(smol) == {"LD_PRELOAD": "libtcmalloc_minimal.so.4 libfoo.so"}  # kept, after it
    monkeypatch.setenv("LD_PRELOAD", "/usr/lib/libtcmalloc_minimal.so.4")
    assert engine_env(smol) == {}  # already preloaded
    monkeypatch.delenv("LD_PRELOAD")
    monkeypatch.setattr(ctypes.util, "find_library", _tcmalloc(False))
    assert engine_env(smol) == {}  # not installed: nothing to preload
    lines = []
    engine_env(smol, echo=lines.append)
    monkeypatch.setattr(ctypes.util, "find_library", _tcmalloc(True))
    engine_env(smol, echo=lines.append)
    engine_env(load_study(EXAMPLES / "quickstart.yaml"), echo=lines.append)  # says nothing
    assert len(lines) == 2 and "apt-get install libtcmalloc-minimal4" in lines[0]
    assert "LD_PRELOAD=libtcmalloc_minimal.so.4" in lines[1]


def test_a_local_ray_starts_in_the_environment_it_is_given(tmp_path, monkeypatch):
    """init_ray's env is in the environment when a local Ray starts (its processes inherit it);
    a cluster's address does not get it."""
    seen = []
    monkeypatch.setattr(ray_session.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray_session.ray, "init", lambda **kw: seen.append(os.environ.get("LD_PRELOAD")))
    monkeypatch.setattr(ray_session, "use_auth", lambda address: None)
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("PYTHONPATH", "RAY_USAGE_STATS_ENABLED", "RAY_AIR_NEW_OUTPUT", "LD_PRELOAD"):
        monkeypatch.setenv(name, "")  # restored after the test: init_ray writes these
    ray_session.init_ray("", env={"LD_PRELOAD": "libtcmalloc_minimal.so.4"})
    monkeypatch.setenv("LD_PRELOAD", "")
    ray_session.init_ray("10.0.0.7:6379", env={"LD_PRELOAD": "libtcmalloc_minimal.so.4"})
    assert seen == ["libtcmalloc_minimal.so.4", ""]
