"""Task families in the writers (issue 44): the shuffled-skills control (opd_only_shuffled) gives
every trajectory's teacher a hindsight the oracle wrote on a trajectory of the other family,
never its own family's; a static library (Skill-Prompt, Skill-GRPO, the static ablations)
retrieves within the task's own family."""

from __future__ import annotations

from envs.base import demo_policy, run_episode
from envs.ezpoints import EZPointsEnv
from envs.ezpoints.rules import OPERATOR, lesson_operator
from envs.household.env import HouseholdEnv
from trainer.algos import get_method
from trainer.episodes.samples import Trajectory
from trainer.hindsight.shuffled import ShuffledSkills
from trainer.hindsight.writers import OracleWriter, StaticWriter, build_library, library_from


def trajectories(env, tasks) -> list[Trajectory]:
    """The demonstrator's episodes of ``tasks`` (no token ids: the writers read episodes)."""
    episodes = [run_episode(env, t, demo_policy(0.0, seed=t.id)) for t in tasks]
    return [Trajectory(e, tuple(() for _ in e.turns)) for e in episodes]


def suit_env() -> EZPointsEnv:
    return EZPointsEnv(hidden_cards=1, level="suit")


def test_opd_only_is_seeds_gated_opd_without_rl_and_its_control_shuffles():
    plain, shuffled = get_method("opd_only"), get_method("opd_only_shuffled")
    for spec in (plain, shuffled):
        assert (spec.advantage, spec.uses_rl, spec.opd_loss, spec.skills) == ("none", False, "seed", ("positive",))
        assert (spec.writer, spec.teacher, spec.lambda_opd, spec.skill_sft) == ("oracle", "current", 1.0, False)
    assert (plain.shuffled_skills, shuffled.shuffled_skills) == (False, True)
    signed, signed_shuffled = get_method("opd_only_signed"), get_method("opd_only_signed_shuffled")
    for spec, control in ((signed, False), (signed_shuffled, True)):  # the same test, OPSD's loss
        assert (spec.advantage, spec.uses_rl, spec.opd_loss, spec.skills) == ("none", False, "opsd", ("positive",))
        assert (spec.writer, spec.lambda_opd, spec.shuffled_skills) == ("oracle", 1.0, control)


def test_each_trajectory_gets_another_familys_lesson():
    env = suit_env()
    tasks = env.panel("train")[:12]
    assert {env.family(t) for t in tasks} == {"sum", "product"}
    trajs = trajectories(env, tasks)
    writer = ShuffledSkills(OracleWriter(suit_env), env)
    own = OracleWriter(suit_env).write(trajs)
    out = writer.write(trajs, seed=3)
    for task, mine, given in zip(tasks, own, out, strict=True):
        assert lesson_operator(mine.positive_skill) == OPERATOR[env.family(task)]
        assert given.valid and given.error_turn is None and given.negative_skill == ""
        assert lesson_operator(given.positive_skill) != OPERATOR[env.family(task)]
    assert writer.kind == "oracle"


def test_a_batch_of_one_family_draws_donors_from_earlier_batches_or_none():
    env = suit_env()
    tasks = env.panel("train")[:40]
    red = [t for t in tasks if env.family(t) == "sum"][:3]
    black = [t for t in tasks if env.family(t) == "product"][:3]
    writer = ShuffledSkills(OracleWriter(suit_env), env)
    assert not any(h.valid for h in writer.write(trajectories(env, red), seed=0))  # no donor yet
    given = writer.write(trajectories(env, black), seed=1)  # the bank holds the red batch
    assert all(h.valid and lesson_operator(h.positive_skill) == "+" for h in given)


def test_without_families_each_task_is_its_own_family():
    env = HouseholdEnv(level="small")
    tasks = env.panel("train")[:3]
    trajs = trajectories(env, tasks)
    own = OracleWriter(lambda: HouseholdEnv(level="small")).write(trajs)
    out = ShuffledSkills(OracleWriter(lambda: HouseholdEnv(level="small")), env).write(trajs, seed=0)
    for i, given in enumerate(out):
        assert given.valid and given.positive_skill != own[i].positive_skill
        assert given.positive_skill in {h.positive_skill for j, h in enumerate(own) if j != i}


def test_a_static_library_retrieves_within_the_tasks_family():
    """Every EZPoints deal has the same instruction, so word overlap alone hands a suit deal
    whichever entry comes first; with families it gets its own family's lesson."""
    env = suit_env()
    tasks = env.panel("train")[-8:]
    entries = build_library(suit_env, tasks)
    assert {e["family"] for e in entries} == {"sum", "product"}
    library = StaticWriter(entries, family=env.family)
    for task in env.panel("eval")[:20]:
        assert lesson_operator(library.retrieve(task)) == OPERATOR[env.family(task)]
    blind = StaticWriter(entries)  # no family: the first best overlap, one lesson for every deal
    assert len({lesson_operator(blind.retrieve(t)) for t in env.panel("eval")[:20]}) == 1
    trajs = trajectories(env, tasks[:2])
    written = library_from(trajs, OracleWriter(suit_env).write(trajs), env.family)
    assert [e["family"] for e in written] == [env.family(t) for t in tasks[:2]]
    assert "family" not in build_library(EZPointsEnv, EZPointsEnv().panel("train")[:1])[0]
