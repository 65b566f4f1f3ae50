"""trainer/config.py: loading, validation messages, overrides, round trips, resolve,
canonical form.  The method table is the stand-in tests/support/data/fake_algos.py."""

from __future__ import annotations

import dataclasses
import importlib.util
import json

import pytest

from support.fake_algos import install_fake_algos
from support.paths import DATA
from trainer.config import (
    DEFAULT_LR,
    DEFAULT_LR_TINY,
    AlgoConfig,
    ConfigError,
    RunConfig,
    apply_overrides,
    canonical_json,
    flatten,
    from_dict,
    read_yaml,
    to_dict,
    yaml_load,
)
from trainer.run.resolve import load_config, resolve

ALGO_KEYS = ("adv_eps, beta_opd, clip_eps, clip_ratio_c, grad_clip, kl_clamp, kl_coef, lambda_opd, "
             "loss_agg, lr, method, micro_batch_size, micro_batch_tokens, minibatch_size, opsd_top_k, ppo_epochs, "
             "rlsd_bound, rlsd_decay_steps, std_mode, suffix_skill, suffix_weight, teacher, weight_decay")


@pytest.fixture
def fake_algos(monkeypatch):
    return install_fake_algos(monkeypatch)


def error_of(fn, *args) -> str:
    with pytest.raises(ConfigError) as info:
        fn(*args)
    message = str(info.value)
    assert "\n" not in message
    return message


# --- field validation messages ------------------------------------------------------------

EXACT = [
    ({"algo": {"betta_opd": 1}},
     f"unknown key 'algo.betta_opd'; did you mean 'algo.beta_opd'? valid keys in algo: {ALGO_KEYS}"),
    ({"algo": {"zzz": 1}}, f"unknown key 'algo.zzz'; valid keys in algo: {ALGO_KEYS}"),
    ({"sed": 1}, ("unknown key 'sed'; did you mean 'seed'? valid keys at the top level: algo, env, "
                  "eval, model, output, parallel, plugins, rollout, seed, stages, tracking, writer")),
    ({"algo": {"beta_opd": -1}}, "algo.beta_opd: expected a number >= 0, got -1"),
    ({"algo": {"beta_opd": None}}, "algo.beta_opd: expected a number >= 0, got null"),
    ({"algo": {"beta_opd": "5"}}, "algo.beta_opd: expected a number >= 0, got '5'"),
    ({"algo": {"beta_opd": True}}, "algo.beta_opd: expected a number >= 0, got true"),
    ({"algo": {"clip_eps": float("nan")}}, "algo.clip_eps: expected a number > 0 and < 1, got nan"),
    ({"rollout": {"top_p": 1.5}}, "rollout.top_p: expected a number > 0 and <= 1, got 1.5"),
    ({"algo": {"lambda_opd": "x"}}, "algo.lambda_opd: expected a number >= 0 or null, got 'x'"),
    ({"seed": 1.5}, "seed: expected an integer >= 0, got 1.5"),
    ({"seed": True}, "seed: expected an integer >= 0, got true"),
    ({"model": {"gradient_checkpointing": 1}},
     "model.gradient_checkpointing: expected true or false, got 1"),
    ({"model": {"backbone": 7}}, "model.backbone: expected a string, got 7"),
    ({"model": {"vllm": {"enforce_eager": 1}}},  # 1 == True, but not a bool
     "model.vllm.enforce_eager: 1 is not one of auto, true, false"),
    ({"model": {"vllm": {"enforce_eager": "eager"}}},
     "model.vllm.enforce_eager: 'eager' is not one of auto, true, false"),
    ({"eval": {"splits": "eval_seen"}}, "eval.splits: expected a list of strings, got 'eval_seen'"),
    ({"eval": {"splits": ["a", 1]}}, "eval.splits: expected a list of strings, got ['a', 1]"),
    ({"algo": {"std_mode": "pop"}}, "algo.std_mode: 'pop' is not one of unbiased, population, none"),
    ({"algo": {"std_mode": "unbiasd"}},
     "algo.std_mode: 'unbiasd' is not one of unbiased, population, none; did you mean 'unbiased'?"),
    ({"writer": {"kind": "orcale"}}, ("writer.kind: 'orcale' is not one of self, frozen, oracle, external, "
                                      "static, none; did you mean 'oracle'?")),
    ({"algo": 3}, "algo: expected a mapping of keys, got 3"),
    ({"model": {"tiny": {"hidden_sizee": 8}}},
     ("unknown key 'model.tiny.hidden_sizee'; did you mean 'model.tiny.hidden_size'? valid keys in "
      "model.tiny: hidden_size, intermediate_size, max_position_embeddings, num_heads, "
      "num_kv_heads, num_layers, vocab_size")),
    ({"model": {"tiny": {"num_layers": 0}}}, "model.tiny.num_layers: expected an integer >= 1, got 0"),
    ({"model": {"lora": {"rank": -1}}}, "model.lora.rank: expected an integer >= 0, got -1"),
    ({"model": {"lora": {"dropout": 1}}}, "model.lora.dropout: expected a number >= 0 and < 1, got 1"),
    ({"model": {"lora": {"alpha": 0}}}, "model.lora.alpha: expected a number > 0, got 0"),
    ({"model": {"lora": {"target_modules": "q_proj"}}},
     "model.lora.target_modules: expected a list of strings, got 'q_proj'"),
    ([1, 2], "config: expected a mapping of keys, got [1, 2]"),
]


@pytest.mark.parametrize("data, message", EXACT, ids=[m.split(":")[0][:40] for _, m in EXACT])
def test_from_dict_error_messages(data, message):
    assert error_of(from_dict, data) == message


def test_from_dict_accepts_ints_for_floats_and_lists_for_tuples():
    cfg = from_dict({"algo": {"beta_opd": 3, "lambda_opd": None}, "eval": {"splits": ["a", "b"]}})
    assert cfg.algo.beta_opd == 3.0 and type(cfg.algo.beta_opd) is float
    assert cfg.eval.splits == ("a", "b")
    assert cfg.rollout == RunConfig().rollout  # untouched sections keep their defaults


def test_config_error_is_a_value_error_on_one_line():
    assert issubclass(ConfigError, ValueError)
    assert str(ConfigError("a\nb")) == "a b"


# --- round trips, flatten -----------------------------------------------------------------


def test_to_dict_from_dict_round_trip_defaults_and_loaded(fake_algos):
    for cfg in (RunConfig(), load_config(DATA / "run_seed.yaml")):
        assert from_dict(to_dict(cfg)) == cfg
        assert from_dict(json.loads(json.dumps(to_dict(cfg)))) == cfg  # JSON-safe
    assert to_dict(RunConfig())["eval"]["splits"] == ["eval_unseen"]


def test_flatten_keys_are_dotted_leaves_that_rebuild_the_config(fake_algos):
    cfg = load_config(DATA / "run_seed.yaml")
    flat = flatten(cfg)
    assert flat["algo.beta_opd"] == 5.0 and flat["seed"] == 3
    assert flat["model.tiny.hidden_size"] == 32
    assert flat["stages.warm_start.enabled"] is None
    assert flat["eval.splits"] == ("eval_seen", "eval_unseen")
    assert not any(dataclasses.is_dataclass(v) for v in flat.values())
    assert not any(k.startswith(other + ".") for k in flat for other in flat)  # leaves only
    assert apply_overrides(RunConfig(), flat) == cfg


# --- YAML and files -----------------------------------------------------------------------


def test_yaml_reads_exponent_floats_but_never_coerces_quoted_strings():
    assert yaml_load("a: 1e-6\nb: -2E+3\nc: '1e-6'\nd: 5\ne: [x, 1.5]") == {
        "a": 1e-6, "b": -2000.0, "c": "1e-6", "d": 5, "e": ["x", 1.5]}


def test_yaml_errors_are_one_line_with_position():
    assert error_of(yaml_load, "a: 1\nb: 2\na: 3", "f.yaml") == (
        "f.yaml: invalid YAML at line 3, column 1: duplicate key 'a'")
    assert error_of(yaml_load, "a: [1, 2", "f.yaml").startswith(
        "f.yaml: invalid YAML at line 1, column 9: expected ',' or ']'")


def test_read_yaml_file_errors(tmp_path):
    assert error_of(read_yaml, tmp_path / "nope.yaml") == f"{tmp_path / 'nope.yaml'}: no such file"
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    assert error_of(read_yaml, tmp_path / "list.yaml").endswith(
        "expected a mapping of config keys at the top level, got list")
    (tmp_path / "empty.yaml").write_text("# nothing\n")
    assert read_yaml(tmp_path / "empty.yaml") == {}


# --- load_config and overrides ------------------------------------------------------------


def test_load_config_reads_the_file_then_applies_overrides(fake_algos):
    cfg = load_config(DATA / "run_seed.yaml", ["algo.beta_opd=3", "eval.splits=[eval_seen]",
                                               "algo={clip_eps: 0.3}", "algo.beta_opd=4"])
    assert cfg.algo.method == "seed" and cfg.model.tiny.hidden_size == 32  # from the file
    assert cfg.algo.beta_opd == 4.0  # the later override wins
    assert cfg.algo.clip_eps == 0.3 and cfg.algo.lr == 1e-4  # a mapping merges into the section
    assert cfg.eval.splits == ("eval_seen",)


def test_load_config_names_the_file_in_key_errors(fake_algos):
    message = error_of(load_config, DATA / "run_bad_key.yaml")
    assert message.startswith(f"{DATA / 'run_bad_key.yaml'}: unknown key 'algo.betta_opd'; "
                              "did you mean 'algo.beta_opd'?")


@pytest.mark.parametrize("override, message", [
    ("algo.betta_opd=3", "unknown key 'algo.betta_opd'; did you mean 'algo.beta_opd'?"),
    ("algoo.beta_opd=3", "unknown key 'algoo'; did you mean 'algo'?"),
    ("algo.beta_opd=-1", "algo.beta_opd: expected a number >= 0, got -1"),
    ("algo.beta_opd", "bad override 'algo.beta_opd': expected key=value, e.g. algo.beta_opd=3"),
    ("=3", "bad override '=3': expected key=value"),
    ("algo.beta_opd=[1", "override 'algo.beta_opd=[1': invalid YAML"),
    ("eval.splits=eval_seen", "eval.splits: expected a list of strings, got 'eval_seen'"),
])
def test_override_errors(override, message):
    assert message in error_of(apply_overrides, RunConfig(), [override])


def test_apply_overrides_with_a_mapping_keeps_value_types():
    cfg = apply_overrides(RunConfig(), {"algo.beta_opd": 2, "model.backbone": "7",
                                        "stages.rl.steps": 3})
    assert (cfg.algo.beta_opd, cfg.model.backbone, cfg.stages.rl.steps) == (2.0, "7", 3)
    assert "expected a string, got 7" in error_of(apply_overrides, cfg, ["model.backbone=7"])


def test_cross_field_names_list_valid_choices(fake_algos):
    assert error_of(load_config, DATA / "run_seed.yaml", ["algo.method=sed"]) == (
        "algo.method: unknown method 'sed'; did you mean 'seed'? valid methods: etro, grpo, "
        "open, seed, seed_stale")
    message = error_of(load_config, DATA / "run_seed.yaml", ["env.name=housework"])
    assert message.startswith("env.name: unknown env 'housework'; did you mean 'household'? "
                              "valid envs: alfworld, ezpoints, household, searchqa, searchr1, shop, "
                              "sokoban, webshop")


# --- resolve ------------------------------------------------------------------------------


def test_resolve_fills_method_and_backbone_defaults(fake_algos):
    cfg = resolve(load_config(DATA / "run_seed.yaml", ["algo.lr=null"]))
    assert (cfg.algo.lambda_opd, cfg.algo.teacher, cfg.writer.kind) == (0.01, "current", "self")
    assert cfg.algo.lr == DEFAULT_LR_TINY == 1e-4 and cfg.stages.skill_sft.lr == DEFAULT_LR_TINY
    assert cfg.stages.warm_start.enabled is True and cfg.stages.skill_sft.enabled is True
    assert None not in flatten(cfg).values()
    assert resolve(cfg) == cfg  # idempotent

    real = resolve(apply_overrides(RunConfig(), {"model.backbone": "Qwen/Qwen3-1.7B",
                                                 "algo.method": "etro"}))
    assert (real.algo.lambda_opd, real.algo.teacher, real.writer.kind) == (0.001, "old", "oracle")
    assert real.algo.lr == DEFAULT_LR == 1e-6
    assert real.stages.warm_start.enabled is False and real.stages.skill_sft.enabled is False
    # a named warm start is used on any backbone (it was silently ignored), unless turned off
    named = {"model.backbone": "smollm2-135m", "stages.warm_start.checkpoint": "ezpoints-smollm2"}
    assert resolve(apply_overrides(RunConfig(), named)).stages.warm_start.enabled is True
    off = resolve(apply_overrides(RunConfig(), {**named, "stages.warm_start.enabled": False}))
    assert off.stages.warm_start.enabled is False


def test_resolve_keeps_explicit_values_and_applies_pinned_refresh(fake_algos):
    cfg = resolve(apply_overrides(RunConfig(), {
        "algo.method": "seed_stale", "algo.lambda_opd": 0.5, "algo.teacher": "old",
        "algo.lr": 3e-5, "writer.kind": "oracle", "stages.warm_start.enabled": False,
        "stages.skill_sft.enabled": False, "stages.skill_sft.lr": 2e-5,
        "writer.refresh_every": 4}))
    assert (cfg.algo.lambda_opd, cfg.algo.teacher, cfg.algo.lr, cfg.writer.kind) == (
        0.5, "old", 3e-5, "oracle")
    assert (cfg.stages.warm_start.enabled, cfg.stages.skill_sft.enabled) == (False, False)
    assert cfg.stages.skill_sft.lr == 2e-5
    assert cfg.writer.refresh_every == 0  # seed_stale = never refresh the writer


@pytest.mark.parametrize("overrides, message", [
    ({"algo.method": "etro", "env.name": "alfworld"},
     ("writer.kind: 'oracle' needs a built-in env (household, shop, searchqa, sokoban, "
      "ezpoints), got env.name "
      "'alfworld'; use writer.kind=self, frozen or external")),
    ({"writer.kind": "external"},
     "writer.endpoint: required when writer.kind is 'external'"),
    ({"algo.method": "etro", "writer.checkpoint": "/x"},
     "writer.checkpoint: only the frozen writer reads it, but writer.kind is 'oracle'"),
    ({"algo.method": "etro", "writer.kind": "frozen", "writer.checkpoint": "/no/such/model"},
     "writer.checkpoint: '/no/such/model' is not a saved model folder"),
    ({"algo.method": "etro", "writer.constrained": True},
     "writer.constrained: only the self and frozen writers sample with the analyzer format, "
     "but writer.kind is 'oracle'"),
    ({"algo.method": "open"},
     "method 'open' gives no default for algo.lambda_opd; set it explicitly"),
    ({"algo.method": "nope"}, "algo.method: unknown method 'nope';"),
])
def test_resolve_errors(fake_algos, overrides, message):
    assert message in error_of(resolve, apply_overrides(RunConfig(), overrides))


# --- canonical form -----------------------------------------------------------------------


def test_canonical_json_is_stable_and_normalised():
    base = canonical_json(RunConfig())
    assert base.startswith('{"algo":{"adv_eps":1e-06,') and " " not in base
    direct = RunConfig(algo=AlgoConfig(beta_opd=3))  # an int on a float field, built directly
    assert canonical_json(direct) == canonical_json(apply_overrides(RunConfig(), ["algo.beta_opd=3.0"]))
    tiny_diff = apply_overrides(RunConfig(), {"algo.kl_coef": 0.1 + 0.2})
    assert canonical_json(tiny_diff) == canonical_json(apply_overrides(RunConfig(), {"algo.kl_coef": 0.3}))
    assert from_dict(json.loads(canonical_json(direct))) == from_dict(to_dict(direct))


def test_canonical_json_exclude():
    a, b = RunConfig(seed=1), RunConfig(seed=2)
    exclude = ("seed", "tracking", "output.dir")
    assert canonical_json(a) != canonical_json(b)
    assert canonical_json(a, exclude) == canonical_json(b, exclude)
    assert '"tracking"' not in canonical_json(a, exclude)
    assert '"checkpoint_every"' in canonical_json(a, exclude)  # output.dir only
    assert canonical_json(apply_overrides(a, {"algo.beta_opd": 1}), exclude) != canonical_json(a, exclude)
    assert error_of(canonical_json, a, ["sed"]).startswith("unknown key 'sed'; did you mean 'seed'?")
    assert error_of(canonical_json, a, ["seed.x"]) == "unknown key 'seed.x': seed is a value, not a section"


@pytest.mark.slow  # importing trainer.algos imports torch: 3-7 s on the shared CPUs
def test_resolve_every_registered_method_of_the_real_table():
    """Registry coverage against the real trainer.algos (every registered method resolves to
    the spec's defaults with no None left, idempotently)."""
    algos = importlib.import_module("trainer.algos")
    for name in algos.method_names():
        spec = algos.get_method(name)
        cfg = resolve(apply_overrides(RunConfig(), {"algo.method": name}))
        assert None not in flatten(cfg).values(), name
        assert (cfg.algo.lambda_opd, cfg.algo.teacher, cfg.writer.kind) == (
            spec.lambda_opd, spec.teacher, spec.writer), name
        assert cfg.stages.skill_sft.enabled is spec.skill_sft, name
        assert cfg.writer.refresh_every == (1 if spec.writer_refresh is None else spec.writer_refresh)
        if spec.suffix_skill is not None:  # ETRO suffix ablations pin the suffix skill, alpha 1
            assert (cfg.algo.suffix_skill, cfg.algo.suffix_weight) == (spec.suffix_skill, 1.0)
        assert resolve(cfg) == cfg, name


def test_env_level_and_admissible_switch_resolve_per_env():
    household = resolve(RunConfig())
    assert (household.env.level, household.env.show_admissible) == ("full", True)
    shop = resolve(apply_overrides(RunConfig(), {"env.name": "shop"}))
    assert (shop.env.level, shop.env.show_admissible) == ("full", False)
    small = resolve(apply_overrides(RunConfig(), ["env.level=small", "env.show_admissible=false"]))
    assert (small.env.level, small.env.show_admissible) == ("small", False)
    with pytest.raises(ConfigError, match="env.level: 'tiny' is not a level of household; valid: full, small"):
        resolve(apply_overrides(RunConfig(), ["env.level=tiny"]))
    with pytest.raises(ConfigError, match="env.level: 'small' is not a level of shop; valid: full"):
        resolve(apply_overrides(RunConfig(), ["env.name=shop", "env.level=small"]))
    with pytest.raises(ConfigError, match="env.show_admissible: shop has no admissible-command list"):
        resolve(apply_overrides(RunConfig(), ["env.name=shop", "env.show_admissible=true"]))
    with pytest.raises(ConfigError, match="env.action_format: shop takes only text actions"):
        resolve(apply_overrides(RunConfig(), ["env.name=shop", "env.action_format=numbered"]))
    with pytest.raises(ConfigError, match="env.show_admissible cannot be false"):
        resolve(apply_overrides(RunConfig(), ["env.action_format=numbered", "env.show_admissible=false"]))
    with pytest.raises(ConfigError, match="env.action_format: 'letters'.*numbered"):
        resolve(apply_overrides(RunConfig(), ["env.action_format=letters"]))
    with pytest.raises(ConfigError, match=r"env.action_match: shop reads commands only as written.*\(household\)"):
        resolve(apply_overrides(RunConfig(), ["env.name=shop", "env.action_match=nearest"]))
    with pytest.raises(ConfigError, match="env.progress_reward: shop has no distance-to-goal.*with one: household"):
        resolve(apply_overrides(RunConfig(), ["env.name=shop", "env.progress_reward=0.5"]))
    with pytest.raises(ConfigError, match="env.progress_reward"):
        resolve(apply_overrides(RunConfig(), ["env.progress_reward=-0.5"]))
    with pytest.raises(ConfigError, match="env.action_match: 'closest'.*exact, nearest"):
        resolve(apply_overrides(RunConfig(), ["env.action_match=closest"]))
    with pytest.raises(ConfigError, match="env.hidden_cards: shop deals no cards face down.*: ezpoints"):
        resolve(apply_overrides(RunConfig(), ["env.name=shop", "env.hidden_cards=1"]))
    with pytest.raises(ConfigError, match="env.hidden_cards: expected an integer >= 0 and <= 1, got 2"):
        apply_overrides(RunConfig(), ["env.name=ezpoints", "env.hidden_cards=2"])


def test_env_factory_passes_level_and_switch_to_the_env():
    from trainer.run.components import env_factory

    hidden = env_factory(resolve(apply_overrides(RunConfig(), ["env.name=ezpoints", "env.hidden_cards=1"])))()
    assert hidden.hidden_cards == 1
    rule = env_factory(resolve(apply_overrides(RunConfig(), ["env.name=ezpoints", "env.hidden_cards=1",
                                                             "env.level=suit"])))()
    assert (rule.level, rule.family(rule.panel("train")[0])) == ("suit", "sum")  # issue 44's deck rule
    with pytest.raises(ConfigError, match=r"env.level: 'odd' is not a level of ezpoints; valid: full, sum, "
                                          r"product, suit"):
        resolve(apply_overrides(RunConfig(), ["env.name=ezpoints", "env.level=odd"]))
    with pytest.raises(ConfigError, match=r"^env.level: 'suit' is a rule of the face-down card; it needs "
                                          r"env.hidden_cards: 1, got 0$"):  # before any env is built
        resolve(apply_overrides(RunConfig(), ["env.name=ezpoints", "env.level=suit"]))
    hands = env_factory(resolve(apply_overrides(RunConfig(), ["env.name=ezpoints", "env.hidden_cards=1",
                                                              "env.level=suit", "env.hands=3"])))()
    assert (hands.hands, hands.max_turns, len(hands.panel("eval")[0].spec["deals"])) == (3, 18, 3)
    with pytest.raises(ConfigError, match=r"^env.hands: 3 hands in a row need a deck rule"):
        resolve(apply_overrides(RunConfig(), ["env.name=ezpoints", "env.hidden_cards=1", "env.hands=3"]))
    with pytest.raises(ConfigError, match=r"^env.hands: household plays one task an episode; envs with "
                                          r"hands: ezpoints$"):
        resolve(apply_overrides(RunConfig(), ["env.hands=2"]))
    with pytest.raises(ConfigError, match="env.hands: expected an integer >= 1 and <= 5, got 0"):
        apply_overrides(RunConfig(), ["env.name=ezpoints", "env.hands=0"])

    env = env_factory(resolve(apply_overrides(RunConfig(), ["env.level=small", "env.show_admissible=false"])))()
    assert (env.level, env.show_admissible) == ("small", False)
    numbered = env_factory(resolve(apply_overrides(RunConfig(), ["env.action_format=numbered"])))()
    assert numbered.numbered and not env.numbered
    matched = env_factory(resolve(apply_overrides(RunConfig(), ["env.action_match=nearest"])))()
    assert matched.nearest and not env.nearest
    shaped = env_factory(resolve(apply_overrides(RunConfig(), ["env.progress_reward=0.5"])))()
    assert (shaped.progress_reward, env.progress_reward) == (0.5, 0.0)
    assert env.panel("eval_seen")[0].id == "household/eval_seen/s0000"
    shop = env_factory(resolve(apply_overrides(RunConfig(), {"env.name": "shop"})))()
    assert shop.name == "shop"


def test_rewards_are_the_binary_outcome_by_default_and_the_penalty_a_setting():
    """The papers train on a binary outcome (ETRO Sec. 3.2; SEED review): by default an
    invalid step costs nothing, so an episode's return is 1 on success and 0 otherwise;
    ``env.invalid_penalty`` reaches the env when a study sets it (verl-agent uses 0.1)."""
    from trainer.run.components import env_factory

    assert RunConfig().env.invalid_penalty == 0.0
    for penalty, reward in ((None, 0.0), (0.1, -0.1)):
        sets = {} if penalty is None else {"env.invalid_penalty": penalty}
        env = env_factory(resolve(apply_overrides(RunConfig(), sets)))()
        env.reset(env.panel("eval_seen")[0])
        result = env.step("<action>fly to the moon</action>")
        assert result.info["valid"] is False and result.reward == pytest.approx(reward)


def test_teacher_current_is_refused_where_delta_feeds_the_advantages():
    """ETRO's family and RLSD route Delta into advantages computed once before the update, so
    algo.teacher=current would be resolved, logged and not run: an error instead."""
    from trainer.config import ConfigError, RunConfig, apply_overrides
    from trainer.run.resolve import resolve

    for method in ("etro", "rlsd"):
        for teacher in ("current", "initial"):
            cfg = apply_overrides(RunConfig(), {"algo.method": method, "algo.teacher": teacher})
            with pytest.raises(ConfigError, match=f"algo.teacher: '{teacher}' needs a method whose OPD is a loss"):
                resolve(cfg)
    seed = apply_overrides(RunConfig(), {"algo.method": "seed", "algo.teacher": "old"})
    assert resolve(seed).algo.teacher == "old"


def test_gradient_parts_is_for_one_process():
    one = resolve(apply_overrides(RunConfig(), ["algo.method=seed", "tracking.gradient_parts=true"]))
    assert one.tracking.gradient_parts
    with pytest.raises(ConfigError, match="tracking.gradient_parts: measures one process's gradients, "
                                          "but parallel.workers is 2; set parallel.workers=1"):
        resolve(apply_overrides(RunConfig(), ["tracking.gradient_parts=true", "parallel.workers=2",
                                              "rollout.tasks_per_step=4"]))
