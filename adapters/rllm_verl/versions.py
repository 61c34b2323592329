"""The installed verl: its version and what that version offers us. The only module that inspects verl's version.

verl's releases differ in three ways that matter here:

- registration: verl >= 0.9 imports every ``verl.plugins`` entry point in ``import verl`` (ours registers the
  ``rllm_*`` names). verl 0.7 and 0.8 have no entry points: ``import verl`` imports only the modules named in the
  environment variable ``VERL_USE_EXTERNAL_MODULES``, so there ``VERL_USE_EXTERNAL_MODULES=rllm_verl.plugin``
  must reach every process that imports verl (the driver and, through Ray, the ``TaskRunner`` actor);
- the v1 trainer (``verl.trainer.ppo.v1``, ``trainer.use_v1``, on TransferQueue) exists from 0.9 on; our
  session, v1-batch and v1 checkpoint extensions apply only there;
- verl 0.8 ships another TransferQueue trainer, ``verl.trainer.main_ppo_sync``, which we do not support: there
  an ``rllm_*`` name is refused by name at its first advantage step (:data:`SYNC_TRAINER_REFUSAL`).

The legacy trainer (``verl.trainer.ppo.ray_trainer``: ``compute_advantage``, ``RayPPOTrainer`` checkpoints) and
the registry (``core_algos.register_adv_est``, ``get_adv_estimator_fn``) are the same on every supported release.
verl's next release may define ``compute_advantage`` in ``verl.trainer.ppo.trainer_utils`` (verl PR #7237), which
``ray_trainer`` re-imports: :data:`ADVANTAGE_MODULES` names both places, and the extension of ``compute_advantage``
follows the function to the module that defines it and to every module that imported it by name
(:mod:`rllm_verl.patches.legacy`). That change is a layout, not a version: verl main carries ``0.10.0.dev`` with and
without it, so it is found where the function is, not read from the version.
:func:`verl_features` reads the version from the installed distribution's metadata (no ``import verl``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

__all__ = [
    "ADVANTAGE_MODULES",
    "EXTERNAL_MODULES_ENV",
    "FEATURE_TEXT",
    "MODULES_LINE",
    "NEWEST_TESTED",
    "OLDEST",
    "PLUGIN_MODULE",
    "SYNC_TRAINER",
    "SYNC_TRAINER_REFUSAL",
    "VerlFeatures",
    "installed_verl_version",
    "parse_version",
    "resolve_config_path",
    "verl_features",
]

OLDEST = (0, 7, 1)
"""The oldest verl we support; older releases are refused (:attr:`VerlFeatures.unsupported`)."""
NEWEST_TESTED = (0, 9, 1)
"""The newest verl the matrix tested; a newer one runs behind the extensions' signature guards, with a warning."""
FIRST_WITH_ENTRY_POINTS = (0, 9, 0)
FIRST_WITH_V1 = (0, 9, 0)
ADVANTAGE_MODULES = ("verl.trainer.ppo.ray_trainer", "verl.trainer.ppo.trainer_utils")
"""Where verl defines the legacy ``compute_advantage``: ``ray_trainer`` on every release so far and on verl main 1dda039b;
``trainer_utils`` with verl PR #7237 (``ray_trainer`` then re-imports it from there). The first is where users import it."""
EXTERNAL_MODULES_ENV = "VERL_USE_EXTERNAL_MODULES"
PLUGIN_MODULE = "rllm_verl.plugin"
MODULES_LINE = f"export {EXTERNAL_MODULES_ENV}={PLUGIN_MODULE}"
"""The one line a user of verl < 0.9 adds (before starting Ray and the driver)."""

SYNC_TRAINER = "verl.trainer.main_ppo_sync"
SYNC_TRAINER_REFUSAL = (
    "advantage estimator {name!r}: verl {version}'s TransferQueue trainer ({module}) is not supported by rllm-plugins "
    "(its rllm_* rows would reach the estimator without sessions or token ids); run python -m verl.trainer.main_ppo "
    "(the legacy trainer) instead, or upgrade to verl>=0.9.1, whose v1 trainer (trainer.use_v1=true) is supported"
)
"""The error for an ``rllm_*`` name in verl 0.8's ``main_ppo_sync`` (``{name}``, ``{version}``, ``{module}`` filled in)."""

FEATURE_TEXT = {
    "entry_points": "verl.plugins entry points (import verl loads them from 0.9.0 on)",
    "v1_trainer": "v1 trainer (verl.trainer.ppo.v1, from 0.9.0 on)",
    "sync_trainer": f"TransferQueue trainer {SYNC_TRAINER} (0.8 only)",
}
"""What each flag of :class:`VerlFeatures` names, for messages (``verl 0.8.0 has no <text>``)."""


def parse_version(text: str) -> tuple[int, int, int]:
    """``"0.8.0"``, ``"0.9.1.dev0"``, ``"0.10.0rc1+abc"`` -> ``(major, minor, micro)``; ValueError for anything else."""
    match = re.match(r"^\s*(\d+)\.(\d+)(?:\.(\d+))?", str(text))
    if match is None:
        raise ValueError(f"cannot read verl's version {text!r}: expected MAJOR.MINOR[.MICRO]")
    return int(match[1]), int(match[2]), int(match[3] or 0)


def installed_verl_version() -> str | None:
    """The installed verl's version string from its distribution metadata (None when verl is not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("verl")
    except PackageNotFoundError:
        return None


def _text(version: tuple[int, int, int]) -> str:
    return ".".join(map(str, version))


@dataclass(frozen=True)
class VerlFeatures:
    """What one verl release offers the adapter."""

    version: str
    entry_points: bool
    """``import verl`` loads the ``verl.plugins`` entry points (ours registers the ``rllm_*`` names)."""
    v1_trainer: bool
    """``verl.trainer.ppo.v1`` exists: the v1 trainer on TransferQueue, with our session, v1-batch and v1 checkpoint extensions."""
    sync_trainer: bool
    """verl 0.8's TransferQueue trainer :data:`SYNC_TRAINER` exists; an ``rllm_*`` name is refused there (:data:`SYNC_TRAINER_REFUSAL`)."""
    unsupported: str | None
    """Why this release is not supported (None when it is)."""
    untested: str | None
    """A warning for a release newer than the matrix tested (None when tested)."""
    config_path_resolver: str
    """Where verl's ``resolve_config_path`` (how its agent-loop workers find ``agent_loop_config_path``) lives:
    ``verl.experimental.agent_loop.utils`` up to 0.9.0 and again on verl main (0.10.0.dev), ``verl.utils.import_utils`` in 0.9.1."""
    agent_loop_arguments: tuple[str, ...]
    """The keyword arguments verl's ``AgentLoopWorker`` builds each agent loop with: ``tools`` (the tools the worker loaded
    from ``multi_turn``) from 0.8.0 on (before, ``tool_agent`` loads its own), ``hf_model_type`` from 0.9.1 on."""

    @property
    def registration(self) -> str:
        """How the ``rllm_*`` names reach verl's registry in every process: ``entry point`` or ``VERL_USE_EXTERNAL_MODULES``."""
        return "entry point" if self.entry_points else EXTERNAL_MODULES_ENV


def features_of(version: str) -> VerlFeatures:
    """The features of verl ``version`` (a version string)."""
    parsed = parse_version(version)
    unsupported = None
    if parsed < OLDEST:
        unsupported = f"verl {version} is older than the oldest supported release {_text(OLDEST)}: pip install 'verl>={_text(OLDEST)},<0.10'"
    untested = None
    if parsed[:2] > NEWEST_TESTED[:2]:
        untested = (
            f"verl {version} is newer than the newest release rllm-plugins was tested with ({_text(NEWEST_TESTED)}); the rllm_* names are "
            "registered and each extension applies only where verl's function still has the signature it was written for"
        )
    return VerlFeatures(
        version=version,
        entry_points=parsed >= FIRST_WITH_ENTRY_POINTS,
        v1_trainer=parsed >= FIRST_WITH_V1,
        sync_trainer=(0, 8, 0) <= parsed < FIRST_WITH_V1,
        config_path_resolver="verl.utils.import_utils" if (0, 9, 1) <= parsed < (0, 10, 0) else "verl.experimental.agent_loop.utils",
        agent_loop_arguments=(
            *("trainer_config", "server_manager", "tokenizer", "processor"),
            *(("hf_model_type",) if parsed >= (0, 9, 1) else ()),
            *("dataset_cls", "data_config"),
            *(("tools",) if parsed >= (0, 8, 0) else ()),
        ),
        unsupported=unsupported,
        untested=untested,
    )


def resolve_config_path(path: str) -> str:
    """verl's own ``resolve_config_path(path)`` of the installed release (FileNotFoundError when verl finds no such file)."""
    import importlib

    return importlib.import_module(verl_features().config_path_resolver).resolve_config_path(path)


@lru_cache(maxsize=1)
def verl_features() -> VerlFeatures:
    """The installed verl's features; ImportError naming the extra when verl is not installed."""
    version = installed_verl_version()
    if version is None:
        raise ImportError("verl is not installed: pip install 'rllm-plugins[verl]'")
    return features_of(version)
