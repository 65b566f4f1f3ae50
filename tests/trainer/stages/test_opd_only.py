"""OPD alone (``opd_only``, issue 44: SEED's internalization test) on the micro tiny backbone,
EZPoints under the suit rule: each teacher log-prob the update distils is the teacher's, in the
context that states its OWN trajectory's family lesson, for the very token the student wrote
at that position.  A teacher scored one token off is caught (the test breaks it on purpose)."""

from __future__ import annotations

import pytest
import torch

import trainer.stages.rl as rl
from envs.ezpoints.rules import OPERATOR, lesson_operator
from support.paths import DATA
from trainer.run.resolve import load_config, resolve

MICRO = DATA / "train_micro.yaml"
SUIT = ["env.name=ezpoints", "env.hidden_cards=1", "env.level=suit", "env.max_turns=4",
        "rollout.tasks_per_step=4", "algo.micro_batch_size=64"]


@torch.no_grad()
def independent_logp(model, seq, temperature: float) -> torch.Tensor:
    """log p(token_p | tokens before p) of ``seq``'s scored tokens, in order, from one plain
    forward pass (nothing of the trainer's scoring code)."""
    ids = torch.tensor([seq.input_ids])
    logits = model(input_ids=ids).logits[0].float() / temperature  # [L, V]
    positions = [p for p, m in enumerate(seq.action_mask) if m]
    logp = torch.log_softmax(logits[[p - 1 for p in positions]], dim=-1)  # [A, V]
    return logp[torch.arange(len(positions)), ids[0, positions]]  # [A]


def misaligned_tokens(ctx, checks) -> int:
    """How many distilled teacher log-probs differ from the teacher's own at that token."""
    bad = 0
    for plan, part, inputs in checks:
        for j, s in enumerate(part):
            expected = independent_logp(ctx.model, plan.teacher[s], ctx.cfg.rollout.temperature)
            used = inputs.logp_teacher[j, : len(expected)].detach().float()
            bad += int(((used - expected).abs() > 1e-4).sum())
    return bad


@pytest.mark.slow
@pytest.mark.parametrize("broken", [False, True], ids=["aligned", "teacher-shifted-by-one"])
def test_opd_only_distils_each_teacher_token_where_its_student_wrote_it(tmp_path, monkeypatch, broken):
    from trainer.run.components import build_components, start_rl

    cfg = resolve(load_config(MICRO, ["algo.method=opd_only", *SUIT, f"output.dir={tmp_path}"]))
    assert (cfg.writer.kind, cfg.algo.teacher, cfg.algo.lambda_opd) == ("oracle", "current", 1.0)
    ctx = build_components(cfg)
    start_rl(ctx)
    checks, real_micro, real_terms, real_scores = [], rl._micro_loss, rl.policy_loss_terms, rl.sequence_logprobs

    def micro(ctx_, batch, plan, part, timer, record):
        checks.append([plan, part])
        return real_micro(ctx_, batch, plan, part, timer, record)

    def terms(spec, inputs, algo):
        checks[-1].append(inputs)  # the weights are still those the teacher scored with
        checks[-1].append(misaligned_tokens(ctx, [checks[-1]]))
        return real_terms(spec, inputs, algo)

    def shifted(model, seqs, *args, grad=False, **kw):  # the teacher's pass: no gradient
        out = real_scores(model, seqs, *args, grad=grad, **kw)
        return out if grad else (torch.roll(out[0], 1, dims=1), *out[1:])

    monkeypatch.setattr(rl, "_micro_loss", micro)
    monkeypatch.setattr(rl, "policy_loss_terms", terms)
    if broken:
        monkeypatch.setattr(rl, "sequence_logprobs", shifted)
    before = [p.detach().clone() for p in ctx.model.parameters() if p.requires_grad]
    batch = rl.collect_batch(ctx, 0, rl.PhaseTimer())
    # every teacher context states its own trajectory's family lesson (the oracle's, uncut)
    added = rl._added_texts(ctx, "positive", batch)
    for traj, text in zip(batch.trajectories, added, strict=True):
        assert lesson_operator(text) == OPERATOR[ctx.prompt_env.family(traj.episode.task)]
    metrics, finite = rl.update(ctx, batch, 0, rl.PhaseTimer())
    assert finite and checks and all(len(c) == 4 for c in checks)
    for plan, part, _, _ in checks:  # each teacher sequence is its trajectory's, with its skill
        for s in part:
            row = int(plan.traj_rows[plan.teacher[s].traj])
            rebuilt = ctx.builder.build_batch([batch.trajectories[row]], None, [added[row]])[0]
            assert plan.teacher[s].input_ids == rebuilt.input_ids
    bad = sum(c[3] for c in checks)
    tokens = sum(int(c[2].mask.sum()) for c in checks)
    if broken:
        assert bad > tokens // 2, f"a teacher shifted by one token went unnoticed ({bad} of {tokens})"
        return
    assert bad == 0, f"{bad} of {tokens} distilled teacher log-probs are not the teacher's at that token"
    assert metrics["loss/opd"] != 0 and metrics.get("loss/rl", 0.0) == 0.0
    after = [p for p in ctx.model.parameters() if p.requires_grad]
    assert any(not torch.equal(a, b) for a, b in zip(after, before))
