"""Environment throughput benchmark (issue 3): expert steps per second for each built-in env.

Runs the scripted expert (``expert_policy(epsilon)``, default 0.2) through
:func:`envs.base.run_episode` in a single process, cycling over the ``train`` panel, for
about ``--seconds`` of CPU time per environment, and prints steps per CPU second and per
wall-clock second, episodes/s and the expert's success.  The targets (household >= 5,000
steps/s, sokoban and ezpoints >= 2,000 in text mode) are judged on CPU time, which is what
one dedicated core delivers; on a shared, oversubscribed machine the wall-clock figure is
lower by the contention.  Envs whose module does not import yet are reported and skipped.
An env name may carry a level: ``sokoban@2box``.

``--panels`` adds, per env and split, the success of the noiseless expert and of two random
policies on the whole panel (``--max-tasks`` caps it): ``random`` draws uniformly from the
env's action vocabulary (``env.actions``: sokoban's four moves, ezpoints' 13 tokens; envs
without one are left blank) and ``random-adm`` uniformly from the admissible actions of the
current state.

    python scripts/bench_envs.py [--seconds 3] [--epsilon 0.2] [--envs household shop]
    python scripts/bench_envs.py --envs sokoban sokoban@2box ezpoints --panels
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import envs
from envs.base import expert_policy, format_response, run_episode

TARGETS = {"household": 5000.0, "shop": 1000.0, "sokoban": 2000.0, "ezpoints": 2000.0}
SEARCH_TARGET = 500.0  # searchqa searches/s over a 20,000-passage corpus


def make(spec: str):
    """The env of ``name`` or ``name@level``."""
    name, _, level = spec.partition("@")
    return envs.make(name, **envs.env_options(name, level))


def bench(name: str, seconds: float, epsilon: float) -> dict:
    """Play expert episodes of env ``name`` for ``seconds``; return the measured figures."""
    env = make(name)
    tasks = env.panel("train")
    act = expert_policy(epsilon=epsilon, seed=f"bench/{name}")
    steps = episodes = successes = 0
    wall, cpu = time.perf_counter(), time.process_time()
    while time.process_time() - cpu < seconds:
        episode = run_episode(env, tasks[episodes % len(tasks)], act)
        steps += len(episode.turns)
        successes += episode.success
        episodes += 1
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"env": name, "steps": steps, "episodes": episodes, "cpu_s": cpu, "wall_s": wall,
            "steps_per_s": steps / cpu, "wall_steps_per_s": steps / wall,
            "episodes_per_s": episodes / cpu, "success": successes / max(episodes, 1)}


def panel_success(name: str, max_tasks: int = 0) -> list[dict]:
    """Per split: success of the noiseless expert, of uniform random actions from the env's
    vocabulary (None without one) and of uniform random admissible actions."""
    env = make(name)
    vocabulary = getattr(env, "actions", None)
    rows = []
    for split in env.splits:
        tasks = env.panel(split)[: max_tasks or None]
        seed = f"bench/random/{name}/{split}"
        rows.append({"env": name, "split": split, "tasks": len(tasks),
                     "expert": _rate(env, tasks, expert_policy(0.0)),
                     "random": _rate(env, tasks, _random_policy(seed, vocabulary)) if vocabulary else None,
                     "random_adm": _rate(env, tasks, _random_policy(seed))})
    return rows


def _rate(env, tasks, act) -> float:
    return sum(run_episode(env, t, act).success for t in tasks) / len(tasks)


def _random_policy(seed: str, vocabulary=None):
    """Uniform over ``vocabulary``, or over the admissible actions when it is None."""
    rng = random.Random(seed)

    def act(env, observation, turns):
        return format_response(rng.choice(vocabulary or env.admissible_actions() or ["look"]))

    return act


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="CPU seconds per env")
    parser.add_argument("--epsilon", type=float, default=0.2, help="expert error rate")
    parser.add_argument("--envs", nargs="*", default=list(envs.BUILTIN),
                        help="env names, optionally with a level: sokoban@2box")
    parser.add_argument("--panels", action="store_true",
                        help="also expert and random success on every panel")
    parser.add_argument("--max-tasks", type=int, default=0, help="panel cap for --panels (0: all)")
    args = parser.parse_args(argv)
    print(f"{'env':<10} {'steps/s':>10} {'wall st/s':>10} {'episodes/s':>11} {'success':>8} "
          f"{'steps':>8}  target (CPU steps/s)")
    missed = 0
    for name in args.envs:
        try:
            envs.env_class(name.partition("@")[0])
        except ImportError as err:
            print(f"{name:<10} skipped: {err}")
            continue
        r = bench(name, args.seconds, args.epsilon)
        target = TARGETS.get(name.partition("@")[0])
        verdict = "" if target is None else (
            f">= {target:,.0f} ok" if r["steps_per_s"] >= target else f"< {target:,.0f} MISSED")
        missed += bool(target and r["steps_per_s"] < target)
        print(f"{name:<10} {r['steps_per_s']:>10,.0f} {r['wall_steps_per_s']:>10,.0f} "
              f"{r['episodes_per_s']:>11,.1f} {r['success']:>8.1%} {r['steps']:>8,}  {verdict}")
    if "searchqa" in args.envs:
        from envs.searchqa.env import search_throughput

        s = search_throughput(n_passages=20000)
        ok = s["searches_per_s"] >= SEARCH_TARGET
        missed += not ok
        print(f"searchqa retrieval: {s['searches_per_s']:,.0f} searches/s over {int(s['passages']):,} passages "
              f"(index built in {s['index_build_s']:.1f}s)  {'>=' if ok else '<'} {SEARCH_TARGET:,.0f} "
              f"{'ok' if ok else 'MISSED'}")
    if args.panels:
        print(f"\n{'env':<13} {'split':<12} {'tasks':>6} {'expert':>8} {'random':>8} {'random-adm':>11}")
        for name in args.envs:
            for r in panel_success(name, args.max_tasks):
                uniform = "-" if r["random"] is None else f"{r['random']:.1%}"
                print(f"{r['env']:<13} {r['split']:<12} {r['tasks']:>6} {r['expert']:>8.1%} "
                      f"{uniform:>8} {r['random_adm']:>11.1%}")
                missed += r["expert"] < 1.0
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
