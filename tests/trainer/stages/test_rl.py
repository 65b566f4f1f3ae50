"""The RL step's wiring (trainer/rl.py) on a micro tiny backbone: every switch the step reads
does what it says (the teacher's weights, the privileged context, the config fields the
method resolves), and every method leaves Delta in the per-turn records."""

from __future__ import annotations

import copy
import dataclasses
import random
import sys

import pytest
import torch

import trainer.stages.rl as rl
import trainer.stages.step_metrics as step_metrics
from support.paths import DATA
from trainer.algos import get_method
from trainer.config import AlgoConfig, ConfigError
from trainer.models.lora import with_lora
from trainer.run.components import build_components, family_groups
from trainer.run.resolve import load_config, resolve

MICRO = DATA / "train_micro.yaml"


@pytest.fixture(scope="module")
def base_ctx(tmp_path_factory):
    """One micro context (SEED with the oracle writer, so that skills exist); variants share
    its model and tokenizer and rebuild the per-method parts."""
    out = tmp_path_factory.mktemp("rl")
    cfg = resolve(load_config(MICRO, ["algo.method=seed", "writer.kind=oracle", f"output.dir={out}"]))
    return build_components(cfg)


def variant(base, method: str, *overrides: str, wrap=lambda cfg: cfg):
    """``base`` with the resolved config of ``method`` (``wrap`` applied to it), the method's
    spec and a fresh writer, optimizer and reference (``start_rl``)."""
    from trainer.hindsight.writers import PrivilegedContext
    from trainer.run.components import start_rl

    cfg = resolve(load_config(MICRO, [f"algo.method={method}", f"output.dir={base.cfg.output.dir}",
                                      *overrides]))
    ctx = copy.copy(base)
    ctx.cfg = wrap(cfg)
    ctx.spec = get_method(ctx.cfg.algo.method)  # as build_components does
    ctx.privileged = PrivilegedContext(ctx.make_env) if "privileged" in ctx.spec.skills else None
    start_rl(ctx)
    return ctx


@pytest.fixture
def restore(base_ctx):
    """Put the shared model's weights back after a test that updates or perturbs them."""
    state = copy.deepcopy(base_ctx.model.state_dict())
    yield
    base_ctx.model.load_state_dict(state)


def capture_losses(monkeypatch) -> list:
    """Record the LossInputs of every minibatch the update runs."""
    seen, real = [], rl.policy_loss_terms

    def spy(spec, inputs, cfg):
        seen.append(inputs)
        return real(spec, inputs, cfg)

    monkeypatch.setattr(rl, "policy_loss_terms", spy)
    return seen


@pytest.mark.parametrize("teacher", ["old", "current"])
def test_teacher_logprobs_come_from_the_chosen_weights(base_ctx, restore, monkeypatch, teacher):
    """``algo.teacher`` is honoured whatever the method's default (SEED's is current): old =
    the weights the batch was collected with, current = the live weights of the update."""
    ctx = variant(base_ctx, "seed", "writer.kind=oracle", f"algo.teacher={teacher}")
    batch = rl.collect_batch(ctx, 1, rl.PhaseTimer())
    assert batch.opd_rows["positive"].any()
    student_seq = rl._score(ctx, ctx.model, batch.trajectories, batch.rollout_skills)[1]
    at_collection = rl._teacher_logp(ctx, ctx.model, batch, "positive", student_seq)
    with torch.no_grad():  # the policy moves between collection and the update
        for p in ctx.model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    live = rl._teacher_logp(ctx, ctx.model, batch, "positive", student_seq)
    mask = batch.old.mask.bool()
    assert not torch.allclose(at_collection[mask], live[mask])
    seen = capture_losses(monkeypatch)
    rl.update(ctx, batch, 1, rl.PhaseTimer())
    expected = at_collection if teacher == "old" else live
    for inputs, want in zip(seen, micro_batch_values(ctx, batch, expected)):
        valid = inputs.mask.bool()
        torch.testing.assert_close(inputs.logp_teacher[valid], want[valid])


@pytest.mark.parametrize("lora", [False, True])
def test_the_initial_teacher_scores_with_the_rl_initialisation(base_ctx, restore, monkeypatch, tmp_path, lora):
    """``algo.teacher: initial`` scores the skilled context inside the update with the weights
    RL started from, not the moved policy's: a frozen copy kept for it without any KL term, or
    under LoRA the base with the adapters disabled, which train again afterwards."""
    ctx = base_ctx
    if lora:
        ctx = copy.copy(base_ctx)
        ctx.model = with_lora(copy.deepcopy(base_ctx.model), dataclasses.replace(base_ctx.cfg.model.lora, rank=4))
    ctx = variant(ctx, "seed", "writer.kind=oracle", "algo.teacher=initial", "algo.kl_coef=0",
                  f"output.dir={tmp_path}", *(["model.lora.rank=4"] if lora else []))
    assert (ctx.reference is None) == lora  # the copy exists for the teacher alone
    initial = copy.deepcopy(ctx.model)
    with torch.no_grad():  # the policy moved since the RL start
        for name, p in ctx.model.named_parameters():
            if not lora or ".lora_B." in name:
                p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    batch = rl.collect_batch(ctx, 1, rl.PhaseTimer())
    assert batch.opd_rows["positive"].any() and batch.logp_ref is None  # no KL term, no reference pass
    student_seq = rl._score(ctx, ctx.model, batch.trajectories, batch.rollout_skills)[1]
    want = rl._teacher_logp(ctx, initial, batch, "positive", student_seq)
    moved = rl._teacher_logp(ctx, ctx.model, batch, "positive", student_seq)
    mask = batch.old.mask.bool()
    assert not torch.allclose(want[mask], moved[mask])
    seen = capture_losses(monkeypatch)
    rl.update(ctx, batch, 1, rl.PhaseTimer())
    assert seen
    for inputs, expected in zip(seen, micro_batch_values(ctx, batch, want)):
        valid = inputs.mask.bool()
        torch.testing.assert_close(inputs.logp_teacher[valid], expected[valid])
    if lora:
        assert all(p.requires_grad for n, p in ctx.model.named_parameters() if ".lora_" in n)


def micro_batch_values(ctx, batch, values):
    """``values`` [B, T] of the step as the update's micro-batches see them, in their order
    (the first epoch): [n, A] per micro-batch (trainer.rl._plan, MicroBatching.plan)."""
    from trainer.episodes.scoring import MicroBatching, gather_actions

    n = len(batch.trajectories)
    order = list(range(n))  # the update's minibatch order
    random.Random(f"mb:{ctx.cfg.seed}:1").shuffle(order)
    size = ctx.cfg.algo.minibatch_size or n
    for start in range(0, n, size):
        plan = rl._plan(ctx, batch, order[start:start + size])
        for part in MicroBatching.of(ctx.cfg.algo).plan([len(s) for s in plan.student]):
            yield gather_actions(values, plan.index.part(part), plan.traj_rows)


@pytest.mark.parametrize("method", ["seed", "grpo_opsd", "etro"])
def test_every_method_records_delta_and_gate_per_turn(base_ctx, restore, method):
    """Current-teacher methods (SEED, GRPO+OPSD) keep the Delta their loss used, so the
    value-alignment and staleness diagnostics can run on them as on ETRO."""
    from trainer.episodes.records import build_records

    ctx = variant(base_ctx, method, "writer.kind=oracle")
    batch = rl.collect_batch(ctx, 1, rl.PhaseTimer())
    rl.update(ctx, batch, 1, rl.PhaseTimer())
    primary = ctx.spec.skills[0]
    assert primary in batch.deltas and batch.deltas[primary].abs().sum() > 0
    frame = build_records(1, "train", batch.trajectories, batch.group_ids, batch.hindsights,
                          batch.deltas, batch.old.turn_ids, batch.old.mask, ctx.cfg.algo.beta_opd)
    assert frame["gate_mean"].notna().any()
    if primary == "positive":
        assert frame["delta_pos"].notna().any()


def test_privileged_context_methods_never_depend_on_the_writer(base_ctx, restore, monkeypatch):
    """GRPO+OPSD with a writer whose every output is malformed still distils from the
    privileged context on every trajectory."""
    ctx = variant(base_ctx, "grpo_opsd", "writer.kind=none")
    batch = rl.collect_batch(ctx, 1, rl.PhaseTimer())
    assert not any(h.valid for h in batch.hindsights)
    assert bool(batch.opd_rows["privileged"].all())
    seen = capture_losses(monkeypatch)
    rl.update(ctx, batch, 1, rl.PhaseTimer())
    torch.testing.assert_close(seen[0].opd_mask.float(), seen[0].mask.float())


def test_a_malformed_boundary_keeps_positive_opd_for_every_method(base_ctx):
    """A writer output whose boundary is malformed keeps its Positive skill (SEED, ETRO's
    Positive-throughout fallback) but has no Negative one."""
    from trainer.hindsight.analyzer import parse_analyzer_output

    ctx = variant(base_ctx, "etro", "writer.kind=oracle")
    h = parse_analyzer_output("<positive>p</positive><error_turn>9</error_turn><negative>n</negative>", 3)
    trajs = [type("T", (), {"task": None})()]
    assert rl.context_skills(ctx, "positive", trajs, [h]) == ["p"]
    assert rl.context_skills(ctx, "negative", trajs, [h]) == [None]


def test_a_long_skill_is_cut_counted_and_scored_with_the_students_history(base_ctx, restore, monkeypatch):
    """A skill longer than ``writer.max_skill_tokens`` is cut to it and counted
    (``skill/cut_count``), never an error: before, a skill longer than the prompt budget
    raised PromptTooLong for the teacher only.  The teacher scores the student's sequences
    with the cut skill added (same history: the student's truncation)."""
    from envs.base import Hindsight
    from trainer.episodes.samples import SKILL_HEADER
    from trainer.models.chat import encode

    ctx = variant(base_ctx, "seed", "writer.kind=oracle", "writer.max_skill_tokens=16",
                  "model.max_prompt_tokens=512", "algo.teacher=old")
    long_skill = "go to the fridge and open it, then take the apple and put it down. " * 60
    assert len(encode(ctx.tokenizer, long_skill)) > 512
    monkeypatch.setattr(ctx.writer, "write", lambda trajs, seed=None: [Hindsight(long_skill) for _ in trajs])
    built = []
    real = rl.score_trajectories

    def spy(model, builder, trajs, skills=None, micro_batch=8, **kw):
        out = real(model, builder, trajs, skills, micro_batch, **kw)
        built.append((kw.get("added_skills"), out[1]))
        return out

    monkeypatch.setattr(rl, "score_trajectories", spy)
    batch = rl.collect_batch(ctx, 1, rl.PhaseTimer())
    n = len(batch.trajectories)
    cut = ctx.tokenizer.decode(encode(ctx.tokenizer, long_skill)[:16])
    assert batch.texts["positive"] == [cut] * n
    metrics = step_metrics.step_metrics(ctx, batch, rl.PhaseTimer())
    assert (metrics["skill/cut_count"], metrics["skill/cut_rate"]) == (n, 1.0)
    assert rl.skill_texts(ctx, "positive", batch) == [cut] * n  # what the skill samples show
    (none, student), (added, teacher) = built[0], built[-1]  # the scoring pass, the teacher
    assert none is None and added == [cut] * n and len(teacher) == len(student)
    for s, t in zip(student, teacher):
        s_text, t_text = ctx.tokenizer.decode(list(s.input_ids)), ctx.tokenizer.decode(list(t.input_ids))
        assert t_text.replace(SKILL_HEADER + cut.strip(), "", 1) == s_text
    assert bool(batch.opd_rows["positive"].all()) and batch.deltas["positive"].abs().sum() > 0


def test_seed_static_library_is_written_once_by_the_policy_at_the_rl_start(base_ctx, restore, monkeypatch,
                                                                          tmp_path):
    """SEED Table 2's static library: "skills generated once, from an early checkpoint, never
    refreshed" -- the policy at the RL initialisation plays the library tasks and its own
    writer writes them; valid skills make the library, saved for resume; the oracle's
    library is the separate variant seed_static_oracle."""
    import json

    from envs.base import Hindsight
    from trainer.hindsight import writers
    from trainer.run.components import LIBRARY_TASKS, SELF_LIBRARY, build_components, start_rl

    calls = []

    def fake_write(self, trajs, seed=None):
        calls.append([t.task.id for t in trajs])
        return [Hindsight(f"skill of {t.task.id}") if i % 2 == 0 else writers.INVALID
                for i, t in enumerate(trajs)]

    monkeypatch.setattr(writers.SelfWriter, "write", fake_write)
    ctx = variant(base_ctx, "seed_static", f"output.dir={tmp_path}")
    tasks = ctx.train_tasks[-LIBRARY_TASKS:]
    assert calls == [[t.id for t in tasks]]  # one episode per library task, written once
    expected = [{"instruction": t.instruction, "skill": f"skill of {t.id}"} for t in tasks[::2]]
    assert json.loads((tmp_path / SELF_LIBRARY).read_text()) == expected == ctx.library.entries
    assert ctx.library.metrics == {"library/size": LIBRARY_TASKS / 2, "library/valid_rate": 0.5}
    batch = rl.collect_batch(ctx, 1, rl.PhaseTimer())
    skills = {e["skill"] for e in expected}
    assert all(h.valid and h.positive_skill in skills for h in batch.hindsights)
    assert len(calls) == 1  # never refreshed
    monkeypatch.setattr(writers.SelfWriter, "write", lambda self, trajs, seed=None: pytest.fail("rewritten"))
    ctx.library = None
    start_rl(ctx, resume=tmp_path)  # resume reads the saved library back
    assert ctx.library.entries == expected

    oracle = build_components(resolve(load_config(MICRO, ["algo.method=seed_static_oracle",
                                                       f"output.dir={tmp_path / 'o'}"])))
    from trainer.hindsight.writers import build_library
    assert oracle.library.entries == build_library(oracle.make_env, oracle.train_tasks[-LIBRARY_TASKS:])


# --- every config field the trainer resolves for a method is read by the step ------------

# Functions whose reads do not count as use: they copy, print or resolve the config.
NOT_USE = {"resolve_algo", "resolve", "replace", "flatten", "to_dict", "_plain", "__repr__", "__eq__",
           "__hash__", "fields", "asdict", "canonical_json", "apply_overrides", "field_types"}


def tracked(cfg, reads: set, prefix: str = ""):
    """A copy of the config tree whose field reads (outside :data:`NOT_USE`) land in ``reads``
    as dotted keys."""
    values = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    values = {k: tracked(v, reads, f"{prefix}{k}.") if dataclasses.is_dataclass(v) else v
              for k, v in values.items()}
    cls = type(cfg)

    def getattribute(self, name):
        if name in cls.__dataclass_fields__ and sys._getframe(1).f_code.co_name not in NOT_USE:
            reads.add(prefix + name)
        return object.__getattribute__(self, name)

    return type(f"Tracked{cls.__name__}", (cls,), {"__getattribute__": getattribute})(**values)


def relevant_algo_fields(method: str) -> set[str]:
    """The ``algo`` fields that change what one RL step of ``method`` does."""
    spec = get_method(method)
    keep = set()
    for f in dataclasses.fields(AlgoConfig):
        name = f.name
        if name in ("suffix_weight",):
            use = spec.credit in ("etro",)
        elif name == "suffix_skill":
            use = spec.credit is not None and spec.credit.startswith("etro")
        elif name.startswith("rlsd_"):
            use = spec.credit == "rlsd"
        elif name == "beta_opd":
            use = spec.opd_loss == "seed"
        elif name == "opsd_top_k":
            use = spec.opd_loss == "opsd"
        elif name in ("lambda_opd", "teacher"):
            use = bool(spec.skills) and (spec.opd_loss is not None or spec.credit != "rlsd")
        elif name in ("std_mode", "adv_eps"):
            use = spec.advantage == "grpo"
        elif name in ("clip_eps", "kl_coef", "loss_agg", "clip_ratio_c", "kl_clamp"):
            use = spec.uses_rl
        else:
            use = True
        if use:
            keep.add(f"algo.{name}")
    return keep


@pytest.mark.parametrize("method, extra", [
    ("grpo", ()), ("seed", ()), ("seed", ("algo.teacher=old",)), ("etro", ()), ("grpo_opsd", ()),
    ("rlsd", ()),
])
def test_every_resolved_algo_field_is_read_by_the_rl_step(base_ctx, restore, method, extra):
    """Walk the config fields one RL step reads (start_rl, collect, update): a field that is
    resolved for the method but never read outside the resolution (e.g. ``algo.teacher``
    before it was honoured) fails here."""
    reads: set[str] = set()
    ctx = variant(base_ctx, method, "writer.kind=oracle", *extra, wrap=lambda cfg: tracked(cfg, reads))
    batch = rl.collect_batch(ctx, 1, rl.PhaseTimer())
    rl.update(ctx, batch, 1, rl.PhaseTimer())
    ignored = relevant_algo_fields(method) - reads
    assert not ignored, f"{method}: resolved but never read by the step: {sorted(ignored)}"
    if get_method(method).skills:
        assert "writer.kind" in reads


def test_resume_restores_the_reference_and_the_frozen_writer_bit_for_bit(base_ctx, restore, tmp_path):
    """start_rl(resume=checkpoint) loads the KL reference from the saved RL initialisation and
    SEED-stale's writer snapshot from the checkpoint, not copies of the resumed policy."""
    from trainer.run.checkpoint import TrainerState, rl_init_path, save_checkpoint, save_module
    from trainer.run.components import frozen_writer, start_rl

    ctx = variant(base_ctx, "seed_stale", "writer.kind=self", f"output.dir={tmp_path}")
    assert ctx.reference is not None and frozen_writer(ctx) is not None
    save_module(ctx.reference, rl_init_path(tmp_path))
    init = copy.deepcopy(ctx.model.state_dict())

    def nudge(scale):
        with torch.no_grad():
            for p in ctx.model.parameters():
                p.add_(scale)

    nudge(0.01)  # training moved the policy; the frozen writer refreshed to it once
    frozen_writer(ctx).load_state_dict(ctx.model.state_dict())
    snapshot = copy.deepcopy(frozen_writer(ctx).state_dict())
    ckpt = save_checkpoint(tmp_path, TrainerState(step=1), ctx.model, ctx.tokenizer, ctx.optimizer,
                           writer_snapshot=frozen_writer(ctx))
    nudge(0.01)  # the resumed policy differs from both
    start_rl(ctx, resume=ckpt)
    for name, value in ctx.reference.state_dict().items():
        assert torch.equal(value, init[name]), name
    for name, value in frozen_writer(ctx).state_dict().items():
        assert torch.equal(value, snapshot[name]), name
    assert not torch.equal(next(iter(snapshot.values())), next(iter(ctx.model.state_dict().values())))


def _state(module) -> dict:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def test_frozen_writer_is_the_rl_initialisation_and_never_refreshes(base_ctx, restore):
    """writer.kind=frozen (any method, here ETRO): the policy as it starts RL writes from the
    trajectory alone, and neither an update nor a refresh call moves it."""
    from trainer.run.components import frozen_writer

    ctx = variant(base_ctx, "etro", "writer.kind=frozen")
    assert ctx.writer.kind == "frozen" and ctx.cfg.writer.refresh_every == 0
    init = _state(ctx.model)
    batch = rl.collect_batch(ctx, 1, rl.PhaseTimer())
    assert len(batch.hindsights) == len(batch.trajectories)
    rl.update(ctx, batch, 1, rl.PhaseTimer())
    ctx.writer.on_update(1, ctx.model)
    snapshot = frozen_writer(ctx)
    assert snapshot is not ctx.model
    moved = [k for k, v in ctx.model.state_dict().items() if not torch.equal(v, init[k])]
    assert moved, "the update should move the policy"
    for name, value in snapshot.state_dict().items():
        assert torch.equal(value, init[name]), name


def test_frozen_writer_loads_a_checkpoint_with_its_tokenizer(base_ctx, restore, tmp_path):
    """writer.checkpoint: the writer writes with those saved weights (a run checkpoint's
    model/ folder), not with the policy's."""
    from trainer.run.components import frozen_writer

    saved = _state(base_ctx.model)
    (tmp_path / "step_000003").mkdir()
    base_ctx.model.save_pretrained(tmp_path / "step_000003" / "model")
    base_ctx.tokenizer.save_pretrained(tmp_path / "step_000003" / "model")
    with torch.no_grad():
        for p in base_ctx.model.parameters():
            p.add_(0.01)
    ctx = variant(base_ctx, "seed", "writer.kind=frozen",
                  f"writer.checkpoint={tmp_path / 'step_000003'}")
    snapshot = frozen_writer(ctx)
    for name, value in snapshot.state_dict().items():
        torch.testing.assert_close(value, saved[name], rtol=0, atol=0, msg=name)
    assert ctx.writer.tokenizer is not ctx.tokenizer
    assert ctx.writer.tokenizer("go to desk 1")["input_ids"] == \
        ctx.tokenizer("go to desk 1")["input_ids"]
    assert len(ctx.writer.write(rl.collect_batch(ctx, 1, rl.PhaseTimer()).trajectories)) > 0


def test_opsd_matches_distributions_on_the_teachers_topk(base_ctx, restore, monkeypatch):
    """GRPO+OPSD (opsd_top_k = 20 by default) hands the loss the teacher's top-20 support and
    the student's log-probs of the same ids; opsd_top_k = 0 keeps the sampled-token path; an
    old teacher cannot match distributions (the config says so)."""
    from trainer.config import ConfigError

    seen = capture_losses(monkeypatch)
    ctx = variant(base_ctx, "grpo_opsd", "writer.kind=oracle")
    batch = rl.collect_batch(ctx, 1, rl.PhaseTimer())
    metrics, _ = rl.update(ctx, batch, 1, rl.PhaseTimer())
    inputs = seen[0]
    assert inputs.topk_logp.shape == (*inputs.mask.shape, 20) and inputs.topk_logp.requires_grad
    mask = inputs.mask.bool()
    top = inputs.topk_logp_teacher[mask]
    assert (top[:, :-1] >= top[:, 1:]).all()  # the teacher's own most likely ids, sorted
    assert 0 < metrics["opd/topk_mass"] <= 1 and metrics["opd/reverse_kl"] >= 0
    seen.clear()
    ctx = variant(base_ctx, "grpo_opsd", "writer.kind=oracle", "algo.opsd_top_k=0")
    metrics, _ = rl.update(ctx, rl.collect_batch(ctx, 1, rl.PhaseTimer()), 1, rl.PhaseTimer())
    assert seen[0].topk_logp is None and "opd/topk_mass" not in metrics
    with pytest.raises(ConfigError, match="algo.opsd_top_k: distribution matching"):
        resolve(load_config(MICRO, ["algo.method=grpo_opsd", "algo.teacher=old"]))


def test_the_rl_step_scores_the_policy_at_its_rollout_temperature(base_ctx, restore, monkeypatch):
    """Old, reference, teacher and current log-probs all score softmax(logits / T) for the
    rollout temperature T (as verl does), so the ratio is 1 on the first minibatch and the
    update optimises the policy that sampled the batch."""
    from trainer.episodes.scoring import score_trajectories

    ctx = variant(base_ctx, "seed", "writer.kind=oracle", "rollout.temperature=0.6",
                  "algo.kl_coef=0.01")
    batch = rl.collect_batch(ctx, 1, rl.PhaseTimer())
    mask = batch.old.mask.bool()
    at_t = lambda **kw: score_trajectories(ctx.model, ctx.builder, batch.trajectories,
                                           batch.rollout_skills, **kw)[0].logp
    torch.testing.assert_close(batch.old.logp[mask], at_t(temperature=0.6)[mask])
    assert not torch.allclose(batch.old.logp[mask], at_t()[mask])
    torch.testing.assert_close(batch.logp_ref[mask], batch.old.logp[mask])  # same weights at step 1
    seen = capture_losses(monkeypatch)
    rl.update(ctx, batch, 1, rl.PhaseTimer())
    first = seen[0]
    m = first.mask.bool()
    torch.testing.assert_close(first.logp[m].detach(), first.logp_old[m])  # ratio 1 before any step


def test_lora_scores_its_reference_as_the_base_with_adapters_disabled(base_ctx, tmp_path):
    """With model.lora the KL reference is no copy: after an update moved the adapters, the
    step's reference log-probs are those of the RL initialisation (the policy before LoRA)."""
    from trainer.models.lora import has_adapters, with_lora

    plain = copy.deepcopy(base_ctx.model)
    ctx = copy.copy(base_ctx)
    ctx.model = with_lora(copy.deepcopy(base_ctx.model), dataclasses.replace(base_ctx.cfg.model.lora, rank=4))
    ctx.backend = copy.copy(base_ctx.backend)
    ctx.backend.sync_weights(ctx.model)
    ctx = variant(ctx, "grpo", "model.lora.rank=4", f"output.dir={tmp_path}")
    assert ctx.reference is None and has_adapters(ctx.model)
    timer = rl.PhaseTimer()
    rl.update(ctx, rl.collect_batch(ctx, 1, timer), 1, timer)
    with torch.no_grad():  # and training moved the adapters further (B = 0 at the start of RL)
        for name, p in ctx.model.named_parameters():
            if ".lora_B." in name:
                p.add_(0.05)
    batch = rl.collect_batch(ctx, 2, timer)
    base = rl._score(ctx, plain, batch.trajectories, batch.rollout_skills)[0].logp
    policy = rl._score(ctx, ctx.model, batch.trajectories, batch.rollout_skills)[0].logp
    assert batch.logp_ref is not None and torch.equal(batch.logp_ref, base)
    assert not torch.equal(policy, base)  # the update moved the policy, not its reference
    assert all(p.requires_grad for n, p in ctx.model.named_parameters() if ".lora_" in n)


@pytest.mark.parametrize("tokens", [0, 1_000_000])
def test_a_step_logs_its_padding_and_micro_batches(base_ctx, restore, tokens):
    """``perf/micro_batches`` counts the step's forwards (scoring, reference, update) and
    ``perf/pad_share`` their padded share: none with one sequence a micro-batch; with a budget
    every sequence fits in, one micro-batch a pass, each padded to the step's longest."""
    ctx = variant(base_ctx, "grpo", "algo.micro_batch_size=1", f"algo.micro_batch_tokens={tokens}",
                  "algo.kl_coef=0.01", "algo.ppo_epochs=2", "algo.minibatch_size=0")
    assert ctx.reference is not None
    timer = rl.PhaseTimer()
    batch = rl.collect_batch(ctx, 1, timer)
    rl.update(ctx, batch, 1, timer)
    metrics = step_metrics.step_metrics(ctx, batch, timer)
    lengths = [len(s) for s in ctx.builder.build_batch(batch.trajectories, batch.rollout_skills)]
    assert len(set(lengths)) > 1  # full contexts of different lengths: one micro-batch pads
    passes = 2 + ctx.cfg.algo.ppo_epochs  # score, reference, one update a PPO epoch
    if tokens:
        assert metrics["perf/micro_batches"] == passes
        assert metrics["perf/pad_share"] == pytest.approx(1 - sum(lengths) / (len(lengths) * max(lengths)))
    else:
        assert (metrics["perf/micro_batches"], metrics["perf/pad_share"]) == (passes * len(lengths), 0.0)


def test_a_family_draw_takes_each_step_evenly_from_the_families():
    """``rollout.task_draw: family``: every step's tasks split evenly over the families (the
    remainder to families drawn at random), no task twice; ``uniform`` is ``rng.sample``, so
    recorded studies draw what they drew."""
    tasks = [f"{name}{i}" for name in "ab" for i in range(50)] + [f"c{i}" for i in range(5)]
    family = lambda task: task[0]
    for step in range(20):
        drawn = rl.draw_tasks(random.Random(step), tasks, 7, family_groups(tasks, family))
        counts = {name: sum(t[0] == name for t in drawn) for name in "abc"}
        assert len(set(drawn)) == 7 and sorted(counts.values()) == [2, 2, 3]
        assert max(counts.values()) - min(counts.values()) == 1
    assert rl.draw_tasks(random.Random(3), tasks, 4) == random.Random(3).sample(tasks, 4)
    unbalanced = [rl.draw_tasks(random.Random(s), tasks[:100], 2) for s in range(40)]
    assert any(t[0][0] == t[1][0] for t in unbalanced)  # a uniform draw often takes one family only
    assert all(t[0][0] != t[1][0] for t in (rl.draw_tasks(random.Random(s), tasks[:100], 2,
                                                          family_groups(tasks[:100], family))
                                           for s in range(40)))


def test_a_family_draw_needs_families(tmp_path):
    cfg = resolve(load_config(MICRO, ["rollout.task_draw=family", f"output.dir={tmp_path}"]))
    with pytest.raises(ConfigError, match="rollout.task_draw: 'family' draws evenly over task families, "
                                          "but env household"):
        build_components(cfg)
