"""``diagnose`` and ``recovery``: the measurement protocols of :mod:`trainer.protocols` on
frozen actors, their frames summarised by :mod:`analysis` and drawn by :mod:`reports`."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from tqdm.auto import tqdm

from analysis.alignment import delta_profile, gate_over_beta, regional_alignment
from analysis.diagnostics import Skipped
from analysis.recovery import summarize_recovery
from analysis.stats import bootstrap_ci
from reports.diagnostic_tables import alignment_cell, recovery_table
from reports.figures import regional_alignment as draw
from reports.tables import Provenance, to_markdown, write_table
from trainer.config import ConfigError
from trainer.models.folders import require_model_folder
from trainer.protocols.alignment import SCORING_METHOD, alignment_records
from trainer.protocols.continuations import continuations, suite_for
from trainer.protocols.skill_signal import MOVED, PARTS, TRANSFERS, skill_signal
from trainer.run.components import build_components, env_factory, start_rl
from trainer.run.resolve import load_config, resolve
from trainer.run.store import git_sha
from trainer.run.tracking import cell_id


def diagnose_command(args) -> int:
    """Diagnostics on a frozen actor: ``alignment`` is ETRO's Fig. 1 (regional alignment),
    ``skill`` the skill signal (:mod:`trainer.protocols.skill_signal`)."""

    folder = require_model_folder(args.actor, "--actor")
    overrides = [*args.overrides, f"algo.method={SCORING_METHOD}", "algo.kl_coef=0",
                 "stages.warm_start.enabled=false", "stages.skill_sft.enabled=false"]
    if args.writer:
        overrides.append(f"writer.kind={args.writer}")
    cfg = resolve(load_config(args.config, overrides))
    if args.what == "skill" and args.transfer:
        _require_families(cfg, args.panel_tasks)
    ctx = build_components(cfg, init_from=str(folder))
    start_rl(ctx)
    if args.what == "skill":
        return _skill_command(ctx, args)
    print(f"actor {args.actor}: {args.steps} batches of {cfg.rollout.tasks_per_step} tasks x "
          f"{cfg.rollout.group_size}, writer {cfg.writer.kind}, {args.advantage} step "
          "advantages, never updated")
    out = Path(args.diagnose_dir)
    batches = _batches_of(out, cfg, folder)
    with tqdm(total=args.steps, desc="alignment", unit="batch") as bar:
        records = alignment_records(ctx, args.steps, bar, saved=batches)
    records.to_parquet(out / "records.parquet", index=False)
    alignment = regional_alignment(records, seed=cfg.seed, advantage=args.advantage)
    if isinstance(alignment, Skipped):
        print(f"regional alignment skipped: {alignment.reason}")
        return 1
    alignment.to_csv(out / "alignment.csv", index=False)
    draw(alignment, out / "regional_alignment")
    for r in alignment.itertuples():
        value, note = alignment_cell(r)
        print(f"{r.region:>6} {r.polarity:<9} rho {value}  n = {r.n_turns} turns of {r.n_traj} "
              f"trajectories, {r.n_tasks} tasks" + (f"  ({note})" if note else ""))
    _where_the_skill_lands(records, out, cfg.algo.beta_opd)
    print(f"written: {out / 'alignment.csv'}, {out / 'regional_alignment.png'}, "
          f"{out / 'records.parquet'}, {out / 'delta_profile.csv'}, {out / 'gate_over_beta.csv'}")
    return 0


def _batches_of(out: Path, cfg, actor: Path) -> Path:
    """``out/batches``, where the alignment keeps each finished batch, stamped with the run
    that played them (the config's cell and seed, the actor): a rerun of that run continues
    from them; another run's batches are refused, never mixed in."""
    batches = out / "batches"
    run = {"actor": str(actor.resolve()), "cell": cell_id(cfg), "seed": cfg.seed}
    stamp = batches / "run.json"
    if not stamp.exists():
        batches.mkdir(parents=True, exist_ok=True)
        stamp.write_text(json.dumps(run, indent=1) + "\n")
    elif json.loads(stamp.read_text()) != run:
        raise ConfigError(f"{batches} holds the batches of another run (another config or actor); "
                          f"give --diagnose-dir a new folder or delete {batches}")
    elif saved := len(list(batches.glob("batch_*.parquet"))):
        print(f"continuing from {saved} batches saved in {batches}")
    return batches


def _where_the_skill_lands(records: pd.DataFrame, out: Path, beta: float) -> None:
    """The per-turn |Delta| profile (where each skill moves the played tokens) and SEED's gate
    over beta_opd from the recorded Delta+, written and summarised (no retraining)."""
    profile = delta_profile(records)
    if not isinstance(profile, Skipped):
        profile.to_csv(out / "delta_profile.csv", index=False)
        for axis, part in profile.groupby("axis", sort=False):
            cells = part.pivot_table(index="position", columns="polarity", values="mean_abs")
            print(f"mean |Δ| by {axis}: " + "; ".join(
                f"{int(pos)}: " + " / ".join(f"{cells.at[pos, p]:.3f}" if p in cells else "--"
                                             for p in ("delta_pos", "delta_neg"))
                for pos in cells.index) + "  (Δ+ / Δ−, nats a token, turn means)")
    gates = gate_over_beta(records, by=("region",), beta_run=beta)
    if not isinstance(gates, Skipped):
        gates.to_csv(out / "gate_over_beta.csv", index=False)
        for region, part in gates.groupby("region", sort=False):
            print(f"gate by beta_opd, {region} (n = {part['n_turns'].iloc[0]}): " +
                  ", ".join(f"{b:g}: {g:.2f}" for b, g in zip(part["beta"], part["gate"])))


def _skill_command(ctx, args) -> int:
    cfg = ctx.cfg
    print(f"actor {args.actor}: {args.panel_tasks} training tasks x {args.samples} at T = "
          f"{cfg.rollout.temperature:g}, writer {cfg.writer.kind}, beta_opd {cfg.algo.beta_opd:g}, "
          "never updated" + (", with skills of other tasks (--transfer)" if args.transfer else ""))
    signal = skill_signal(ctx, args.panel_tasks, args.samples, progress=True, transfer=args.transfer)
    out = Path(args.diagnose_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "skill_signal.json").write_text(json.dumps(
        {**signal, "actor": str(args.actor), "writer": cfg.writer.kind, "git_sha": git_sha()},
        indent=1) + "\n")
    print(f"writer valid on {signal['skilled']:.0f} of {signal['trajectories']:.0f} trajectories")
    if not signal["skilled"]:
        print("no valid skill: nothing to score")
        return 1
    print(f"Delta on {signal['tokens']:.0f} action tokens: mean |Delta| {signal['delta_abs']:.3f}, "
          f"mean {signal['delta_mean']:+.3f} nats; gate {signal['gate_mean']:.3f} +/- "
          f"{signal['gate_std']:.3f} (std); |Delta| >= {MOVED:g} nat on {signal['moved_share']:.1%} of them "
          f"(mean |Delta| {signal['moved_delta_abs']:.2f} there)")
    print(f"moved (|Delta| >= {MOVED:g}) by part of the response: " + ", ".join(
        f"{part} {signal[f'moved_{part}']:.0f} of {signal[f'tokens_{part}']:.0f}" for part in PARTS))
    if signal["most_moved"]:
        print("most moved: " + "; ".join(f"{m['token']!r} after {m['before'][-24:]!r} {m['delta']:+.2f} ({m['part']})"
                                         for m in signal["most_moved"]))
    pairs = signal["paired_differences"]
    signal["lift_ci_low"], signal["lift_ci_high"] = bootstrap_ci(pairs, seed=cfg.seed)
    print(f"success with the skill in context {signal['success_skill']:.3f}, without "
          f"{signal['success_no_skill']:.3f} (the same {signal['skilled']:.0f} tasks and seeds): "
          f"lift {sum(pairs) / len(pairs):+.3f}, 95% paired bootstrap interval "
          f"[{signal['lift_ci_low']:+.3f}, {signal['lift_ci_high']:+.3f}] over {len(pairs)} pairs")
    if args.transfer:
        _transfer_lines(signal, cfg.seed)
    (out / "skill_signal.json").write_text(json.dumps(
        {**signal, "actor": str(args.actor), "writer": cfg.writer.kind, "git_sha": git_sha()},
        indent=1) + "\n")
    print(f"written: {out / 'skill_signal.json'}")
    return 0


def _require_families(cfg, tasks: int) -> None:
    """--transfer takes skills from other tasks of a family: the env must define families."""
    env = env_factory(cfg)()
    if not any(env.family(t) is not None for t in env.panel(cfg.env.train_split)[:tasks]):
        raise ConfigError(f"--transfer: env {cfg.env.name} (level {cfg.env.level or 'default'}) defines no "
                          "task families to take another task's skill from; envs with them: ezpoints with "
                          "env.level: sum, product or suit (suit for the shuffled control)")


_TRANSFER_WORDS = {"transfer": "a skill written on another task of its family",
                   "shuffled": "a skill of another family (shuffled control)"}


def _transfer_lines(signal: dict, seed: int) -> None:
    """Print (and add to ``signal``) the lift of each transfer replay with its interval."""
    for name in TRANSFERS:
        pairs = signal[f"paired_differences_{name}"]
        if not pairs:
            print(f"with {_TRANSFER_WORDS[name]}: no task has one on this panel")
            continue
        low, high = bootstrap_ci(pairs, seed=seed)
        signal[f"lift_{name}"] = sum(pairs) / len(pairs)
        signal[f"lift_{name}_ci_low"], signal[f"lift_{name}_ci_high"] = low, high
        print(f"with {_TRANSFER_WORDS[name]} {signal[f'success_{name}']:.3f}, without "
              f"{signal[f'success_no_skill_{name}']:.3f}: lift {signal[f'lift_{name}']:+.3f}, 95% paired "
              f"bootstrap interval [{low:+.3f}, {high:+.3f}] over {len(pairs)} pairs")


def recovery_command(args) -> int:
    """Run ETRO's recovery protocol on checkpoints; write the Table 6 layout."""
    labels = args.label or [Path(c).name for c in args.actor]
    if len(labels) != len(args.actor):
        raise ConfigError(f"--label: {len(labels)} labels for {len(args.actor)} actors")
    folders = [require_model_folder(checkpoint, "--actor") for checkpoint in args.actor]
    cfg = resolve(load_config(args.config, args.overrides))
    out = Path(args.recovery_dir)
    frames, suite = [], None
    for label, checkpoint, folder in zip(labels, args.actor, folders):
        ctx = build_components(cfg, init_from=str(folder))
        suite = suite if suite is not None else suite_for(ctx, args.split, args.tasks)
        if not suite:
            raise ConfigError(f"--split {args.split}: no task has a recoverable perturbation "
                              "(the env needs admissible actions and a distance to the goal)")
        print(f"{label}: {len(suite)} perturbed tasks x {args.repeats} continuations")
        frames.append(continuations(ctx, suite, args.repeats, seed=cfg.seed).assign(
            label=label, checkpoint=str(checkpoint)))
    frame = pd.concat(frames, ignore_index=True)
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "recovery.csv", index=False)
    table = recovery_table(summarize_recovery(frame), split=args.split)
    stamp = pd.Timestamp.now(tz="UTC").isoformat(timespec="seconds")
    write_table(table, out / "recovery", Provenance(str(args.config), git_sha(), stamp))
    print(to_markdown(table))
    print(f"written: {out / 'recovery.csv'}, {out / 'recovery.md'} (.tex, .json)")
    return 0
