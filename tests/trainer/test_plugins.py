"""trainer.plugins: a plugin's method and env resolve from a config that names them, their
source hash enters the cell id and the run's params, one-line errors for what goes wrong,
the documented API and the built-ins registering through it; the example plugins' parts."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import torch
import yaml

import envs
from envs.base import demo_policy, expert_policy, run_episode
from envs.oracle import Oracle
from support.chat import FakeChat
from support.plugins import CODEPAGE, SEED_TAU, isolated_registries
from trainer import algos, plugins
from trainer.algos import LossInputs, methods
from trainer.config import AlgoConfig, ConfigError, RunConfig, apply_overrides
from trainer.episodes.samples import Trajectory
from trainer.hindsight.writers import ExternalWriter
from trainer.run.loop import train
from trainer.run.resolve import load_config, resolve
from trainer.run.store import make_client
from trainer.run.tracking import cell_id

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "extending.md"


@pytest.fixture(autouse=True)
def isolated():
    with isolated_registries():
        yield


def write_config(folder: Path, **data) -> Path:
    path = folder / "run.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def error_of(fn, *args) -> str:
    with pytest.raises(ConfigError) as info:
        fn(*args)
    return str(info.value)


def documented_api() -> list[str]:
    """The names docs/extending.md's API table lists (first column, in backticks)."""
    text = DOCS.read_text()
    section = text.split("## The public API", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `(\w+)", section, flags=re.M)


def test_every_documented_api_name_exists_in_trainer_plugins():
    names = documented_api()
    assert len(names) >= 20, names  # the table was found
    missing = [n for n in names if n not in plugins.__all__ or not hasattr(plugins, n)]
    assert not missing, f"documented in docs/extending.md but gone from trainer.plugins: {missing}"


def test_the_built_ins_register_through_the_public_calls():
    table = ROOT / "trainer" / "algos" / "methods.py"
    assert all(Path(f) == table for f, _ in algos.METHOD_SOURCES.values())
    assert set(algos.METHOD_SOURCES) == set(algos.METHODS)
    with pytest.raises(ValueError, match="method 'seed' is already registered"):
        plugins.register_method(algos.get_method("seed"))
    with pytest.raises(ValueError, match=r"env 'household' is already registered \(envs.household"):
        plugins.register_env("household", envs.env_class("household"))
    with pytest.raises(ValueError, match="writer prompt 'analyzer' is already registered"):
        plugins.register_writer_prompt("analyzer", plugins.WriterPrompt(*[lambda *a: None] * 3))
    assert envs.BUILTIN == tuple(n for n in envs.REGISTRY if envs.has_oracle(n))


def test_a_config_names_a_plugin_method_and_env_relative_to_its_file(tmp_path):
    folder = tmp_path / "lab"
    shutil.copytree(SEED_TAU.parent, folder / "plugins")
    path = write_config(folder, plugins=["plugins/seed_tau.py", "plugins/codepage/"],
                        algo={"method": "seed_tau"}, env={"name": "codepage"})
    cfg = resolve(load_config(path))
    assert cfg.plugins == (str(folder / "plugins" / "seed_tau.py"), str(folder / "plugins" / "codepage"))
    assert algos.get_method("seed_tau").opd_loss == "seed_tau" and cfg.writer.kind == "self"
    assert [p.name for p in plugins.used_plugins(cfg)] == ["codepage", "seed_tau.py"]
    # the same plugin from another folder imports once per path and hashes the same
    assert {p.sha for p in plugins.loaded()} == {plugins.source_sha(SEED_TAU), plugins.source_sha(CODEPAGE)}


def test_the_plugin_hash_enters_the_cell_id_of_the_cells_that_use_it(tmp_path):
    grpo = cell_id(RunConfig())
    first, edited = tmp_path / "a" / "seed_tau.py", tmp_path / "b" / "seed_tau.py"
    for path in (first, edited):
        path.parent.mkdir()
    shutil.copy(SEED_TAU, first)
    edited.write_text(first.read_text().replace("TAU = 1.0", "TAU = 0.5"))
    with isolated_registries():
        cfg = load_config(write_config(first.parent, plugins=["seed_tau.py"], algo={"method": "seed_tau"}))
        tau = cell_id(cfg)
        assert cell_id(apply_overrides(cfg, {"algo.method": "grpo"})) == grpo  # grpo uses no plugin part
        assert plugins.plugin_params(cfg) == {"plugins.sha": f"seed_tau.py:{plugins.source_sha(first)}"}
    with isolated_registries():  # the plugin edited (TAU 1.0 -> 0.5): a new cell
        changed = load_config(write_config(edited.parent, plugins=["seed_tau.py"], algo={"method": "seed_tau"}))
        assert cell_id(changed) != tau


@pytest.mark.parametrize("source, message", [
    ("raise RuntimeError('no GPU here')", "RuntimeError: no GPU here"),
    ("from trainer.plugins import get_method, register_method\nregister_method(get_method('seed'))",
     "ValueError: method 'seed' is already registered ("),
    ("from trainer.plugins import register_opd_loss\nregister_opd_loss('seed')(lambda i, c: 0)",
     "ValueError: OPD loss 'seed' is already registered (trainer.algos.opd.gated_opd)"),
    ("import dataclasses\nfrom trainer.plugins import get_method, register_method\n"
     "register_method(dataclasses.replace(get_method('seed'), name='x', opd_loss='nope'))",
     "ValueError: unknown OPD loss 'nope'."),
])
def test_a_bad_plugin_is_one_line_naming_it_and_the_exception(tmp_path, source, message):
    (tmp_path / "bad.py").write_text(source + "\n")
    text = error_of(load_config, write_config(tmp_path, plugins=["bad.py"]))
    assert text.startswith(f"plugins: cannot import {str(tmp_path / 'bad.py')!r}: ") and message in text, text
    assert "\n" not in text


def test_two_plugins_that_register_one_name_collide(tmp_path):
    for name in ("one", "two"):
        (tmp_path / f"{name}.py").write_text("from trainer.plugins import register_credit\n"
                                             "@register_credit('mine')\ndef mine(inputs, cfg, adv):\n"
                                             "    return adv, {}\n")
    text = error_of(load_config, write_config(tmp_path, plugins=["one.py", "two.py"]))
    assert "cannot import" in text and "two.py" in text
    assert "token-credit rule 'mine' is already registered (hindsight_plugin_one_" in text


@pytest.mark.parametrize("entry, message", [
    ("missing.py", "is not a .py file or a folder with an __init__.py"),
    ("no_such_module_46", "cannot import 'no_such_module_46': ModuleNotFoundError"),
    ("not a module", "is neither a module name nor a .py file or folder"),
])
def test_a_plugin_that_is_not_there_is_one_line(tmp_path, entry, message):
    assert message in error_of(load_config, write_config(tmp_path, plugins=[entry]))


def test_an_env_without_an_expert_says_what_needs_one(tmp_path):
    (tmp_path / "blind.py").write_text(
        "import envs\nfrom trainer.plugins import register_env\n"
        "class Blind(type(envs.make('shop'))):\n    name = 'blind'\n"
        "register_env('blind', Blind, expert=False)\n")
    path = write_config(tmp_path, plugins=["blind.py"], env={"name": "blind"})
    text = error_of(lambda: resolve(load_config(path)))
    assert text.startswith("env.name: 'blind' has no scripted expert, which stages.warm_start.enabled needs")
    cfg = load_config(path, ["algo.method=etro", "stages.warm_start.enabled=false"])
    assert error_of(resolve, cfg).startswith("writer.kind: 'oracle' needs a built-in env")


# -- the example plugins -----------------------------------------------------------------------

def tau_inputs(tau_delta: list[float]) -> LossInputs:
    logp = torch.tensor([[-1.0, -2.0, -0.5, -1.5]], requires_grad=True)
    teacher = logp.detach() + torch.tensor([tau_delta])
    mask = torch.tensor([[True, True, True, False]])
    return LossInputs(logp=logp, logp_old=logp.detach(), advantages=torch.zeros(1, 4), mask=mask,
                      logp_teacher=teacher)


def test_seed_tau_is_seed_on_the_tokens_the_skill_moves():
    plugins.load_plugins([str(SEED_TAU)])
    cfg = AlgoConfig(beta_opd=5.0, lambda_opd=0.01)
    ours, seed = algos.OPD_LOSSES.get("seed_tau"), algos.OPD_LOSSES.get("seed")
    inputs = tau_inputs([0.1, -1.5, 2.0, 3.0])  # |Delta| >= 1 on tokens 1 and 2 (3 is off the mask)
    loss, metrics = ours(inputs, cfg)
    kept = LossInputs(**{**inputs.__dict__, "opd_mask": torch.tensor([[False, True, True, False]])})
    want, _ = seed(kept, cfg)
    assert torch.allclose(loss, want) and metrics["opd/token_frac"] == pytest.approx(2 / 3)
    assert metrics["opd/moved_frac"] == pytest.approx(2 / 3)  # no opd_mask: every valid token
    loss.backward()
    assert inputs.logp.grad[0, 0] == 0 and inputs.logp.grad[0, 1] != 0
    none, metrics = ours(tau_inputs([0.1, -0.2, 0.3, 3.0]), cfg)
    assert none.item() == 0 and metrics["opd/token_frac"] == 0
    spec = algos.get_method("seed_tau")
    assert (spec.label, spec.skill_sft, spec.writer) == ("SEED |Δ|≥τ", True, "self")


def test_codepage_experts_solve_it_and_the_oracle_finds_a_broken_line():
    plugins.load_plugins([str(CODEPAGE)])
    env = envs.make("codepage")
    tasks = env.panel("eval_unseen")
    assert len(tasks) == 24 and len({t.id for t in tasks}) == 24
    assert all(run_episode(env, t, expert_policy()).success for t in tasks)
    demo = [run_episode(env, t, demo_policy()) for t in tasks]
    assert all(e.success for e in demo) and {e.turns[0].action for e in demo} == {"run tests"}
    task = tasks[0]
    right = next(i for i in range(len(task.spec["right"])) if i != task.spec["wrong"])
    actions = [f"fix line {right + 2}", "submit"]  # breaks a right line, then submits: lost
    episode = run_episode(env, task, lambda e, obs, turns: e.response_for(actions[len(turns)]))
    assert not episode.success and episode.distances == [2, 3, 99]
    hindsight = Oracle(lambda: envs.make("codepage")).write(episode)
    assert hindsight.error_turn == 0 and f"fix line {task.spec['wrong'] + 2}" in hindsight.negative_skill


def test_methods_source_of_a_plugin_method_is_its_file_and_line():
    plugins.load_plugins([str(SEED_TAU)])
    file, line = methods.METHOD_SOURCES["seed_tau"]
    assert Path(file) == SEED_TAU and "register_method(" in SEED_TAU.read_text().splitlines()[line - 1]


def test_the_plugin_method_trains_one_step_on_the_plugin_env(tmp_path):
    """seed_tau on codepage through the trainer: warm start, Stage 1, one RL step with the
    plugin's OPD loss; the run logs the plugins' hashes and the loss's own metric."""
    path = write_config(
        tmp_path, plugins=[str(SEED_TAU), str(CODEPAGE)],
        model={"backbone": "tiny", "device": "cpu", "max_prompt_tokens": 512,
               "tiny": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "num_kv_heads": 1,
                        "intermediate_size": 64, "vocab_size": 600}},
        env={"name": "codepage", "max_turns": 3, "context": "full"},
        rollout={"group_size": 2, "tasks_per_step": 1, "max_new_tokens": 12},
        writer={"max_new_tokens": 16, "max_skill_tokens": 64},
        algo={"method": "seed_tau", "lr": 0.001},
        stages={"warm_start": {"episodes": 4, "epochs": 1, "batch_size": 8, "cache": False},
                "skill_sft": {"tasks": 1, "rollouts_per_task": 1, "epochs": 1, "writer_panel": 0},
                "rl": {"steps": 1}},
        eval={"every": 0, "max_tasks": 1}, output={"dir": str(tmp_path / "out"), "checkpoint_every": 0},
        tracking={"uri": f"sqlite:///{tmp_path / 'mlruns.db'}"})
    cfg = load_config(path)
    result = train(cfg, progress=False)
    run = make_client(cfg.tracking.uri).get_run(result.run_id)
    assert run.info.status == "FINISHED" and run.data.tags["method"] == "seed_tau"
    assert run.data.params["plugins.sha"] == (f"seed_tau.py:{plugins.source_sha(SEED_TAU)},"
                                              f"codepage:{plugins.source_sha(CODEPAGE)}")
    assert "opd/moved_frac" in run.data.metrics and run.data.tags["env"] == "codepage"  # seed_tau's own


JSON_PROMPT = '''import json
from trainer.plugins import Hindsight, WriterPrompt, register_writer_prompt

def prompt(domain, episode, max_observation_chars, placeholders):
    return [{"role": "user", "content": f"JSON hindsight for: {episode.task.instruction}"}]

def parse(text, num_turns):
    try:
        return Hindsight(json.loads(text)["skill"], raw=text)
    except (ValueError, KeyError, TypeError):
        return Hindsight("", valid=False, raw=text)

def target(hindsight):
    return json.dumps({"skill": hindsight.positive_skill})

register_writer_prompt("json", WriterPrompt(prompt, parse, target))
'''


def test_a_plugin_writer_prompt_is_what_the_writer_asks_and_parses(tmp_path):
    (tmp_path / "json_writer.py").write_text(JSON_PROMPT)
    with FakeChat('{"skill": "run the tests first"}') as server:
        path = write_config(tmp_path, plugins=["json_writer.py"], algo={"method": "etro"},
                            writer={"kind": "external", "prompt": "json", "model": "m",
                                    "endpoint": f"http://127.0.0.1:{server.server_port}/v1"})
        cfg = resolve(load_config(path))
        assert [p.name for p in plugins.used_plugins(cfg)] == ["json_writer.py"]
        env = envs.make("household", level="small")
        episode = run_episode(env, env.panel("train")[0], expert_policy())
        trajectory = Trajectory(episode, [[1]] * len(episode.turns))
        (hindsight,) = ExternalWriter("a household", cfg.writer).write([trajectory])
    assert hindsight.valid and hindsight.positive_skill == "run the tests first"
    (_, _, body), = server.requests
    assert body["messages"][0]["content"].startswith("JSON hindsight for: ")
    assert "writer.prompt: unknown writer prompt 'jsn'; did you mean 'json'?" in error_of(
        load_config, path, ["writer.prompt=jsn"])
    assert error_of(resolve, load_config(path, ["writer.kind=self", "writer.constrained=true"])).startswith(
        "writer.constrained: the constrained template is the analyzer format's")
