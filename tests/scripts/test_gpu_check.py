"""scripts/gpu_check.py (its CPU mode at the tiny shape) and scripts/gpu_bundle.py (the wheels
a lent GPU image lacks, installed into an empty folder and used to run the check)."""

from __future__ import annotations

import ast
import importlib.metadata as md
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from packaging.utils import canonicalize_name

from support.paths import ROOT

SCRIPTS = ROOT / "scripts"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


gpu_check = _load("gpu_check")
gpu_bundle = _load("gpu_bundle")


def _step(seconds: float, status: str = "ok") -> dict:
    phases = {"rollout": seconds / 2, "score": seconds / 4, "update": seconds / 4}
    return {"status": status, "step_s": seconds, "phases_s": phases, "rollout_tokens_per_s": 100.0,
            "train_tokens_per_s": 1000.0, "peak_mem_mb": 2048.0, "lr_step_kept": 0.02, "changed_fraction": 0.0}


RESULTS = {
    "device": "cuda",
    "environment": {"device": "NVIDIA H200", "date": "2026-12-01 00:00 UTC", "torch": "2.11.0",
                    "transformers": "5.17.0", "python": "3.12.1", "git_sha": "abcdef0123456789"},
    "settings": {"backbone": "qwen2.5-1.5b-shape", "score_backbone": "qwen2.5-7b-shape", "dtype": "bfloat16",
                 "tasks": 4, "group": 8, "turns": 10, "new_tokens": 128, "writer_tokens": 96},
    "overrides": [],
    "methods": {"grpo": _step(10.0), "seed": _step(11.0), "etro": _step(13.0)},
    "scoring": {"status": "ok", "backbone": "qwen2.5-7b-shape", "sequences": 320, "tokens": 200000,
                "scored_action_tokens": 40000, "seconds": 4.0, "tokens_per_s": 50000.0, "peak_mem_mb": 20480.0},
}


def test_ratios_compare_measured_steps_with_the_goals():
    r = gpu_check.ratios(RESULTS["methods"])
    assert r["seed"] == {"ratio": pytest.approx(1.1), "target": 1.15, "met": True}
    assert r["etro"] == {"ratio": pytest.approx(1.3), "target": 1.20, "met": False}
    failed = {**RESULTS["methods"], "etro": {"status": "OutOfMemoryError: CUDA out of memory"}}
    assert set(gpu_check.ratios(failed)) == {"seed"}
    assert gpu_check.ratios({"seed": _step(1.0)}) == {}


def test_a_failing_measurement_becomes_its_status(capsys):
    def oom():
        raise RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB\nmore detail")

    assert gpu_check.guarded(oom) == ({"status": "RuntimeError: CUDA out of memory. Tried to allocate 20.00 GiB"},
                                      None)
    assert "Traceback" in capsys.readouterr().err
    assert gpu_check.guarded(lambda x: ({"status": "ok", "x": x}, "kept"), 3) == ({"status": "ok", "x": 3}, "kept")


def test_markdown_has_one_row_per_method_the_scoring_pass_and_the_goals():
    results = {**RESULTS, "ratios": gpu_check.ratios(RESULTS["methods"])}
    results["methods"] = {**results["methods"], "etro": {"status": "OutOfMemoryError: CUDA out of memory"}}
    results["ratios"] = gpu_check.ratios(results["methods"])
    text = gpu_check.render_markdown(results)
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(rows) == 4  # header + grpo, seed, etro
    assert "| seed | 11.00 | 1.10x | 5.50 | - | 2.75 | - | - | - | 2.75 | 100 | 1000 | 2.0 | - | 2.0% | ok |" in text
    assert rows[-1].startswith("| etro |") and rows[-1].endswith("OutOfMemoryError: CUDA out of memory |")
    assert "`qwen2.5-7b-shape` (no gradients): 320 sequences, 200000 tokens in 4.00 s (50000 tokens/s)" in text
    assert "SEED <= 1.15x GRPO: 1.10x met" in text and "ETRO" not in text.split("Goals:")[1]


def test_the_timeline_marks_each_outermost_phase_beside_the_planners_estimate():
    """Item 8 of issue 35: memory at each phase boundary beside the plan's phase; a phase inside
    another (SEED's teacher inside the update) is part of that one's peak, not a boundary."""
    gib = {"startup": 1.0, "rollout": 2.0, "score": 3.0, "update": 4.0}
    plan = SimpleNamespace(phase=lambda name: gib[name] * 2**30)
    timeline = gpu_check.Timeline("cpu", plan)
    timer = gpu_check._marking_timer(None, timeline)
    for phase in ("rollout", "write", "score"):
        with timer(phase):
            pass
    with timer("update"), timer("teacher"):
        pass
    assert [(r["after"], r["phase"], r["estimate_gib"]) for r in timeline.rows] == [
        ("rollout", "rollout", 2.0), ("write", "rollout", 2.0), ("score", "score", 3.0), ("update", "update", 4.0)]
    assert all(r["peak_rss_gib"] >= r["rss_gib"] > 0 for r in timeline.rows)
    assert set(timer.seconds) == {"rollout", "write", "score", "update", "teacher"}
    cuda = [{"after": "score", "phase": "score", "estimate_gib": 30.0, "peak_allocated_gib": 25.04,
             "reserved_gib": 28.0, "free_gib": 40.0}]
    text = "\n".join(gpu_check.timeline_markdown({"grpo": {}, "seed": {"timeline": cuda}}, cuda=True))
    assert "Memory of the seed step at each phase boundary" in text and "grpo" not in text
    assert "| after | planner phase | estimate GiB | peak allocated GiB | reserved GiB | free GiB |" in text
    assert "| score | score | 30.0 | 25.0 | 28.0 | 40.0 |" in text


@pytest.mark.parametrize("argv, message", [
    (["--tasks", "0"], "--tasks must be >= 1"),
    (["--methods", "etro,grpo"], "list grpo first"),
    (["--methods", "grpo,sed"], "unknown method 'sed'"),
    (["--backbone", "qwen2.5-2b-shape"], "unknown shape 'qwen2.5-2b-shape'"),
    (["--device", "cuda"], "no CUDA device"),
])
def test_bad_usage_is_one_error_line_and_exit_2(argv, message, tmp_path, capsys):
    if argv[:2] == ["--device", "cuda"]:
        import torch

        if torch.cuda.is_available():
            pytest.skip("CUDA is available here")
    assert gpu_check.main(["--device", "cpu", "--out", str(tmp_path), *argv]) == 2 or argv[0] == "--device"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]


def _check_cpu_run(out: Path, methods: tuple[str, ...]) -> dict:
    results = json.loads((out / "gpu_check.json").read_text())
    s = results["settings"]
    assert results["device"] == "cpu" and s["backbone"] == "qwen2.5-tiny-shape"
    assert list(results["methods"]) == list(methods)
    budget_turns = s["tasks"] * s["group"] * s["turns"]
    for name, r in results["methods"].items():
        assert r["status"] == "ok", (name, r["status"])
        # a random model never finishes: every episode and response runs to its budget
        assert r["turns"] == budget_turns and 0 < r["generated_tokens"] <= budget_turns * s["new_tokens"]
        assert {"rollout", "score", "reference", "update"} <= set(r["phases_s"])
        assert r["step_s"] >= sum(v for k, v in r["phases_s"].items() if k != "teacher" or name != "seed") * 0.99
        assert r["train_tokens"] > r["scored_action_tokens"] > 0 and r["lr_step_kept"] == 1.0  # float32
        marks = [(row["after"], row["phase"]) for row in r["timeline"]]
        assert marks[0] == ("start-up", "startup") and marks[-1] == ("update", "update")
        assert ("score", "score") in marks and all(row["estimate_gib"] > 0 for row in r["timeline"])
    if "etro" in methods:
        etro = results["methods"]["etro"]
        assert etro["phases_s"]["teacher"] > 0 and etro["writer"] == "oracle" and etro["teacher"] == "old"
        assert etro["changed_fraction"] > 0.5  # ETRO's OPD credit moves the weights
        if "grpo" in methods:
            assert results["ratios"]["etro"]["ratio"] == pytest.approx(
                etro["step_s"] / results["methods"]["grpo"]["step_s"])
    if "seed" in methods:
        seed = results["methods"]["seed"]
        assert seed["writer"] == "self" and seed["teacher"] == "current" and seed["phases_s"]["write"] > 0
    assert results["scoring"]["status"] == "ok" and results["scoring"]["tokens"] > 0
    text = (out / "gpu_check.md").read_text()
    steps, *timelines = text.split("\nMemory of the ")
    assert steps.count("\n| ") == len(methods) + 1
    assert [t.split()[0] for t in timelines] == list(methods)  # a phase-boundary table a step
    return results


def _tracked_runs(out: Path) -> dict[str, dict]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlruns.db'}")
    exp = client.get_experiment_by_name("gpu-check")
    runs = client.search_runs([exp.experiment_id], "tags.`hindsight.kind` = 'gpu_check'")
    return {r.data.tags["measurement"]: r for r in runs}


def test_cpu_mode_keeps_its_measurements_when_the_store_fails(tmp_path, monkeypatch, capsys):
    """ETRO stepped at the tiny shape through the command; the MLflow store (whose sqlite
    migrations alone take seconds: the slow test below writes it) is made to fail."""
    def no_store(*args):
        raise RuntimeError("store unavailable")

    monkeypatch.setattr(gpu_check, "track", no_store)
    assert gpu_check.main(["--device", "cpu", "--out", str(tmp_path), "--methods", "etro"]) == 1
    results = _check_cpu_run(tmp_path, ("etro",))
    assert results["tracking"] == "failed: RuntimeError: store unavailable" and results["ratios"] == {}
    assert "| etro |" in capsys.readouterr().out


@pytest.mark.slow
def test_cpu_mode_steps_the_three_methods_and_tracks_them(tmp_path, capsys):
    assert gpu_check.main(["--device", "cpu", "--out", str(tmp_path)]) == 0
    results = _check_cpu_run(tmp_path, ("grpo", "seed", "etro"))
    runs = _tracked_runs(tmp_path)
    assert set(runs) == {"grpo", "seed", "etro", "scoring"}
    assert all(r.info.status == "FINISHED" for r in runs.values())
    assert runs["etro"].data.metrics["check/step_s"] == pytest.approx(results["methods"]["etro"]["step_s"])
    assert runs["etro"].data.metrics["check/ratio_vs_grpo"] == pytest.approx(results["ratios"]["etro"]["ratio"])
    assert runs["scoring"].data.params["model.backbone"] == "qwen2.5-tiny-shape"
    assert results["methods"]["grpo"]["changed_fraction"] == 0.0  # a random model's rewards tie: no gradient
    assert results["methods"]["grpo"]["lr_step_kept"] == 1.0  # float32 masters keep every lr-sized step
    backends = results["rollout_backends"]
    if importlib.util.find_spec("vllm") is None:
        assert backends == {"status": "not measured: vLLM is not installed on this machine"}
    else:
        assert backends["status"] == "ok" and backends["ratio"] > 0
    assert "| etro |" in capsys.readouterr().out


# ---------------------------------------------------------------------------- the bundle


def test_closure_follows_extras_and_markers_and_stops_at_cycles():
    graph = {
        ("a", frozenset()): {"3.12": [("b", frozenset({"x"}))], "3.11": [("old", frozenset())]},
        ("b", frozenset({"x"})): {"3.12": [("c", frozenset()), ("a", frozenset())]},
    }

    def requires(name, extras, python):
        return graph.get((name, extras), {}).get(python, [])

    assert gpu_bundle.closure(["A"], ["3.12"], requires) == {"a", "b", "c"}
    assert gpu_bundle.closure(["A"], ["3.12", "3.11"], requires) == {"a", "b", "c", "old"}


def test_bundle_pins_are_what_the_trainer_needs_beyond_the_image():
    pins = gpu_bundle.bundle_pins()
    assert {"mlflow-skinny", "sqlalchemy", "alembic", "rank-bm25", "sqlparse"} <= set(pins)
    image = {"torch", "transformers", "numpy", "pandas", "pyarrow", "tokenizers", "pyyaml"}
    assert not image & set(pins)
    assert not {"ray", "optuna", "mlflow", "vllm"} & set(pins)  # never needed by train or the check
    assert "sqlparse" in {n for n, _ in gpu_bundle.installed_requires("mlflow-skinny", frozenset(), "3.12")}


def _module_level_imports(folders) -> set[str]:
    """Top-level names of the modules imported at module level under ``folders`` (the imports a
    training run cannot avoid; optional ones such as vLLM and Ray are deferred into functions)."""
    names = set()
    for path in (p for folder in folders for p in (ROOT / folder).rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"trainer", "envs", "sweeps", "analysis", "reports"}


def test_every_module_the_trainer_imports_is_in_the_image_or_the_bundle():
    """A dependency the trainer imports at module level but the bundle leaves out (peft, when
    LoRA came in) makes the GPU machine's first ``import trainer`` fail; the image test below is
    slow, this one reads the imports."""
    have = gpu_bundle.image_has((gpu_bundle.TARGET_PYTHON,)) | set(gpu_bundle.bundle_pins())
    dists = md.packages_distributions()
    missing = {m for m in _module_level_imports(["trainer", "envs"])
               if not any(canonicalize_name(d) in have for d in dists.get(m, [m]))}
    assert not missing, f"imported by the trainer but neither in the GPU image nor in NEEDS: {sorted(missing)}"


@pytest.fixture(scope="module")
def bundle() -> Path:
    """The bundle folder of `make gpu-bundle` ($HINDSIGHT_GPU_BUNDLE or .gpu-bundle), built
    here when absent; skipped with the reason when that needs a registry that cannot be reached."""
    folder = Path(os.environ.get("HINDSIGHT_GPU_BUNDLE", ROOT / ".gpu-bundle"))
    try:
        gpu_bundle.build(folder)
    except gpu_bundle.BundleError as e:
        pytest.skip(f"no GPU bundle at {folder} and it cannot be built here: {e}")
    return folder


def _image_env(view: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return {**env, "PYTHONPATH": f"{ROOT}{os.pathsep}{view}", "HINDSIGHT_CACHE": str(view.parent / "cache")}


@pytest.mark.slow
def test_bundle_installs_for_python_3_12_from_the_folder_alone(bundle, tmp_path):
    assert gpu_bundle.size_mib(bundle) <= gpu_bundle.LIMIT_MIB
    gpu_bundle.install(bundle, tmp_path / "py312", target_python="3.12")
    assert (tmp_path / "py312" / "mlflow" / "__init__.py").is_file()
    assert list((tmp_path / "py312" / "sqlalchemy").rglob("*cpython-312-x86_64-linux-gnu.so"))
    with pytest.raises(gpu_bundle.BundleError, match="is not empty"):
        gpu_bundle.install(bundle, tmp_path / "py312")


@pytest.mark.slow
def test_check_and_train_run_on_the_image_plus_the_bundle_alone(bundle, tmp_path):
    """The image is stood for by links to its packages (less the bundled ones) under
    ``python -S``: without the bundle mlflow is missing; with it the check and a training
    run go through."""
    view = gpu_bundle.image_view(tmp_path / "image", gpu_bundle.bundle_pins())
    env = _image_env(view)
    bare = subprocess.run([sys.executable, "-S", "-c", "import mlflow"], env=env, cwd=ROOT,
                          capture_output=True, text=True, check=False)
    assert bare.returncode != 0 and "No module named 'mlflow'" in bare.stderr
    out = tmp_path / "out"
    check = subprocess.run([sys.executable, "-S", str(SCRIPTS / "gpu_check.py"), "--device", "cpu",
                            "--bundle", str(bundle), "--out", str(out), "--methods", "grpo,seed,etro"],
                           env=env, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert check.returncode == 0, check.stderr[-3000:]
    _check_cpu_run(out, ("grpo", "seed", "etro"))
    deps = next(out.glob("deps-*"))
    code = ("import sys; sys.path.append(sys.argv[1]); from sweeps.cli import main; "
            "raise SystemExit(main(['train', 'tests/support/data/train_micro.yaml', "
            "'--set', 'output.dir=' + sys.argv[2]]))")
    train = subprocess.run([sys.executable, "-S", "-c", code, str(deps), str(tmp_path / "train")],
                           env=env, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert train.returncode == 0, train.stderr[-3000:]
    assert "FINISHED" in train.stdout and (tmp_path / "train" / "mlruns.db").is_file()
