"""Fail fast: compose verl's Hydra ``ppo_trainer`` config and check ``algorithm.adv_estimator`` before launch.

verl reports an unknown estimator only at the first advantage computation, after the workers
started and the first rollout ran. :func:`verl_check` composes the same config verl's
``main_ppo`` would (same overrides), looks the estimator up in verl's registry (where the
``rllm_*`` names are), and for an ``rllm_*`` name checks that verl will load our ``verl.plugins`` entry point (named
``rllm_plugins``; ``VERL_USE_EXTERNAL_PLUGINS`` may exclude it), checks the estimator options (also
against the group size ``actor_rollout_ref.rollout.n``) and runs it on toy batches with groups of
several sizes (1, 2, 3, 4, 8 and ``rollout.n``, as many as the options allow): groups of one alone
cannot show an estimator that returns one flat list instead of one array per group. It refuses
``algorithm.gdpo_reward_keys`` and step-level estimators that need anchor states on verl's v1 trainer
(``trainer.use_v1``), whose advantage step sees neither the per-key scores nor ``responses``. The report names
who provides the estimator (verl itself, rllm-plugins, a plugin), the group sizes tried, and whether
the two verl extensions (sessions, reward keys; see :mod:`rllm_verl.extension`) are active.
``rllm-plugins verl-check OVERRIDES...`` calls :func:`main`, which prints the verdict first and keeps
what verl prints while it is imported out of the way (``--verbose`` shows it).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import os
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field

__all__ = ["ENTRY_POINT_NAME", "VerlCheckReport", "entry_point_policy_error", "main", "reward_keys_on_v1_error", "verl_check"]

ENTRY_POINT_NAME = "rllm_plugins"  # our entry point in verl's ``verl.plugins`` group (not the distribution name)
PLUGIN_MODULE = "rllm_verl.verl_plugin"
TRIAL_GROUP_SIZES = (1, 2, 3, 4, 8)  # tried whatever rollout.n says, with rollout.n itself


def extension_status_of(name: str) -> str:
    """Whether the verl extension ``name`` (``sessions`` or ``reward_keys``) is active; imports the verl module it extends."""
    import importlib

    from .extension import extension_status, install
    from .multi_trajectories import SESSIONS
    from .reward_keys import REWARD_KEYS

    extension = {e.name: e for e in (SESSIONS, REWARD_KEYS)}[name]
    install(extension)
    try:
        importlib.import_module(extension.module)  # importing it applies a pending extension
    except Exception as error:
        return f"not applied: {extension.module} cannot be imported ({type(error).__name__}: {error})"
    return extension_status().get(extension.name, "not installed")


def _checkpoint_status() -> str:
    from .estimator_state import checkpoint_status

    return checkpoint_status()


@dataclass
class VerlCheckReport:
    """Outcome of :func:`verl_check`: whether ``adv_estimator`` resolves, the ``rllm_*`` names verl knows, each extension's status."""

    ok: bool
    adv_estimator: str | None
    config_name: str
    rllm_names: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    provider: str | None = None
    trial_group_sizes: list[int] = field(default_factory=list)
    trial_note: str = ""
    session_extension: str = field(default_factory=lambda: extension_status_of("sessions"))
    reward_key_extension: str = field(default_factory=lambda: extension_status_of("reward_keys"))
    estimator_state: str = field(default_factory=lambda: _checkpoint_status())

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    def __str__(self) -> str:
        head = f"verl config {self.config_name!r}: algorithm.adv_estimator={self.adv_estimator!r}"
        lines = [f"{head}: {'OK' if self.ok else 'FAILED'}", *(f"  error: {e}" for e in self.errors)]
        if self.provider:
            lines.append(f"  provided by: {self.provider}")
        if self.trial_group_sizes:
            lines.append(f"  trial run: two groups of each size {', '.join(map(str, self.trial_group_sizes))}{self.trial_note}")
        lines.append(f"  rllm_* estimators in verl: {', '.join(self.rllm_names) or '(none)'}")
        lines.append(f"  session extension (rllm_* over v1 multi-output sessions): {self.session_extension}")
        lines.append(f"  reward-key extension (algorithm.gdpo_reward_keys for rllm_* in ray_trainer.compute_advantage): {self.reward_key_extension}")
        lines.append(f"  stateful estimators' state (rllm_rae's baselines): {self.estimator_state}")
        return "\n".join(lines)


def _compose(overrides: Sequence[str], config_name: str, config_dir: str | None):
    import verl
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    directory = config_dir or os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=os.path.abspath(directory), version_base=None):
        return compose(config_name=config_name, overrides=list(overrides))


def _installed_entry_points() -> list[tuple[str, str]]:
    from importlib.metadata import entry_points

    return [(ep.name, ep.value) for ep in entry_points(group="verl.plugins")]


def entry_point_policy_error(environ: Mapping[str, str] | None = None, installed: Sequence[tuple[str, str]] | None = None) -> str | None:
    """Why verl would not load our entry point (None when it will).

    verl reads ``VERL_USE_EXTERNAL_PLUGINS`` once, in ``import verl``: ``auto`` (the default) loads
    every ``verl.plugins`` entry point, ``none`` none, and a comma-separated list only the entry
    points it names. ``VERL_USE_EXTERNAL_MODULES`` naming ``rllm_verl.verl_plugin`` also registers
    ours. Otherwise the entry point must be installed: ``installed`` lists the ``(name, value)``
    of the ``verl.plugins`` entry points (default: those of the installed distributions).
    """
    environ = os.environ if environ is None else environ
    raw = environ.get("VERL_USE_EXTERNAL_PLUGINS", "auto")
    policy = raw.strip().lower()
    modules = set(environ.get("VERL_USE_EXTERNAL_MODULES", "").split(","))  # verl imports each name as is, unstripped
    if PLUGIN_MODULE in modules:
        return None
    allowed = [name.strip() for name in policy.split(",") if name.strip()] if policy != "none" else []
    if policy == "auto" or ENTRY_POINT_NAME in allowed:
        installed = _installed_entry_points() if installed is None else installed
        if (ENTRY_POINT_NAME, PLUGIN_MODULE) in set(installed):
            return None
        return (
            f"no entry point {ENTRY_POINT_NAME!r} = {PLUGIN_MODULE!r} of the verl.plugins group is installed (rllm_verl is "
            "importable without its distribution's metadata, e.g. from a source tree on PYTHONPATH), so verl will not load "
            "the rllm_* estimators and the run fails with 'Unknown advantage estimator'. Fix: install rllm-plugins[verl] "
            f"(pip install -e . in a checkout), or set VERL_USE_EXTERNAL_MODULES={PLUGIN_MODULE}"
        )
    if policy == "none":
        reason, fix = "VERL_USE_EXTERNAL_PLUGINS=none turns verl's plugin discovery off", f"unset it, or set VERL_USE_EXTERNAL_PLUGINS={ENTRY_POINT_NAME}"
    else:
        reason = f"VERL_USE_EXTERNAL_PLUGINS={raw!r} lets verl load only the entry points {', '.join(map(repr, allowed)) or '(none)'}"
        fix = f"add ours: VERL_USE_EXTERNAL_PLUGINS={','.join([*allowed, ENTRY_POINT_NAME])} (or unset it)"
    return (
        f"{reason}, so verl will not load the rllm_* estimators and the run fails with 'Unknown advantage estimator'. "
        f"Fix: {fix}. The entry-point name is {ENTRY_POINT_NAME!r} (group verl.plugins), not the distribution name 'rllm-plugins'."
    )


def _dry_run(name: str, algorithm: object, group_size: int) -> None:
    """Call the registered function on a toy batch (two groups of ``group_size``, uneven lengths) with the real options."""
    import numpy as np
    import torch
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    rows = 2 * group_size
    rewards = torch.zeros(rows, 3)
    rewards[::2, 0] = 1.0  # a success and a failure in each group (sizes > 1)
    rewards[1::4, 1] = 0.5
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 0, 0]]).repeat(group_size, 1)[:rows]
    index = np.array(["p"] * group_size + ["q"] * group_size, dtype=object)
    keys = algorithm.get("gdpo_reward_keys", None) if hasattr(algorithm, "get") else None
    extra = {}
    if keys and not isinstance(keys, str):  # per-key scores, one None, as compute_score would return them
        scores = np.array([[1.0, 0.0, 0.5, None][i % 4] for i in range(rows)], dtype=object)
        extra["non_tensor_batch"] = {"uid": index, **{str(k): scores.copy() for k in keys}}
    if getattr(get_adv_estimator_fn(name), "rllm_estimator", None) is not None:
        from rllm_plugins.registry import get_estimator

        if get_estimator(get_adv_estimator_fn(name).rllm_estimator).spec.level == "step":  # token ids, for anchor states
            extra["responses"] = torch.arange(rows * 3).reshape(rows, 3) % 5
    get_adv_estimator_fn(name)(token_level_rewards=rewards, response_mask=mask, index=index, config=algorithm, **extra)


def _group_size(config: object) -> int:
    """Responses per prompt (``actor_rollout_ref.rollout.n``), 2 when the config does not say."""
    from omegaconf import OmegaConf

    n = OmegaConf.select(config, "actor_rollout_ref.rollout.n", default=None)
    return int(n) if isinstance(n, int) and n >= 1 else 2


def _trial_sizes(spec: object, options: Mapping[str, object], group_size: int) -> tuple[list[int], str]:
    """The group sizes to try (:data:`TRIAL_GROUP_SIZES` and ``group_size``) that the options allow, and a note on the rest."""
    from rllm_plugins.estimators import check_group_size

    sizes, refused = [], []
    for size in sorted({*TRIAL_GROUP_SIZES, group_size}):
        try:
            check_group_size(spec, options, size)  # type: ignore[arg-type]
        except ValueError:
            refused.append(size)
        else:
            sizes.append(size)
    note = f" (actor_rollout_ref.rollout.n={group_size}"
    note += f"; not {', '.join(map(str, refused))}: the estimator's options rule those sizes out)" if refused else ")"
    return sizes, note


def _provider_of(name: str, fn: object) -> str:
    """Who provides verl's estimator ``name`` that is not one of ours: verl itself, or the distribution of ``fn``'s module."""
    module = getattr(fn, "__module__", None) or "?"
    where = f"{module}.{getattr(fn, '__qualname__', '?')}"
    if module.split(".")[0] == "verl":
        return f"verl's own estimator ({where}), not rllm-plugins'"
    from importlib.metadata import packages_distributions

    dists = packages_distributions().get(module.split(".")[0], [])
    return f"{where} (distribution {', '.join(dists)})" if dists else where


def _requested_estimator(overrides: Sequence[str]) -> str | None:
    """The ``algorithm.adv_estimator`` the overrides set (``+``/``++`` prefixes allowed), for a config that cannot be composed."""
    values = [o.split("=", 1)[1] for o in overrides if "=" in o and o.split("=", 1)[0].lstrip("+~") == "algorithm.adv_estimator"]
    return values[-1] if values else None


def verl_check(overrides: Sequence[str] = (), *, config_name: str = "ppo_trainer", config_dir: str | None = None) -> VerlCheckReport:
    """Compose verl's config with Hydra ``overrides`` and check that ``algorithm.adv_estimator`` will resolve.

    Returns a report (never raises for a bad estimator or option; composition errors are reported too).
    """
    from omegaconf import OmegaConf
    from verl.trainer.ppo import core_algos

    from rllm_plugins.entry_point_mistakes import misplaced_entry_points
    from rllm_plugins.estimators import check_group_size
    from rllm_plugins.registry import get_estimator, unavailable_because

    from .bridge import estimator_options
    from .registration import VERL_PREFIX, register_estimators_into_verl

    rllm_names = register_estimators_into_verl()
    if entry_point_policy_error() is not None:  # verl will not load them in a real run
        rllm_names = []
    try:
        config = _compose(overrides, config_name, config_dir)
    except Exception as error:
        message = f"Hydra could not compose the config: {type(error).__name__}: {error}"
        return VerlCheckReport(False, _requested_estimator(overrides), config_name, rllm_names, [message])
    algorithm = config.get("algorithm")
    name = None if algorithm is None else algorithm.get("adv_estimator")
    if name is None:
        return VerlCheckReport(False, None, config_name, rllm_names, ["the config has no algorithm.adv_estimator"])
    name = str(name)
    known = sorted(core_algos.ADV_ESTIMATOR_REGISTRY)
    if name not in core_algos.ADV_ESTIMATOR_REGISTRY:
        because = unavailable_because(name.removeprefix(VERL_PREFIX)) if name.startswith(VERL_PREFIX) else None
        misplaced = [m for m in misplaced_entry_points() if m.intended in ("rllm_plugins", "verl.plugins")]
        if misplaced:
            because = f"{because or ''} Entry points in a misspelt group, never loaded, which may offer it: {'; '.join(map(str, misplaced))}.".strip()
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.85 if because else 0.6)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        message = f"unknown advantage estimator {name!r}.{f' {because}' if because else ''}{hint} verl knows: {', '.join(known)}"
        return VerlCheckReport(False, name, config_name, rllm_names, [message])
    ours = name.startswith(VERL_PREFIX) and core_algos.ADV_ESTIMATOR_REGISTRY[name].__module__.startswith("rllm_verl.")
    if not ours:
        provider = _provider_of(name, core_algos.ADV_ESTIMATOR_REGISTRY[name])
        theirs = f"{VERL_PREFIX}{name}"
        if theirs in core_algos.ADV_ESTIMATOR_REGISTRY and entry_point_policy_error() is None:
            provider += f"; rllm-plugins' {name} is {theirs!r}"
        return VerlCheckReport(True, name, config_name, rllm_names, provider=provider)
    policy_error = entry_point_policy_error()
    if policy_error is not None:
        return VerlCheckReport(False, name, config_name, rllm_names, [policy_error])
    try:
        estimator = get_estimator(name.removeprefix(VERL_PREFIX))
    except ValueError as error:  # a plugin that did not load, or a name two plugins offer
        return VerlCheckReport(False, name, config_name, rllm_names, [f"{name!r} is registered in verl but cannot run: {error}"])
    provider = f"estimator {estimator.spec.name!r} of {estimator.provider}"
    group_size = _group_size(config)
    try:
        options = estimator_options(algorithm, f"advantage estimator {name!r}", name.removeprefix(VERL_PREFIX))
    except ValueError as error:
        return VerlCheckReport(False, name, config_name, rllm_names, [str(error)])
    try:
        check_group_size(estimator.spec, options, group_size)
    except ValueError as error:
        message = f"{name!r} with actor_rollout_ref.rollout.n={group_size}: {error}"
        return VerlCheckReport(False, name, config_name, rllm_names, [message], provider=provider)
    if estimator.spec.needs_anchors and bool(OmegaConf.select(config, "trainer.use_v1", default=False)):
        from .step_bridge import V1_RESPONSES_MESSAGE

        message = f"{name!r} is a step-level estimator that needs anchor states: {V1_RESPONSES_MESSAGE}"
        return VerlCheckReport(False, name, config_name, rllm_names, [message], provider=provider)
    sizes, note = _trial_sizes(estimator.spec, options, group_size)
    for size in sizes:
        try:
            _dry_run(name, algorithm, size)
        except Exception as error:
            message = f"{name!r} fails on a toy batch of two groups of {size} with this config: {type(error).__name__}: {error}"
            return VerlCheckReport(False, name, config_name, rllm_names, [message], provider, sizes[: sizes.index(size) + 1], note)
    v1_error = reward_keys_on_v1_error(config, name)
    if v1_error is not None:
        return VerlCheckReport(False, name, config_name, rllm_names, [v1_error], provider, sizes, note)
    return VerlCheckReport(True, name, config_name, rllm_names, provider=provider, trial_group_sizes=sizes, trial_note=note)


@contextlib.contextmanager
def _held_output() -> Iterator[list[str]]:
    """Hold back what is printed meanwhile (verl's import warnings and log lines, from Python or C); yields a list that gets the text."""
    held: list[str] = []
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace") as sink:
        python_streams = sys.stdout, sys.stderr
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        sys.stdout = sys.stderr = sink
        try:
            yield held
        finally:
            sink.flush()
            sys.stdout, sys.stderr = python_streams
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            sink.seek(0)
            held.append(sink.read())


def reward_keys_on_v1_error(config: object, name: str) -> str | None:
    """Why ``algorithm.gdpo_reward_keys`` cannot work with the trainer the config selects (None when it can, or is unset).

    verl's v1 trainer (``trainer.use_v1``, true by default) computes advantages on a DataProto holding only
    ``uid`` and a few tensors, so no estimator receives the per-key scores.
    """
    from omegaconf import OmegaConf

    from .multi_objective import KEYS_KEY

    if not OmegaConf.select(config, f"algorithm.{KEYS_KEY}", default=None) or not OmegaConf.select(config, "trainer.use_v1", default=False):
        return None
    return (
        f"{name!r} with algorithm.{KEYS_KEY} on verl's v1 trainer (trainer.use_v1=true, the default): it computes advantages from uid "
        "and a few tensors only, so the per-key scores reach no estimator (verl's own gdpo included) and the first advantage "
        "computation fails. Set trainer.use_v1=false (the legacy trainer keeps the reward keys in non_tensor_batch)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``rllm-plugins verl-check [--json] [--verbose] [--config-name NAME] [--config-dir DIR] OVERRIDES...``; exit 0 when it resolves, 1 otherwise."""
    parser = argparse.ArgumentParser(
        prog="rllm-plugins verl-check",
        description="Compose verl's Hydra config with the given overrides and check algorithm.adv_estimator before launching a run: "
        "that it resolves, who provides it, its options, and (for rllm_* names) a trial run on toy groups of several sizes.",
    )
    parser.add_argument("overrides", nargs="*", help="verl's Hydra overrides, e.g. algorithm.adv_estimator=rllm_rloo")
    parser.add_argument("--config-name", default="ppo_trainer", help="verl config to compose (default: ppo_trainer)")
    parser.add_argument("--config-dir", default=None, help="config directory (default: verl's trainer/config)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--verbose", action="store_true", help="also show what verl prints while it is imported (held back by default)")
    args = parser.parse_args(argv)
    with _held_output() as held:
        report = verl_check(args.overrides, config_name=args.config_name, config_dir=args.config_dir)
    print(json.dumps(report.as_dict(), indent=2) if args.json else report, flush=True)
    noise = held[0].strip()
    if noise and args.verbose:
        print(f"\nprinted by verl and its imports during the check:\n{noise}", file=sys.stderr)
    elif noise:
        print(f"({len(noise.splitlines())} lines printed by verl and its imports during the check are held back; --verbose shows them)", file=sys.stderr)
    return 0 if report.ok else 1
