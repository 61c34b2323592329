"""``RLLMGRPOConfig``: TRL's ``GRPOConfig`` plus the rLLM estimator settings, checked and resolved when it is built.

:func:`advantage_settings` reads the advantage fields of any ``GRPOConfig`` (a plain one has no ``adv_estimator``:
its advantages are TRL's own, ``trl_grpo`` following ``scale_rewards``) into one frozen :class:`AdvantageSettings`:
each estimator and transform name resolved once, the options checked. An ``RLLMGRPOConfig`` resolves them in
``__post_init__`` and keeps them; the trainer takes those (while the advantage fields are unchanged) and adds what
needs the compute modules or the datasets (the estimators' trial run, the role column:
:func:`rllm_trl.trainer.check_trainer_setup`). This module imports none of the compute modules.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from trl import GRPOConfig

from rllm_plugins.aggregation import check_aggregation
from rllm_plugins.calling import takes_keyword
from rllm_plugins.config import AlgorithmConfig, build_algorithm_config, refuse_per_role_losses
from rllm_plugins.estimators import check_group_size
from rllm_plugins.estimators.trl_compat import trl_scaling
from rllm_plugins.options import check_estimator_kwargs
from rllm_plugins.registry import Estimator, available_estimators, get_estimator
from rllm_plugins.shaping import SelectedShaper, check_shaper_context, resolve_shapers
from rllm_plugins.spec import normalize_name, unapplied_loss_warning
from rllm_plugins.transforms import SelectedTransform, check_available_context, resolve_transforms, split_chain
from rllm_plugins.types import TrajectoryGroup
from rllm_trl.versions import check_config_fields, check_hooks, check_logprobs

__all__ = [
    "AdvantageSettings",
    "RLLMGRPOConfig",
    "advantage_settings",
    "check_adv_estimator_kwargs",
    "check_no_per_role_loss",
    "check_trl_shapers",
    "check_trl_transforms",
    "role_name",
]

TRL_ESTIMATOR = "trl_grpo"  # the estimator of a plain GRPOConfig: TRL's formula, following scale_rewards
TRL_SETTINGS = ("scale_rewards",)  # GRPOConfig fields given to the estimators that name them
# the fields advantage_settings reads: settings kept by a config are reused while these are unchanged
READ_FIELDS = (
    "adv_estimator",
    "adv_estimator_map",
    "adv_estimator_kwargs",
    "advantage_transforms",
    "reward_shapers",
    "role_column",
    "norm_adv_by_std_in_grpo",
    "scale_rewards",
    "multi_objective_aggregation",
    "num_generations",
    "num_generations_eval",
    "beta",
)
TRANSFORMS_WHERE = "RLLMGRPOConfig.advantage_transforms"
SHAPERS_WHERE = "RLLMGRPOConfig.reward_shapers"
SHAPER_CONTEXT = {"offsets", "scores", "lengths", "input_lengths", "tool_lengths", "turns"}  # the gathered completions' (rllm_trl.trainer)
SEQUENCE_CONTEXT = {"offsets", "rewards", "scores", "lengths", "turn_index", "traj_offsets", "role"}  # lengths: on the outcome path; scores: the rewards
TOKEN_CONTEXT = {"mask", "logprobs", "ref_logprobs", "role", "sum_over_processes"}


def role_name(value: Any, where: str) -> str:
    """A role value as a role name: its text, which must be non-empty and read back whole from an rLLM group id.

    ``None`` (or NaN, a missing value in a dataset column), ``""`` and names holding ``":"`` (the
    separator of ``"<task>:<role>"`` group ids) raise ``ValueError`` naming ``where``.
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        raise ValueError(f"{where}: role is {value!r}; every prompt needs a role name (fill in the role column)")
    name = str(value)
    if not name:
        raise ValueError(f"{where}: role is the empty string; every prompt needs a role name (fill in the role column)")
    read_back = TrajectoryGroup([], group_id=f"0:{name}").group_role
    if read_back != name:
        raise ValueError(
            f"{where}: role {name!r} contains ':', which separates task and role in rLLM group ids ('<task>:<role>'), "
            f"so it would be read as the role {read_back!r}; rename the role without ':' (e.g. {name.replace(':', '_')!r})"
        )
    return name


def check_trl_shapers(entries: Any, aggregation: str) -> tuple[SelectedShaper, ...]:
    """Resolve ``reward_shapers`` at config time; refuse them with ``normalize_then_sum`` (several rewards per completion)."""
    selected = resolve_shapers(entries, SHAPERS_WHERE)
    check_shaper_context(selected, SHAPER_CONTEXT, SHAPERS_WHERE, "TRL")
    if selected and aggregation == "normalize_then_sum":
        raise ValueError(
            f"{SHAPERS_WHERE}: reward shapers add to one reward per completion, and multi_objective_aggregation='normalize_then_sum' runs the "
            "estimator on each reward function's: use 'sum_then_normalize' (the weighted sum, then the shapers' terms), or leave the shapers out"
        )
    return selected


def check_trl_transforms(entries: Any, beta: float) -> tuple[SelectedTransform, ...]:
    """Resolve ``advantage_transforms`` at config time; refuse what TRL cannot run (a token-level transform without a reference
    model, a transform that needs one value per completion after a token-level one)."""
    selected = resolve_transforms(entries, TRANSFORMS_WHERE)
    sequence_part, token_part = split_chain(selected)
    check_available_context(sequence_part, SEQUENCE_CONTEXT, TRANSFORMS_WHERE, "TRL (on the gathered completions or turns)")
    check_available_context(token_part, TOKEN_CONTEXT, TRANSFORMS_WHERE, "TRL (on this process's rows)")
    if token_part and not beta:
        first = token_part[0]
        raise ValueError(
            f"{TRANSFORMS_WHERE}: {first.name!r} works on per-token advantages with the reference model's log-probs, and with beta=0.0 "
            "GRPOTrainer loads no reference model: set beta > 0 (or leave the transform out)"
        )
    for choice in token_part[1:]:
        spec = choice.transform.spec
        if spec.level == "sequence" and not spec.elementwise:
            raise ValueError(
                f"{TRANSFORMS_WHERE}: {choice.name!r} needs one advantage per completion or turn, but it comes after {token_part[0].name!r}, "
                "whose advantages are per token: put it first"
            )
    return selected


def check_no_per_role_loss(config: AlgorithmConfig) -> AlgorithmConfig:
    """Raise ``ValueError`` if ``config`` asks for a per-role policy loss: TRL trains every role with one loss."""
    return refuse_per_role_losses(config, "TRL", "GRPOTrainer uses GRPOConfig.loss_type for every role", ", and choose the loss with loss_type")


@dataclass(frozen=True)
class AdvantageSettings:
    """What a trainer computes: ``estimator`` for roles not in ``estimator_map`` (registry keys),
    the options of every call, the role column, and TRL's settings not at their default, given
    to the estimators that take them (``trl_settings``: ``{}`` or ``{"scale_rewards": "batch" | "none"}``).
    ``overridden`` says, one line each, which TRL settings not at their default an estimator
    in use does not follow, and which estimator's method has a loss term TRL does not apply
    (``AdvEstimatorSpec.trainer_loss``); the config warns with each.
    """

    estimator: str
    estimator_map: dict[str, str]
    norm_adv_by_std_in_grpo: bool
    estimator_kwargs: dict[str, Any]
    role_column: str | None
    trl_settings: dict[str, Any]
    aggregation: str = "sum_then_normalize"
    overridden: tuple[str, ...] = ()
    step_level: bool = False  # ``estimator`` gives one advantage per turn (:mod:`rllm_trl.turns`)
    selected: dict[str, Estimator] = field(default_factory=dict, compare=False, repr=False)  # each name above, resolved once
    transforms: tuple[Any, ...] = field(default=(), compare=False)  # advantage_transforms, resolved (rllm_trl.transforms)
    shapers: tuple[Any, ...] = field(default=(), compare=False)  # reward_shapers, resolved (before the estimator)

    @property
    def options(self) -> dict[str, Any]:
        """The keyword arguments of every estimator call: ``estimator_kwargs`` with ``norm_adv_by_std_in_grpo``."""
        return {**self.estimator_kwargs, "norm_adv_by_std_in_grpo": self.norm_adv_by_std_in_grpo}

    def provenance(self) -> dict[str, Any]:
        """Which code computes the advantages (:func:`rllm_plugins.provenance.provenance`): ``estimator`` for every role
        (``"*"``) but those of ``estimator_map``, the transforms, the options; the trainer logs it as one line."""
        from rllm_plugins.provenance import ALL_ROLES, provenance

        by_role = {ALL_ROLES: self.selected[self.estimator], **{role: self.selected[name] for role, name in self.estimator_map.items()}}
        return provenance(by_role, self.transforms, self.options, self.shapers)

    def describe(self) -> str:
        """One line saying which estimator computes the advantages, from which provider, with which settings."""

        def named(name: str) -> str:
            return f"{name!r} ({self.selected[name].provider})"

        roles = "".join(f", role {role!r}: {named(name)}" for role, name in self.estimator_map.items())
        parts = [
            f"advantages by estimator {named(self.estimator)}{roles}",
            f"multi_objective_aggregation={self.aggregation!r}",
            f"norm_adv_by_std_in_grpo={self.norm_adv_by_std_in_grpo}",
        ]
        if self.estimator_kwargs:
            parts.append(f"adv_estimator_kwargs={self.estimator_kwargs}")
        if self.trl_settings:
            parts.append(", ".join(f"{key}={value!r}" for key, value in self.trl_settings.items()))
        if self.shapers:
            parts.append("rewards shaped by " + ", ".join(f"{c.name}{dict(c.options) if c.options else ''}" for c in self.shapers))
        if self.transforms:
            parts.append("then " + ", ".join(f"{c.name}{dict(c.options) if c.options else ''}" for c in self.transforms))
        return "; ".join(parts)


@dataclass
class RLLMGRPOConfig(GRPOConfig):
    """``GRPOConfig`` whose advantages come from an rLLM estimator chosen by name.

    ``adv_estimator="trl_grpo"`` follows TRL's ``scale_rewards`` and gives ``GRPOTrainer``'s
    advantages; another estimator replaces TRL's formula, and a warning names each TRL advantage
    setting it overrides (``scale_rewards`` not at TRL's default). ``multi_objective_aggregation``
    is honoured for every estimator: ``"normalize_then_sum"`` (GDPO) runs the estimator on each
    reward function, sums the weighted advantages and whitens them over the batch (per role).
    """

    _VALID_DICT_FIELDS: ClassVar[list[str]] = [*GRPOConfig._VALID_DICT_FIELDS, "adv_estimator_kwargs", "adv_estimator_map"]

    adv_estimator: str = field(
        default="grpo",
        metadata={
            "help": "Name of the rLLM advantage estimator: a built-in (`grpo`, `rloo`, `reinforce`, "
            "`reinforce_plus_plus_baseline`, `prpo`, `prpo_std_optional`, `opo`, `grpo_passk`, `trl_grpo`, `trl_grpo_batch`, `dr_grpo`, "
            "`maxrl`, `passk_training`, `gpg`, `verl_grpo`, `verl_rloo_vectorized`, `verl_reinforce_plus_plus_baseline`; step-level, one "
            "advantage per turn of multi-turn completions: `gigpo`, `step_reinforce`) or one from an "
            "installed `rllm_plugins` plugin (`rllm-plugins estimators` lists them). `grpo` is rLLM's GRPO "
            "(population std, eps 1e-6; Shao et al., 2024); `trl_grpo` is TRL's own and follows `scale_rewards`."
        },
    )
    norm_adv_by_std_in_grpo: bool = field(
        default=True,
        metadata={
            "help": "Divide by the group standard deviation in std-normalising estimators (`grpo`, `prpo_std_optional`, `trl_grpo`, "
            "...). `False` gives the Dr. GRPO advantage `r - mean` (Liu et al., 2025), which avoids the question-level "
            "difficulty bias of std scaling."
        },
    )
    adv_estimator_kwargs: dict[str, Any] | str | None = field(
        default=None,
        metadata={"help": 'Extra keyword arguments for every estimator call, e.g. `{"epsilon": 1e-4}` (a dict, or a JSON string on the command line).'},
    )
    adv_estimator_map: dict[str, Any] | str | None = field(
        default=None,
        metadata={
            "help": 'Estimator per role, e.g. `{"judge": "rloo"}`; roles not listed use `adv_estimator`. '
            "Roles come from `role_column` (a dict, or a JSON string on the command line)."
        },
    )
    advantage_transforms: list[Any] | str | None = field(
        default=None,
        metadata={
            "help": 'Advantage transforms applied in order after the estimator, e.g. `["clip", ["scale", {"negative": 0.5}]]` or '
            '`[{"name": "clip", "max": 2.0}]` (built-ins: `clip`, `scale`, `kl_shaping`; `rllm-plugins transforms` lists them; a JSON '
            "string on the command line)."
        },
    )
    reward_shapers: list[Any] | str | None = field(
        default=None,
        metadata={
            "help": 'Reward shapers whose additive terms the estimator sees on each completion\'s reward, e.g. `[{"name": "dapo_overlong", '
            '"max_length": 1024, "buffer": 256}]` (built-ins: `dapo_overlong`, `length_penalty`, `linear_length_penalty`, `efficiency_bonus`, '
            "`group_length_penalty`, `turn_penalty`; `rllm-plugins shapers` lists them; a JSON string on the command line). The logged "
            "rewards stay the reward functions'; each term is logged as `shaping/<role>/<term>/*`."
        },
    )
    role_column: str | None = field(
        default=None,
        metadata={
            "help": "Dataset column naming each prompt's role (e.g. `solver`, `judge`), so that `adv_estimator_map` applies "
            "per role and metrics are logged as `reward/<role>/*`, `advantage/<role>/*`. Without it every group has the "
            "role `all_groups`."
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        settings = _resolve(self)
        self.adv_estimator, self.adv_estimator_map, self.adv_estimator_kwargs = settings.estimator, settings.estimator_map, settings.estimator_kwargs
        self.norm_adv_by_std_in_grpo = settings.norm_adv_by_std_in_grpo  # a bool: np.bool_ is accepted, stored as bool
        keep_settings(self, settings)  # after the fields took their resolved form: the trainer reuses these
        for line in settings.overridden:
            warnings.warn(f"RLLMGRPOConfig: {line}", UserWarning, stacklevel=3)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_rllm_settings", None)  # resolved objects (plugins' functions among them) stay out of pickles and copies
        return state

    def algorithm_config(self) -> AlgorithmConfig:
        """These settings as rLLM's ``AlgorithmConfig`` (for the object path, ``compute_advantages_via_groups``).

        TRL's settings not at their default join ``estimator_kwargs`` when an estimator in use takes
        them (the collector gives ``estimator_kwargs`` to every estimator; one that names the key
        receives it), as the trainer gives them only to the estimators that take them.
        """
        settings = advantage_settings(self)
        followed = {key: value for key, value in settings.trl_settings.items() if any(takes_keyword(e.spec, key) for e in settings.selected.values())}
        kwargs = {**self.adv_estimator_kwargs, **followed}
        node = {
            "adv_estimator": self.adv_estimator,
            "norm_adv_by_std_in_grpo": self.norm_adv_by_std_in_grpo,
            "estimator_kwargs": kwargs,
            "multi_objective_aggregation": self.multi_objective_aggregation,
            "advantage_transforms": [{"name": c.name, **c.options} for c in settings.transforms],
            "reward_shapers": [{"name": c.name, **c.options} for c in settings.shapers],
        }
        return check_no_per_role_loss(build_algorithm_config(node, self.adv_estimator_map))


def _as_dict(args: Any, name: str) -> dict[str, Any]:
    value = getattr(args, name, None)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be a dict (or a JSON object string), got {type(value).__name__}: {value!r}")
    return dict(value)


def _check_estimator(name: Any, where: str, selected: dict[str, Estimator]) -> str:
    """The registry key of ``name``, resolved into ``selected`` once per key; an unknown name raises the registry's error, prefixed with ``where``."""
    if not isinstance(name, str):
        raise ValueError(f"{where} must be an estimator name (str), got {type(name).__name__}: {name!r}")
    if normalize_name(name) in selected:
        return normalize_name(name)
    try:
        selected[normalize_name(name)] = get_estimator(name)
    except ValueError as e:
        bare = normalize_name(name).removeprefix("rllm_")
        if bare != normalize_name(name) and bare in available_estimators():
            raise type(e)(
                f"{where}={name!r}: the 'rllm_' prefix is verl's spelling (algorithm.adv_estimator=rllm_<name>); in TRL set {where}={bare!r}"
            ) from None
        raise type(e)(f"{where}: {e}") from None
    return normalize_name(name)


def check_adv_estimator_kwargs(kwargs: Any, estimators: dict[str, Estimator]) -> dict[str, Any]:
    """``adv_estimator_kwargs`` as a dict, checked against the options of ``estimators`` (the core's rule:
    known keys, values of the right type); TRL's own settings (``scale_rewards``) are refused here, as
    the trainer passes the ``GRPOConfig`` field to the estimators that take it.
    """
    if kwargs is None:
        return {}
    if not isinstance(kwargs, dict):
        raise ValueError(f"adv_estimator_kwargs must be a dict (or a JSON object string), got {type(kwargs).__name__}: {kwargs!r}")
    for key in TRL_SETTINGS:
        if key in kwargs:
            raise ValueError(f"RLLMGRPOConfig.adv_estimator_kwargs: {key!r} is a GRPOConfig field; set {key} instead (the estimators that take it receive it)")
    check_estimator_kwargs(estimators, kwargs, where="RLLMGRPOConfig.adv_estimator_kwargs", norm_field="RLLMGRPOConfig.norm_adv_by_std_in_grpo")
    return dict(kwargs)


def _fields_key(args: Any) -> str:
    return repr([getattr(args, name, None) for name in READ_FIELDS])


def keep_settings(args: Any, settings: AdvantageSettings) -> None:
    """Keep ``settings`` on an ``RLLMGRPOConfig`` for :func:`advantage_settings` to hand back while the fields it read are
    unchanged (not pickled: a checkpoint's ``training_args.bin`` holds the fields only)."""
    if isinstance(args, RLLMGRPOConfig):
        object.__setattr__(args, "_rllm_settings", (type(args), _fields_key(args), settings))


def advantage_settings(args: Any) -> AdvantageSettings:
    """The advantage fields of ``args`` (an ``RLLMGRPOConfig`` or any ``GRPOConfig``), checked and resolved: each name once.

    The settings an ``RLLMGRPOConfig`` resolved when it was built (or an earlier call kept) are handed back as long as
    the fields they were read from are unchanged; otherwise (a field set afterwards, a plain ``GRPOConfig``) they are
    resolved here and kept. See :func:`_resolve` for the checks.
    """
    kept = getattr(args, "_rllm_settings", None)
    if kept is not None and kept[0] is type(args) and kept[1] == _fields_key(args):
        return kept[2]
    settings = _resolve(args)
    keep_settings(args, settings)
    return settings


def _resolve(args: Any) -> AdvantageSettings:
    """Check and resolve the advantage fields of ``args`` (an ``RLLMGRPOConfig`` or any ``GRPOConfig``).

    ``scale_rewards`` other than TRL's default goes to the estimators that name it as a keyword
    (``trl_grpo``, ``trl_grpo_batch``), each tried once here on two small groups; the others get a
    line in ``overridden``. Raises ``ValueError`` for a bad value (naming the field) and for
    combinations without a meaning: settings such an estimator rejects (``trl_grpo`` with
    ``scale_rewards="batch"`` and ``norm_adv_by_std_in_grpo=False``, ``trl_grpo_batch`` with
    ``"none"``) and an unknown ``multi_objective_aggregation``. Under ``"normalize_then_sum"``
    ``scale_rewards`` has no effect (as in TRL).
    """
    check_config_fields(type(args).__name__)
    selected: dict[str, Estimator] = {}  # every name in use, resolved once: the checks below read these
    estimator = _check_estimator(getattr(args, "adv_estimator", TRL_ESTIMATOR), "adv_estimator", selected)
    raw_map = _as_dict(args, "adv_estimator_map")
    if any(isinstance(name, (tuple, list)) for name in raw_map.values()):  # rLLM main's (estimator, loss_fn) pairs
        check_no_per_role_loss(AlgorithmConfig(estimator_map={str(role): name for role, name in raw_map.items()}))
    estimator_map = {}
    for role, name in raw_map.items():
        estimator_map[role_name(role, f"adv_estimator_map key {role!r}")] = _check_estimator(name, f"adv_estimator_map[{role!r}]", selected)
    role_column = getattr(args, "role_column", None)
    if role_column is not None and (not isinstance(role_column, str) or not role_column):
        raise ValueError(f"role_column must be a dataset column name (a non-empty str) or None, got {type(role_column).__name__}: {role_column!r}")
    if estimator_map and role_column is None:
        raise ValueError("adv_estimator_map is set but role_column is None: set role_column to the dataset column naming each prompt's role")
    norm = getattr(args, "norm_adv_by_std_in_grpo", True)
    if not isinstance(norm, (bool, np.bool_)):
        raise ValueError(f"norm_adv_by_std_in_grpo must be a bool (True or False), got {type(norm).__name__} {norm!r}")
    _refuse_value_based(estimator, estimator_map, selected)
    kwargs = check_adv_estimator_kwargs(getattr(args, "adv_estimator_kwargs", None), selected)
    # a group is one prompt's num_generations completions (num_generations_eval in evaluation, when set)
    group_sizes = [(field, size) for field in ("num_generations", "num_generations_eval") if (size := getattr(args, field, None)) is not None]
    for where, name in [("adv_estimator", estimator), *((f"adv_estimator_map[{role!r}]", n) for role, n in estimator_map.items())]:
        for size_field, group_size in group_sizes:
            try:
                check_group_size(selected[name].spec, kwargs, group_size)
            except ValueError as e:
                raise ValueError(f"{where} with {size_field}={group_size}: {e}") from None
    scale_rewards = trl_scaling(getattr(args, "scale_rewards", "group"))
    aggregation = check_aggregation(getattr(args, "multi_objective_aggregation", "sum_then_normalize"))
    step_level = _check_step_level(estimator, estimator_map, aggregation, selected)
    stateful = [name for name, e in selected.items() if e.spec.stateful]
    check_hooks(state=bool(stateful), where=type(args).__name__)  # what TRL lacks for these settings, said before training
    check_logprobs(args, where=type(args).__name__)
    if stateful and aggregation == "normalize_then_sum":
        raise ValueError(
            f"estimator {stateful[0]!r} is stateful (a running baseline over the combined reward): "
            "multi_objective_aggregation='normalize_then_sum' is not supported with it; use 'sum_then_normalize'"
        )
    if aggregation == "normalize_then_sum":
        scale_rewards = "group"  # TRL's GDPO path ignores scale_rewards: it has no effect to follow or override

    trl_settings = {} if scale_rewards == "group" else {"scale_rewards": scale_rewards}  # TRL's default: nothing to pass
    followers = [name for name, e in selected.items() if takes_keyword(e.spec, "scale_rewards")]
    others = [name for name in selected if name not in followers]
    for name in followers:
        _dry_run(name, selected[name], {**kwargs, "norm_adv_by_std_in_grpo": bool(norm), **trl_settings})
    overridden = []
    if others and scale_rewards != "group" and not (scale_rewards == "none" and not norm):
        hint = " (or norm_adv_by_std_in_grpo=False for unscaled advantages)" if scale_rewards == "none" else ""
        overridden.append(
            f"scale_rewards={scale_rewards!r} is overridden by {_estimators(others)}, which "
            f"{'computes the advantages its' if len(others) == 1 else 'compute the advantages their'} own way; "
            f"set adv_estimator='trl_grpo' to follow scale_rewards{hint}"
        )
    for name, chosen in selected.items():  # a method whose loss term TRL's GRPO loss lacks
        line = unapplied_loss_warning(chosen.spec, name, "TRL's GRPOTrainer")
        if line is not None:
            overridden.append(line)
    transforms = check_trl_transforms(getattr(args, "advantage_transforms", None), getattr(args, "beta", 0.0))
    shapers = check_trl_shapers(getattr(args, "reward_shapers", None), aggregation)
    return AdvantageSettings(
        estimator=estimator,
        estimator_map=estimator_map,
        norm_adv_by_std_in_grpo=bool(norm),
        estimator_kwargs=kwargs,
        role_column=role_column,
        trl_settings=trl_settings,
        aggregation=aggregation,
        overridden=tuple(overridden),
        step_level=step_level,
        selected=selected,
        transforms=transforms,
        shapers=shapers,
    )


def _refuse_value_based(estimator: str, estimator_map: dict[str, str], selected: dict[str, Estimator]) -> None:
    """Refuse an estimator that reads a critic's values (``needs_values``): GRPOTrainer trains no critic."""
    named = [("adv_estimator", estimator), *((f"adv_estimator_map[{r!r}]", n) for r, n in estimator_map.items())]
    for where, name in named:
        if selected[name].spec.needs_values:
            raise ValueError(
                f"{where}={name!r} is value-based: it reads a critic's value of every turn and gives the critic's targets, and TRL's "
                "GRPOTrainer has no critic (no value model, no value loss). Use it in verl with critic.enable=true, or choose a "
                "critic-free step-level estimator (gigpo, turn_grpo, step_reinforce)"
            )


def _check_step_level(estimator: str, estimator_map: dict[str, str], aggregation: str, selected: dict[str, Estimator]) -> bool:
    """Whether ``estimator`` is step-level; refuses the combinations the step-level path does not have."""
    named = [("adv_estimator", estimator), *((f"adv_estimator_map[{r!r}]", n) for r, n in estimator_map.items())]
    stepped = [(where, name) for where, name in named if selected[name].spec.level == "step"]
    if not stepped:
        return False
    where, name = stepped[0]
    if estimator_map:
        mapped = ", ".join(f"{role!r}: {n!r}" for role, n in estimator_map.items())
        if where == "adv_estimator":
            fix = (
                f"to train every role with {name!r}, drop adv_estimator_map (role_column still splits the metrics by role); to keep "
                "an estimator per role, make adv_estimator and every value of adv_estimator_map outcome-level (e.g. 'grpo')"
            )
        else:
            role = where.removeprefix("adv_estimator_map[").removesuffix("]")
            fix = (
                f"to train every role with {name!r}, set adv_estimator={name!r} and drop adv_estimator_map (role_column still splits the "
                f"metrics by role); to keep an estimator per role, map {role} to an outcome-level estimator (e.g. 'grpo')"
            )
        raise ValueError(
            f"{where}={name!r} is a step-level estimator (one advantage per turn), and TRL's step-level path runs one estimator for the "
            f"whole batch, so adv_estimator_map {{{mapped}}} cannot give roles their own: {fix}"
        )
    if aggregation == "normalize_then_sum":
        raise ValueError(
            f"{where}={name!r} is a step-level estimator: multi_objective_aggregation='normalize_then_sum' combines outcome advantages "
            "per reward function and has no per-turn form; use 'sum_then_normalize' (the estimator then reads the weighted sum of "
            "the reward functions as each completion's reward)"
        )
    return True


def _dry_run(name: str, estimator: Estimator, options: dict[str, Any]) -> None:
    """Call ``estimator`` (selected as ``name``) once on two small groups, so that settings it rejects fail at config time."""
    try:
        estimator.batched_form(np.array([1.0, 0.0, 0.5, 0.25]), np.array([0, 2, 4]), **options)
    except ValueError as e:
        raise ValueError(f"estimator {name!r}: {e}") from None


def _estimators(names: list[str]) -> str:
    return f"adv_estimator {names[0]!r}" if len(names) == 1 else f"the estimators {names}"
