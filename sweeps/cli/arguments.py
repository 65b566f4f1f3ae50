"""Each subcommand's arguments.  They are declared here, apart from the modules that run the
commands, so that building the parser (``--help``) imports neither the trainer (torch), Ray,
MLflow nor pandas.  One meaning per flag name: ``--out`` is always the study's output folder;
the report's own folder is ``--report-dir``."""

from __future__ import annotations

import argparse


def add_overrides(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE",
                        help="override a config field by dotted key; the value is YAML "
                             "(e.g. --set algo.beta_opd=3 --set eval.splits=[eval_seen]); "
                             "repeatable")


def validate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="a run config or a study YAML file")
    add_overrides(parser)
    parser.add_argument("--skip-extras", action="store_true",
                        help="check the file only, not whether this machine has the optional "
                             "packages it needs (e.g. a GPU study checked on a laptop)")


def memory(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="a run config or a study YAML file (a study's --set keys are under "
                                     "base., e.g. --set base.algo.micro_batch_size=4)")
    add_overrides(parser)
    parser.add_argument("--gpu-memory", type=float, default=None, metavar="GiB",
                        help="memory of one GPU in GiB (default: this machine's GPU, else 80); a CPU run's "
                             "device is this machine's memory")


IGNORE_MEMORY_HELP = ("start even when `hindsight memory` plans more than the device holds (default: refuse, "
                      "naming the phase and the setting to change)")


def methods(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--plugins", action="append", default=[], metavar="FILE",
                        help="import a plugin first (a .py file or folder, or a module name) and "
                             "list what it registers; repeatable (docs/extending.md)")


ADDRESS_HELP = ("Ray cluster address (default: the study's ray_address, else a local Ray; for "
                "`train`, where the ranks of parallel.workers > 1 run)")


def train(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="run config YAML")
    add_overrides(parser)
    parser.add_argument("--resume", action="store_true",
                        help="continue from the latest checkpoint in output.dir")
    parser.add_argument("--run-id", default=None, help="continue this MLflow run id")
    parser.add_argument("--address", default=None, help=ADDRESS_HELP)  # used with parallel.workers > 1
    parser.add_argument("--ignore-memory", action="store_true", help=IGNORE_MEMORY_HELP)


def evaluate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="run config YAML")
    add_overrides(parser)
    parser.add_argument("--checkpoint", default=None,
                        help="checkpoint folder to evaluate (default: the config's model)")


ACTOR_HELP = ("a trained actor, frozen (a run's checkpoints/step_N or a saved model folder); "
              "recovery takes several, one table row each")


def recovery(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="run config YAML (env, model settings, eval temperature)")
    add_overrides(parser)
    parser.add_argument("--actor", action="append", required=True, metavar="DIR",
                        help=ACTOR_HELP)
    parser.add_argument("--label", action="append", default=None, metavar="NAME",
                        help="row label of each --actor, in order (default: folder names)")
    parser.add_argument("--split", default="eval_unseen",
                        help="held-out panel the perturbed tasks come from (default eval_unseen)")
    parser.add_argument("--tasks", type=int, default=20,
                        help="perturbed tasks (default 20; 0 = every task that has one)")
    parser.add_argument("--repeats", type=int, default=8,
                        help="continuations per task and actor (default 8)")
    parser.add_argument("--recovery-dir", default="recovery", metavar="DIR",
                        help="folder for recovery.csv and the table (default ./recovery)")


def diagnose(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("what", choices=["alignment", "skill"],
                        help="alignment: ETRO's Fig. 1, regional alignment on a frozen actor; "
                             "skill: how much the writer's skill in context moves the actor "
                             "(Delta, SEED's gate, Skill-Prompt against no-skill success)")
    parser.add_argument("config", help="run config YAML (env, model settings, batch)")
    add_overrides(parser)
    parser.add_argument("--actor", required=True, metavar="DIR", help=ACTOR_HELP)
    parser.add_argument("--writer", default=None, choices=["self", "frozen", "oracle", "external"],
                        help="who writes the hindsight (default: the ETRO family's own)")
    parser.add_argument("--steps", type=int, default=8,
                        help="alignment: batches of the config's rollout size to collect "
                             "(default 8)")
    parser.add_argument("--panel-tasks", type=int, default=50, metavar="N",
                        help="skill: the first N training tasks make the panel (default 50)")
    parser.add_argument("--samples", type=int, default=4,
                        help="skill: episodes per panel task (default 4)")
    parser.add_argument("--transfer", action="store_true",
                        help="skill: also replay each task with a skill written on ANOTHER task of its "
                             "family (the lift of a lesson that transfers) and with one of another family "
                             "(the shuffled control); needs an env with task families (ezpoints with "
                             "env.level: suit)")
    parser.add_argument("--advantage", default="etro", choices=["etro", "gigpo", "gigpo_std"],
                        help="step advantage: ETRO's pooled action returns (default) or "
                             "verl-agent's GiGPO (own return, optionally std-normalised)")
    parser.add_argument("--diagnose-dir", default="diagnose", metavar="DIR",
                        help="folder for the records, alignment.csv and the figure "
                             "(default ./diagnose)")


def study(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("study", help="study YAML file")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="the study's output folder (default: the study's out, else "
                             "./runs/<name>)")


def sweep(parser: argparse.ArgumentParser) -> None:
    study(parser)
    parser.add_argument("--address", default=None, help=ADDRESS_HELP)
    parser.add_argument("--max-concurrent", type=int, default=None, metavar="N",
                        help="trials at once (default: the study's max_concurrent; 0 = as "
                             "resources allow)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the trials that would launch and those skipped; run nothing")
    parser.add_argument("--retry-failed", action="store_true",
                        help="rerun (cell, seed) pairs whose run FAILED, continuing the same run")
    parser.add_argument("--ignore-memory", action="store_true", help=IGNORE_MEMORY_HELP)


def ui(parser: argparse.ArgumentParser) -> None:
    study(parser)
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1, this machine only; "
                             "0.0.0.0 serves every network the machine is on)")
    parser.add_argument("--port", type=int, default=5000,
                        help="port (default 5000)")
    parser.add_argument("--backend-store-uri", default="", metavar="URL",
                        help="serve this database (e.g. postgresql://user@host/db) as a "
                             "tracking server that studies log to by its http address "
                             "(default: the study's store)")
    parser.add_argument("--artifacts-destination", default="", metavar="DIR",
                        help="where a tracking server keeps the artifacts it serves "
                             "(default: <study output>/artifacts)")
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="server worker processes (default 1; MLflow's own default is 4)")


def report(parser: argparse.ArgumentParser) -> None:
    study(parser)
    parser.add_argument("--report-dir", default=None, metavar="DIR",
                        help="report folder (default: <study output>/report)")
    parser.add_argument("--external", default=None, metavar="CSV",
                        help="externally reported results to merge (method, backbone, "
                             "metrics, source)")
    parser.add_argument("--n-boot", type=int, default=2000, metavar="N",
                        help="bootstrap resamples for CIs (default 2000)")
    parser.add_argument("--cells", choices=("std", "ci"), default="std",
                        help="table cells: mean ± std (default) or mean [95%% CI]")
    parser.add_argument("--ci", choices=("t", "bootstrap"), default="t",
                        help="interval over seeds: Student t (default) or percentile bootstrap")
    parser.add_argument("--ui-url", default="http://127.0.0.1:5000",
                        help="MLflow UI address that run ids in index.md link to "
                             "(`hindsight ui` serves it; '' for no links)")


def power(parser: argparse.ArgumentParser) -> None:
    study(parser)
    parser.add_argument("--pilot", default=None, metavar="STUDY_OR_STORE",
                        help="where the pilot's runs are: another study file, or a tracking URI "
                             "holding runs of this study's name (default: this study's own "
                             "store); a study cell missing there is matched by its method")
    parser.add_argument("--effect", type=float, default=None, metavar="POINTS",
                        help="the difference to detect, in points (the metric x 100); default: "
                             "the study's seeds.effect, else only the SDs and the minimum "
                             "detectable effects are printed")
    parser.add_argument("--baseline", default=None, metavar="METHOD",
                        help="the method every other cell is compared with (default: the "
                             "study's seeds.baseline, else grpo)")
    parser.add_argument("--metric", default=None,
                        help="the logged metric (default: the study's seeds.metric, else the "
                             "held-out panel's success)")
    parser.add_argument("--alpha", type=float, default=0.05,
                        help="family-wise level, Holm over the comparisons (default 0.05)")
