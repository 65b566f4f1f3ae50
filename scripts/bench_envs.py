"""Environment throughput benchmark (issue 3): expert steps per second for each built-in env.

Runs the scripted expert (``expert_policy(epsilon)``, default 0.2) through
:func:`envs.base.run_episode` in a single process, cycling over the ``train`` panel, for
about ``--seconds`` of CPU time per environment, and prints steps per CPU second and per
wall-clock second, episodes/s and the expert's success.  The target (household >= 5,000
steps/s) is judged on CPU time, which is what one dedicated core delivers; on a shared,
oversubscribed machine the wall-clock figure is lower by the contention.  Envs whose module
does not import yet are reported and skipped.

    python scripts/bench_envs.py [--seconds 3] [--epsilon 0.2] [--envs household shop]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import envs
from envs.base import expert_policy, run_episode

TARGETS = {"household": 5000.0, "shop": 1000.0}
SEARCH_TARGET = 500.0  # searchqa searches/s over a 20,000-passage corpus


def bench(name: str, seconds: float, epsilon: float) -> dict:
    """Play expert episodes of env ``name`` for ``seconds``; return the measured figures."""
    env = envs.make(name)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="CPU seconds per env")
    parser.add_argument("--epsilon", type=float, default=0.2, help="expert error rate")
    parser.add_argument("--envs", nargs="*", default=list(envs.BUILTIN), help="env names")
    args = parser.parse_args(argv)
    print(f"{'env':<10} {'steps/s':>10} {'wall st/s':>10} {'episodes/s':>11} {'success':>8} "
          f"{'steps':>8}  target (CPU steps/s)")
    missed = 0
    for name in args.envs:
        try:
            envs.env_class(name)
        except ImportError as err:
            print(f"{name:<10} skipped: {err}")
            continue
        r = bench(name, args.seconds, args.epsilon)
        target = TARGETS.get(name)
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
        print(f"searchqa retrieval: {s['searches_per_s']:,.0f} searches/s over {int(s["passages"]):,} passages "
              f"(index built in {s['index_build_s']:.1f}s)  {'>=' if ok else '<'} {SEARCH_TARGET:,.0f} "
              f"{'ok' if ok else 'MISSED'}")
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
