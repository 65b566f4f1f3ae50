"""``hindsight diagnose skill``: the skill signal of a frozen actor (issue 28) on the bundled
EZPoints warm start, with the oracle writer, on a panel of three tasks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from sweeps.cli import main
from trainer.run.components import build_components, start_rl
from trainer.run.resolve import load_config, resolve

ROOT = Path(__file__).resolve().parents[3]
CONFIG = ROOT / "examples" / "ezpoints_small.yaml"
ACTOR = ROOT / "trainer" / "assets" / "warm_start" / "ezpoints"
SETS = ["stages.warm_start.enabled=false", "stages.skill_sft.enabled=false", "algo.method=etro",
        "writer.kind=oracle", "algo.kl_coef=0", "model.device=cpu"]


def test_the_skill_signal_leaves_the_actor_unchanged_and_is_consistent(tmp_path):
    from trainer.protocols.skill_signal import skill_signal

    ctx = build_components(resolve(load_config(CONFIG, [*SETS, f"output.dir={tmp_path}"])),
                           init_from=str(ACTOR))
    start_rl(ctx)
    before = {k: v.clone() for k, v in ctx.model.state_dict().items()}
    signal = skill_signal(ctx, tasks=3, samples=2)
    assert all(torch.equal(v, before[k]) for k, v in ctx.model.state_dict().items())
    assert signal["trajectories"] == 6 and signal["skilled"] == 6  # the oracle is always valid
    assert signal["tokens"] > 6 and signal["delta_abs"] >= abs(signal["delta_mean"])
    assert 0.0 < signal["gate_mean"] < 1.0 and signal["gate_std"] >= 0.0
    # the moved tokens are a part of all: their share of the mean |Delta| cannot exceed it
    assert 0.0 <= signal["moved_share"] <= 1.0
    assert signal["moved_share"] * signal["moved_delta_abs"] <= signal["delta_abs"] + 1e-9
    assert signal["moved_delta_abs"] >= 1.0 if signal["moved_share"] else signal["moved_delta_abs"] == 0.0
    assert 0.0 <= signal["success_skill"] <= 1.0 and 0.0 <= signal["success_no_skill"] <= 1.0
    pairs = signal.pop("paired_differences")  # one per replayed task, with - without
    assert len(pairs) == 6 and set(pairs) <= {-1.0, 0.0, 1.0}
    assert sum(pairs) / 6 == pytest.approx(signal["success_skill"] - signal["success_no_skill"])
    parts = ("thought", "action", "format")  # every scored token lies in one part of its response
    assert sum(signal[f"tokens_{p}"] for p in parts) == signal["tokens"]
    assert sum(signal[f"moved_{p}"] for p in parts) == pytest.approx(signal["moved_share"] * signal["tokens"])
    listed = [abs(m["delta"]) for m in signal["most_moved"]]
    assert listed == sorted(listed, reverse=True) and all(d >= 1.0 for d in listed) and len(listed) <= 8
    again = skill_signal(ctx, tasks=3, samples=2)
    assert again.pop("paired_differences") == pairs and again.pop("most_moved") == signal.pop("most_moved")
    assert again == pytest.approx(signal)  # seeded throughout


def test_diagnose_skill_command_prints_and_writes_the_signal(tmp_path, capsys):
    out = tmp_path / "d"
    argv = ["diagnose", "skill", str(CONFIG), "--actor", str(ACTOR), "--writer", "oracle",
            "--panel-tasks", "2", "--samples", "1", "--diagnose-dir", str(out)]
    assert main(argv) == 0
    signal = json.loads((out / "skill_signal.json").read_text())
    assert signal["writer"] == "oracle" and signal["trajectories"] == 2
    assert signal["lift_ci_low"] <= signal["lift_ci_high"]  # two pairs: a bootstrap interval
    printed = capsys.readouterr().out
    assert "mean |Delta|" in printed and "success with the skill in context" in printed
    assert "|Delta| >= 1 nat on " in printed and "moved (|Delta| >= 1) by part of the response: thought " in printed
    assert "95% paired bootstrap interval" in printed and "over 2 pairs" in printed


RULE = ["env.hidden_cards=1", "env.level=suit"]  # EZPoints' suit rule: two families of deals


def test_the_transfer_mode_replays_with_another_tasks_and_another_familys_skill(tmp_path, monkeypatch):
    """--transfer (issue 44): each task is replayed with the skill the writer wrote on ANOTHER
    task of its family (same lesson, another deal) and with one of the other family (the
    shuffled control), on the seeds of the no-skill replay."""
    import trainer.protocols.skill_signal as protocol
    from envs.ezpoints.rules import OPERATOR, lesson_operator

    ctx = build_components(resolve(load_config(CONFIG, [*SETS, *RULE, f"output.dir={tmp_path}"])),
                           init_from=str(ACTOR))
    start_rl(ctx)
    calls, real = [], protocol.collect

    def spy(make_env, tasks, builder, backend, sampling, skills=None, **kw):
        calls.append((list(tasks), skills))
        return real(make_env, tasks, builder, backend, sampling, skills, **kw)

    monkeypatch.setattr(protocol, "collect", spy)
    signal = protocol.skill_signal(ctx, tasks=6, samples=2, transfer=True)
    tasks = calls[0][0]
    assert {ctx.prompt_env.family(t) for t in tasks} == {"sum", "product"}
    (_, own), (_, none), (_, same), (_, other) = calls[1:]  # play, replays: own, none, transfer, shuffled
    assert none is None and len(own) == len(same) == len(other) == len(tasks)
    family = ctx.prompt_env.family
    for task, mine, given, shuffled in zip(tasks, own, same, other, strict=True):
        right = OPERATOR[family(task)]
        assert lesson_operator(mine) == right != lesson_operator(shuffled)
        if not any(family(t) == family(task) and t.id != task.id for t in tasks):
            assert given is None  # its family's only deal on the panel: left out, never its own skill
            continue
        donors = {own[j] for j, t in enumerate(tasks) if family(t) == family(task) and t.id != task.id}
        assert lesson_operator(given) == right and given in donors  # another deal's hindsight
    for name, given in (("transfer", same), ("shuffled", other)):
        pairs = signal[f"paired_differences_{name}"]
        n = sum(text is not None for text in given)
        assert len(pairs) == n > 0 and set(pairs) <= {-1.0, 0.0, 1.0}
        assert sum(pairs) / n == pytest.approx(signal[f"success_{name}"] - signal[f"success_no_skill_{name}"])


def test_diagnose_skill_transfer_prints_and_writes_both_lifts(tmp_path, capsys):
    out = tmp_path / "d"
    argv = ["diagnose", "skill", str(CONFIG), "--actor", str(ACTOR), "--writer", "oracle", "--transfer",
            "--panel-tasks", "4", "--samples", "1", "--diagnose-dir", str(out),
            *(f"--set={s}" for s in RULE)]
    assert main(argv) == 0
    signal = json.loads((out / "skill_signal.json").read_text())
    for name in ("transfer", "shuffled"):
        assert signal[f"lift_{name}_ci_low"] <= signal[f"lift_{name}"] <= signal[f"lift_{name}_ci_high"]
    printed = capsys.readouterr().out
    assert "with a skill written on another task of its family " in printed
    assert "with a skill of another family (shuffled control) " in printed
    assert printed.count("95% paired bootstrap interval") == 3
    assert main(argv[:-2] + ["--diagnose-dir", str(out)]) == 2  # gym_cards' deck: no families
    assert capsys.readouterr().err.strip() == (
        "error: --transfer: env ezpoints (level full) defines no task families to take another task's "
        "skill from; envs with them: ezpoints with env.level: sum, product or suit (suit for the shuffled control)")


def test_response_parts_follow_the_tags_a_token_begins_in():
    from trainer.protocols.skill_signal import response_parts

    pieces = ["<", "think", ">", "4", " is", " 4", ",", " the", "</", "think", "><", "action", ">", " +",
              "</", "action", ">", "\n", "<think>", "ok", "</think>", "<action>", "=", "</action>"]
    assert response_parts(pieces) == (["format"] * 3 + ["thought"] * 5 + ["format"] * 5 + ["action"]
                                      + ["format"] * 5 + ["thought", "format", "format", "action", "format"])
    assert response_parts(["go", " east"]) == ["format", "format"] and response_parts([]) == []


def test_where_moved_counts_each_part_and_lists_the_most_moved_with_their_context():
    """A planted Delta: -9 on the thought's comma, +2 on the action, 0.5 elsewhere."""
    from types import SimpleNamespace

    from trainer.protocols.skill_signal import where_moved

    vocab = ["prompt", "<think>", "4", " is", " 4", ",", " other", "</think>", "<action>", "+", "</action>"]
    tokenizer = SimpleNamespace(decode=lambda ids: "".join(vocab[i] for i in ids))
    ids = list(range(len(vocab)))
    seq = SimpleNamespace(input_ids=ids, action_mask=[0] + [1] * (len(vocab) - 1))
    gaps = {",": -9.0, "+": 2.0}
    delta = torch.tensor([[gaps.get(vocab[i], 0.5) for i in ids[1:]] + [float("nan")]])
    mask = torch.tensor([[True] * (len(vocab) - 1) + [False]])
    out = where_moved(tokenizer, [seq], delta, mask)
    assert (out["tokens_thought"], out["tokens_action"], out["tokens_format"]) == (5, 1, 4)
    assert (out["moved_thought"], out["moved_action"], out["moved_format"]) == (1, 1, 0)
    first, second = out["most_moved"]
    assert (first["token"], first["delta"], first["part"]) == (",", -9.0, "thought")
    assert first["before"] == "prompt<think>4 is 4" and (second["token"], second["part"]) == ("+", "action")
