"""``rLLMAdvantageEstimator`` and ``AlgorithmConfig``: which estimator each role uses, and how.

Every generation of rLLM's configuration is read: the spec-era one (``use_rllm``, a whole-config
``from_config``), rLLM main's (``estimator_map`` pairs with a per-role loss, the loss and
optimiser fields, ``from_config(algorithm_node, stepwise_advantage_mode=..., estimator_map=...)``),
its ``terminal-rl`` branch's (``loss_params``, ``token-sum``) and PR #743's ``pass_at_k``. Keys of
the algorithm node this version does not know follow :mod:`.trainer_fields`.
"""

from __future__ import annotations

import copy
import numbers
import warnings
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any, Literal

import numpy as np

from .calling import as_finite_real, describe
from .names import normalize_name
from .state.store import EstimatorState
from .trainer_fields import split_trainer_fields

__all__ = ["AlgorithmConfig", "RolloutCorrectionConfig", "build_algorithm_config", "refuse_per_role_losses", "rLLMAdvantageEstimator"]


class rLLMAdvantageEstimator(str, Enum):  # noqa: N801 - rLLM's public name
    """The estimators rLLM names; any other string maps to ``OTHER``."""

    GRPO = "grpo"
    REINFORCE = "reinforce"
    REINFORCE_PLUS_PLUS_BASELINE = "reinforce_plus_plus_baseline"
    PRPO = "prpo"
    RLOO = "rloo"
    ECHO = "echo"
    PKPO = "pkpo"  # rLLM PR #743
    MINUS_LENGTH_WEIGHTED_MEAN = "minus_length_weighted_mean"  # rLLM PR #757
    OTHER = "other"

    @classmethod
    def _missing_(cls, value: object) -> rLLMAdvantageEstimator:
        if isinstance(value, str):
            for member in cls:
                if member.value == value.strip().lower():
                    return member
        return cls.OTHER


EstimatorName = rLLMAdvantageEstimator | str

PER_STEP_DEPRECATION = (
    "stepwise_advantage_mode='per_step' is deprecated for outcome-level estimators: their advantages are broadcast "
    "(every step of a trajectory gets the trajectory's advantage). For one advantage per step, select a step-level "
    "estimator (e.g. 'gigpo'; `rllm-plugins estimators` shows each one's level)."
)
USE_RLLM_DEPRECATION = (
    "`algorithm.use_rllm` is deprecated and ignored — advantages are always computed via the rLLM-native path. Remove the field from your config."
)
_FLAGS = ("norm_adv_by_std_in_grpo", "use_precomputed_advantage")
_CHOICES: dict[str, tuple[Any, ...]] = {
    "lr_schedule": ("linear", "cosine", "constant"),
    "mu_source": ("inference", "proximal"),
    "loss_agg_mode": ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", None),
    "router_replay": ("disabled", "R2", "R3"),
}


def _as_estimator(name: EstimatorName, where: str) -> EstimatorName:
    """Known names become the enum member; custom (registered) names stay strings, never ``OTHER``."""
    if not isinstance(name, (str, Enum)):
        raise ValueError(f"{where} must be an estimator name (a str or rLLMAdvantageEstimator), got {type(name).__name__} {name!r}")
    key = normalize_name(name)
    return rLLMAdvantageEstimator(key) if key in _KNOWN else key


_KNOWN = frozenset(m.value for m in rLLMAdvantageEstimator)


@dataclass
class RolloutCorrectionConfig:
    """rLLM main's rollout correction (TIS) settings; stored for rLLM code, not applied by the adapters.

    ``extra`` keeps keys this version does not know as given (a fork's IcePop ``icepop_beta``), said once
    (:mod:`.trainer_fields`): the whole section is the trainer's.
    """

    tis_mode: str | None = None
    bypass_mode: bool | None = None
    tis_cap: float = 5.0
    extra: dict[str, Any] = field(default_factory=dict)


def _split_estimator_map(estimator_map: Mapping[Any, Any], loss_fn_map: Mapping[Any, Any]) -> tuple[dict[str, EstimatorName], dict[str, str]]:
    """``{role: name | (name, loss_fn)}`` -> (``{role: name}``, ``{role: loss_fn}`` merged into ``loss_fn_map``)."""
    names: dict[str, EstimatorName] = {}
    losses = {str(role): loss for role, loss in dict(loss_fn_map).items()}
    for role, value in dict(estimator_map).items():
        role = str(role)
        if isinstance(value, (tuple, list)):  # a list is the pair as it comes from a YAML/JSON config
            if len(value) != 2:
                raise ValueError(f"estimator_map[{role!r}]: a pair must be (estimator, loss_fn), got {len(value)} elements: {value!r}")
            value, loss = value
            if not isinstance(loss, str) or not loss:
                raise ValueError(f"estimator_map[{role!r}]: the loss_fn of the pair must be a non-empty str, got {type(loss).__name__} {loss!r}")
            if losses.get(role, loss) != loss:
                raise ValueError(f"role {role!r}: estimator_map gives loss_fn {loss!r} but loss_fn_map gives {losses[role]!r}; set it in one place")
            losses[role] = loss
        names[role] = _as_estimator(value, f"estimator_map[{role!r}]")
    for role, loss in losses.items():
        if not isinstance(loss, str) or not loss:
            raise ValueError(f"loss_fn_map[{role!r}] must be a non-empty str, got {type(loss).__name__} {loss!r}")
    return names, losses


_MAPPINGS = {
    "estimator_map": "role -> estimator name or (estimator, loss_fn), e.g. {'judge': 'rloo'}",
    "loss_fn_map": "role -> policy loss name",
    "estimator_kwargs": "option name -> value, e.g. {'epsilon': 1e-4}",
    "loss_params": "loss parameter -> value, e.g. {'env_loss_coef': 0.05}",
    "trainer_fields": "field name -> value, for rLLM's trainer",
}


def _check_mappings(config: Any) -> None:
    """``estimator_map``, ``loss_fn_map`` and ``estimator_kwargs`` must be mappings (None or a str is no empty one)."""
    for name, form in _MAPPINGS.items():
        value = getattr(config, name)
        if not isinstance(value, Mapping):
            fix = "; leave it out (or give {}) for none" if value is None else ""
            raise ValueError(f"AlgorithmConfig.{name} must be a mapping of {form}, got {type(value).__name__} {value!r}{fix}")


@dataclass
class AlgorithmConfig:
    """Configuration of rLLM-native advantage computation (rLLM main's fields, plus ``estimator_kwargs``).

    ``estimator`` is the default for every role; ``estimator_map`` maps a group role
    (``TrajectoryGroup.group_role``) to another estimator, or to an ``(estimator, loss_fn)``
    pair whose loss goes into ``loss_fn_map``. Either may name a registered custom or plugin
    estimator. ``estimator_kwargs`` are passed to every estimator call. The loss and optimiser
    fields (``loss_fn``, ``loss_fn_map``, ``kl_beta``, ``eps_clip``, ...) are stored for rLLM code
    that reads them; the verl and TRL adapters train with their framework's own settings.
    ``use_rllm`` is deprecated (rLLM main): setting it warns, and it changes nothing.
    ``loss_params`` (rLLM ``terminal-rl``) is kept as given; its ``env_loss_coef`` is ``echo``'s
    coefficient as well as the older ``env_loss_coef`` field (they must agree when both are set).
    ``pass_at_k`` (rLLM PR #743) is ``pkpo``'s ``k`` unless ``estimator_kwargs`` gives one.
    ``trainer_fields`` holds algorithm-node keys this version does not know, for rLLM's trainer
    (see :mod:`rllm_plugins.trainer_fields`). ``advantage_transforms`` lists transforms applied in order to
    each role's advantages after its estimator (:mod:`rllm_plugins.transforms`), checked here. ``reward_shapers`` lists
    reward shapers whose additive terms the estimator sees on each unit's reward (:mod:`rllm_plugins.shaping`), checked here.
    ``stepwise_advantage_mode`` changes no number: an estimator's level decides (outcome-level:
    broadcast; step-level: one advantage per step). ``"per_step"`` with an outcome-level estimator
    warns (``DeprecationWarning``) when advantages are collected.

    Trajectories may carry several named rewards in ``Trajectory.metadata["rewards"]`` (a mapping
    name -> number or None); ``multi_objective_aggregation`` then combines them, with
    ``reward_weights`` (name -> weight, default 1): ``"sum_then_normalize"`` runs the estimator on
    the weighted sum, ``"normalize_then_sum"`` (GDPO) on each reward, sums the weighted
    advantages and whitens them over the role (see :mod:`rllm_plugins.aggregation`).

    The config also keeps the state of its stateful estimators (``rae``'s running baselines; see
    :mod:`rllm_plugins.state`), one per estimator and role: calls with the same config continue it, a
    fresh config starts from nothing. ``state_dict()`` / ``load_state_dict()`` save and restore it.
    """

    use_rllm: bool | None = None
    estimator: EstimatorName = rLLMAdvantageEstimator.GRPO
    estimator_map: dict[str, Any] = field(default_factory=dict)
    loss_fn_map: dict[str, str] = field(default_factory=dict)
    stepwise_advantage_mode: Literal["broadcast", "per_step"] = "broadcast"
    norm_adv_by_std_in_grpo: bool = True
    use_precomputed_advantage: bool = False
    loss_fn: str | None = None
    env_loss_coef: float | None = None
    aux_losses: list[Any] = field(default_factory=list)
    losses: list[Any] = field(default_factory=list)
    loss_plugins: list[Any] = field(default_factory=list)
    mu_source: Literal["inference", "proximal"] = "inference"
    lr_schedule: Literal["linear", "cosine", "constant"] = "constant"
    warmup_steps: int = -1
    warmup_steps_ratio: float = 0.0
    kl_beta: float = 0.0
    eps_clip: float = 0.2
    eps_clip_high: float | None = None
    loss_agg_mode: Literal["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean"] | None = None
    rollout_correction: RolloutCorrectionConfig = field(default_factory=RolloutCorrectionConfig)
    router_replay: Literal["disabled", "R2", "R3"] = "disabled"
    estimator_kwargs: dict[str, Any] = field(default_factory=dict)
    multi_objective_aggregation: Literal["sum_then_normalize", "normalize_then_sum"] = "sum_then_normalize"
    reward_weights: dict[str, float] = field(default_factory=dict)
    loss_params: dict[str, Any] = field(default_factory=dict)
    pass_at_k: int | None = None
    trainer_fields: dict[str, Any] = field(default_factory=dict)
    advantage_transforms: list[Any] = field(default_factory=list)
    reward_shapers: list[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.use_rllm is not None:
            warnings.warn(USE_RLLM_DEPRECATION, DeprecationWarning, stacklevel=3)
        if self.stepwise_advantage_mode not in ("broadcast", "per_step"):
            raise ValueError(f"stepwise_advantage_mode must be 'broadcast' or 'per_step', got {self.stepwise_advantage_mode!r}")
        for name in _FLAGS:  # a str such as "false" is truthy: it would silently mean True
            value = getattr(self, name)
            if not isinstance(value, (bool, np.bool_)):
                raise ValueError(f"AlgorithmConfig.{name} must be a bool (True or False), got {type(value).__name__} {value!r}")
            setattr(self, name, bool(value))
        self.estimator = _as_estimator(self.estimator, "AlgorithmConfig.estimator")
        _check_mappings(self)
        self.estimator_map, self.loss_fn_map = _split_estimator_map(self.estimator_map, self.loss_fn_map)
        self.estimator_kwargs = dict(self.estimator_kwargs)
        self.loss_params, self.trainer_fields = dict(self.loss_params), dict(self.trainer_fields)
        self.pass_at_k = _check_pass_at_k(self.pass_at_k, self.estimator_kwargs)
        for name, choices in _CHOICES.items():
            if getattr(self, name) not in choices:
                raise ValueError(f"AlgorithmConfig.{name} must be one of {list(choices)}, got {getattr(self, name)!r}")
        if isinstance(self.rollout_correction, Mapping) or hasattr(self.rollout_correction, "keys"):
            self.rollout_correction = _rollout_correction(self.rollout_correction, default_cap=5.0)
        self.env_loss_coef = _env_loss_coef(self.env_loss_coef, self.loss_params, self.estimator)
        from .aggregation import check_aggregation  # aggregation is only needed with several rewards

        check_aggregation(self.multi_objective_aggregation, "AlgorithmConfig.multi_objective_aggregation")
        if not isinstance(self.reward_weights, Mapping):
            got = f"{type(self.reward_weights).__name__} {self.reward_weights!r}"
            raise ValueError(f"AlgorithmConfig.reward_weights must map reward names to weights, got {got}")
        for name, weight in self.reward_weights.items():
            if not isinstance(name, str) or isinstance(weight, (bool, np.bool_)) or as_finite_real(weight) is None:
                raise ValueError(f"AlgorithmConfig.reward_weights[{name!r}] must be a finite number keyed by a reward name, got {describe(weight)}")
        self.reward_weights = {name: float(weight) for name, weight in self.reward_weights.items()}
        self.advantage_transforms = [] if self.advantage_transforms is None else self.advantage_transforms
        self.reward_shapers = [] if self.reward_shapers is None else self.reward_shapers
        _ = self.transforms, self.shapers  # names, options and option values checked now, not at the first step

    def _resolved(self, field_name: str, resolve: Any) -> tuple[Any, ...]:
        """``field_name``'s list resolved by ``resolve``, kept while the list is the same (a list assigned later is resolved then)."""
        entries = getattr(self, field_name)
        kept = self.__dict__.get(f"_{field_name}_resolved")
        if kept is None or kept[0] != repr(entries):
            kept = (repr(entries), resolve(entries) if entries else ())
            self.__dict__[f"_{field_name}_resolved"] = kept
        return kept[1]

    @property
    def shapers(self) -> tuple[Any, ...]:
        """``reward_shapers`` resolved (:class:`~rllm_plugins.shaping.SelectedShaper` objects, in order)."""
        return self._resolved("reward_shapers", _resolve_shapers)

    @property
    def transforms(self) -> tuple[Any, ...]:
        """``advantage_transforms`` resolved (:class:`~rllm_plugins.transforms.SelectedTransform` objects, in order)."""
        return self._resolved("advantage_transforms", _resolve_transforms)

    @property
    def estimator_state(self) -> EstimatorState:
        """The states of this config's stateful estimators (kept across collector calls)."""
        if "_estimator_state" not in self.__dict__:  # built without __post_init__ (copy.copy keeps it shared)
            self.__dict__["_estimator_state"] = EstimatorState()
        return self.__dict__["_estimator_state"]

    def state_dict(self) -> dict[str, Any]:
        """The stateful estimators' states, JSON-serialisable (see :meth:`EstimatorState.state_dict`)."""
        return self.estimator_state.state_dict()

    def load_state_dict(self, state_dict: Mapping[str, Any], *, accept_changed_options: Collection[str] = ()) -> None:
        """Restore what :meth:`state_dict` returned; the next collector call continues from it.

        That call raises ``ValueError`` before any estimator runs when a stateful estimator's options differ
        from those its saved state was made with (naming the option and both values), unless the option is
        named in ``accept_changed_options`` (``"*"``: any).
        """
        self.estimator_state.load_state_dict(state_dict, accept_changed_options=accept_changed_options)

    def estimator_name(self, role: str) -> str:
        """Registry name of the estimator ``role`` uses."""
        return normalize_name(self.estimator_map.get(role, self.estimator))

    @classmethod
    def from_config(cls, config: Any, *, stepwise_advantage_mode: str | None = None, estimator_map: Mapping[str, Any] | None = None) -> AlgorithmConfig:
        """Build from an OmegaConf ``DictConfig`` or a plain nested mapping, in either rLLM generation's call.

        - rLLM main: ``from_config(cfg.rllm.algorithm, stepwise_advantage_mode=..., estimator_map=...)``,
          the algorithm node itself (``adv_estimator``, ``norm_adv_by_std_in_grpo``, ``loss_fn``, ...).
        - spec era: ``from_config(cfg)``, the whole config (recognised by its ``rllm`` or ``algorithm``
          section): ``algorithm.adv_estimator`` and/or ``rllm.algorithm.adv_estimator`` (must agree),
          ``rllm.stepwise_advantage.{mode, norm_adv_by_std_in_grpo, use_rllm}`` and the ``rllm.algorithm``
          node as above (``rllm.algorithm.norm_adv_by_std_in_grpo`` and the stepwise one must agree when
          both are set; verl's ``algorithm.norm_adv_by_std_in_grpo`` is the fallback).

        The algorithm node may also hold ``estimator_map``, ``estimator_kwargs``, ``multi_objective_aggregation``
        and ``reward_weights``. A key of it that ``AlgorithmConfig`` does not know is rLLM's trainer's: kept in
        ``trainer_fields`` and said once; a near miss of a key the estimator reads raises ``ValueError`` with the
        closest one (:mod:`rllm_plugins.trainer_fields`).
        """
        whole = _get(config, "rllm", plain=False) is not None or _is_mapping(_get(config, "algorithm", plain=False))
        node = _get(config, "rllm.algorithm") if whole else config
        values = _read_algorithm_node(_plain(node) if node is not None else {}, "rllm.algorithm" if whole else "the algorithm config")
        if whole:
            values.update(_read_spec_era(config, values))
        if estimator_map:
            values["estimator_map"] = _merge_maps(values.get("estimator_map", {}), _plain(estimator_map))
        if stepwise_advantage_mode is not None:
            configured = values.get("stepwise_advantage_mode")
            if configured is not None and configured != stepwise_advantage_mode:
                raise ValueError(f"stepwise_advantage_mode={stepwise_advantage_mode!r} but the config says {configured!r}")
            values["stepwise_advantage_mode"] = stepwise_advantage_mode
        return cls(**values)


# key of rLLM's algorithm node -> (AlgorithmConfig field, default when read from a config)
_NODE_KEYS: dict[str, tuple[str, Any]] = {
    "adv_estimator": ("estimator", rLLMAdvantageEstimator.GRPO),
    "norm_adv_by_std_in_grpo": ("norm_adv_by_std_in_grpo", True),
    "use_rllm": ("use_rllm", None),
    "use_precomputed_advantage": ("use_precomputed_advantage", False),
    "loss_fn": ("loss_fn", None),
    "env_loss_coef": ("env_loss_coef", None),
    "aux_losses": ("aux_losses", []),
    "losses": ("losses", []),
    "loss_plugins": ("loss_plugins", []),
    "mu_source": ("mu_source", "inference"),
    "lr_schedule": ("lr_schedule", "constant"),
    "warmup_steps": ("warmup_steps", -1),
    "warmup_steps_ratio": ("warmup_steps_ratio", 0.0),
    "kl_beta": ("kl_beta", 0.0),
    "eps_clip": ("eps_clip", 0.2),
    "eps_clip_high": ("eps_clip_high", None),
    "loss_agg_mode": ("loss_agg_mode", None),
    "router_replay": ("router_replay", "disabled"),
    "estimator_map": ("estimator_map", {}),
    "loss_fn_map": ("loss_fn_map", {}),
    "estimator_kwargs": ("estimator_kwargs", {}),
    "multi_objective_aggregation": ("multi_objective_aggregation", "sum_then_normalize"),
    "reward_weights": ("reward_weights", {}),
    "loss_params": ("loss_params", {}),
    "pass_at_k": ("pass_at_k", None),
    "advantage_transforms": ("advantage_transforms", []),
    "reward_shapers": ("reward_shapers", []),
}
_ROLLOUT_CORRECTION_KEYS = tuple(f.name for f in fields(RolloutCorrectionConfig))


def _read_algorithm_node(node: Mapping[str, Any], where: str) -> dict[str, Any]:
    """AlgorithmConfig keyword arguments from rLLM's algorithm node (plain mapping); unknown keys: :func:`split_trainer_fields`."""
    if not isinstance(node, Mapping):
        raise ValueError(f"{where} must be a mapping, got {type(node).__name__} {node!r}")
    trainer_fields = split_trainer_fields(node, [*_NODE_KEYS, "rollout_correction", "stepwise_advantage_mode"], where)
    values = {name: copy.copy(default) if node.get(key) is None else node[key] for key, (name, default) in _NODE_KEYS.items()}
    if node.get("stepwise_advantage_mode") is not None:  # the field itself (rLLM's configs set it in rllm.stepwise_advantage.mode)
        values["stepwise_advantage_mode"] = node["stepwise_advantage_mode"]
    values["rollout_correction"] = _rollout_correction(node.get("rollout_correction") or {}, default_cap=2.0, where=f"{where}.rollout_correction")
    values["trainer_fields"] = trainer_fields
    return values


def _rollout_correction(section: Any, *, default_cap: float, where: str = "rollout_correction") -> RolloutCorrectionConfig:
    """A rollout_correction mapping -> :class:`RolloutCorrectionConfig` (rLLM's from_config default cap is 2.0)."""
    section = _plain(section)
    if not isinstance(section, Mapping):
        raise ValueError(f"{where} must be a mapping of {list(_ROLLOUT_CORRECTION_KEYS)}, got {type(section).__name__} {section!r}")
    extra = dict(_plain(section.get("extra") or {}))
    extra.update(split_trainer_fields(section, _ROLLOUT_CORRECTION_KEYS, where, estimator_keys=()))
    cap = section.get("tis_cap")
    return RolloutCorrectionConfig(section.get("tis_mode"), section.get("bypass_mode"), default_cap if cap is None else cap, extra)


def _check_pass_at_k(pass_at_k: Any, estimator_kwargs: Mapping[str, Any]) -> int | None:
    """``pass_at_k`` (rLLM PR #743): None or an int >= 1, agreeing with ``estimator_kwargs['k']`` when both are set."""
    if pass_at_k is None:
        return None
    if isinstance(pass_at_k, (bool, np.bool_)) or not isinstance(pass_at_k, numbers.Integral) or pass_at_k < 1:
        raise ValueError(f"AlgorithmConfig.pass_at_k must be an int >= 1 (the k of pass@k), got {type(pass_at_k).__name__} {pass_at_k!r}")
    if "k" in estimator_kwargs and estimator_kwargs["k"] != pass_at_k:
        raise ValueError(f"AlgorithmConfig.pass_at_k={pass_at_k!r} but estimator_kwargs['k']={estimator_kwargs['k']!r}; set k in one place")
    return int(pass_at_k)


def _env_loss_coef(coef: Any, loss_params: Mapping[str, Any], estimator: EstimatorName) -> float:
    """ECHO's coefficient: ``env_loss_coef`` (rLLM main) or ``loss_params.env_loss_coef`` (``terminal-rl``); 0.05 for ``echo``, else 0."""
    in_params = loss_params.get("env_loss_coef")
    if coef is not None and in_params is not None and coef != in_params:
        raise ValueError(
            f"AlgorithmConfig.env_loss_coef={coef!r} but loss_params['env_loss_coef']={in_params!r}; "
            "set it in one place (rLLM's terminal-rl branch reads loss_params.env_loss_coef)"
        )
    chosen = coef if coef is not None else in_params
    if chosen is None:  # rLLM: 0.05 for its `echo` estimator, else off
        return 0.05 if normalize_name(estimator) == "echo" else 0.0
    if isinstance(chosen, (bool, np.bool_)) or as_finite_real(chosen) is None:
        raise ValueError(f"ECHO's env_loss_coef must be a finite number, got {describe(chosen)}")
    return float(chosen)


def _read_spec_era(config: Any, node_values: dict[str, Any]) -> dict[str, Any]:
    """The whole-config keys outside ``rllm.algorithm``: estimator name, stepwise section, verl's fallback."""
    out: dict[str, Any] = {}
    verl_name, rllm_name = _get(config, "algorithm.adv_estimator"), _get(config, "rllm.algorithm.adv_estimator")
    if verl_name is not None and rllm_name is not None and normalize_name(verl_name) != normalize_name(rllm_name):
        raise ValueError(f"algorithm.adv_estimator={verl_name!r} and rllm.algorithm.adv_estimator={rllm_name!r} disagree; set one, or the same in both")
    if verl_name is not None:
        out["estimator"] = verl_name
    stepwise = "rllm.stepwise_advantage"
    in_section, in_node = _get(config, f"{stepwise}.mode"), node_values.get("stepwise_advantage_mode")
    if in_section is not None and in_node is not None and in_section != in_node:
        raise ValueError(
            f"rllm.algorithm.stepwise_advantage_mode={in_node!r} and {stepwise}.mode={in_section!r} disagree; "
            f"set it in {stepwise}.mode (where rLLM's base config has it), or the same value in both"
        )
    out["stepwise_advantage_mode"] = next((mode for mode in (in_node, in_section) if mode is not None), "broadcast")
    in_stepwise, in_algorithm = _get(config, f"{stepwise}.norm_adv_by_std_in_grpo"), _get(config, "rllm.algorithm.norm_adv_by_std_in_grpo")
    if in_stepwise is not None and in_algorithm is not None and in_stepwise != in_algorithm:
        raise ValueError(
            f"rllm.algorithm.norm_adv_by_std_in_grpo={in_algorithm!r} and {stepwise}.norm_adv_by_std_in_grpo={in_stepwise!r} disagree; "
            "set it in rllm.algorithm (where rLLM's base config has it), or the same value in both"
        )
    chosen = in_algorithm if in_algorithm is not None else in_stepwise
    out["norm_adv_by_std_in_grpo"] = chosen if chosen is not None else _get(config, "algorithm.norm_adv_by_std_in_grpo", True)
    if node_values["use_rllm"] is None:
        out["use_rllm"] = _get(config, f"{stepwise}.use_rllm")
    return out


def _merge_maps(configured: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(configured)
    for role, value in given.items():
        if role in merged and _plain(merged[role]) != _plain(value):
            raise ValueError(f"estimator_map[{role!r}]: the config gives {merged[role]!r}, the argument {value!r}; set it in one place")
        merged[role] = value
    return merged


def build_algorithm_config(config: Any, traj_group_adv_estimator_map: Mapping[str, Any] | None = None) -> AlgorithmConfig:
    """rLLM's UnifiedTrainer wiring: the ``AlgorithmConfig`` of a trainer given ``config`` and a per-role map.

    ``config`` is the trainer's whole config (``config.rllm.*``) or rLLM main's algorithm node;
    ``traj_group_adv_estimator_map`` (``{role: name}`` or ``{role: (name, loss_fn)}``) becomes
    ``estimator_map``. rLLM's check is kept where it still means something: a map with
    ``use_rllm`` explicitly false (``rllm.algorithm.use_rllm`` or ``rllm.stepwise_advantage.use_rllm``)
    raises ``ValueError``; with ``use_rllm`` unset the map is used (rLLM main dropped the flag).
    """
    estimator_map = dict(_plain(traj_group_adv_estimator_map) or {})
    if estimator_map:
        flags = {path: _get(config, path) for path in ("rllm.algorithm.use_rllm", "rllm.stepwise_advantage.use_rllm", "use_rllm")}
        off = [path for path, value in flags.items() if value is False]
        if off:
            raise ValueError(
                f"traj_group_adv_estimator_map is given but {off[0]} is false: the map only applies to rLLM-native advantages. "
                f"Remove {off[0]} (deprecated and ignored in rLLM main) or set it to true"
            )
    return AlgorithmConfig.from_config(config, estimator_map=estimator_map)


def _is_mapping(node: Any) -> bool:
    return node is not None and not isinstance(node, str) and (isinstance(node, Mapping) or (hasattr(node, "items") and hasattr(node, "keys")))


def _get(config: Any, path: str, default: Any = None, *, plain: bool = True) -> Any:
    """``config[a][b]...`` for ``path = "a.b..."`` (mappings, DictConfig or attributes), else ``default``.

    ``plain=False`` returns the node as it is: nothing under it is read (a ``???`` or an
    interpolation elsewhere in a section is not resolved just to see that the section exists).
    """
    node = config
    for key in path.split("."):
        if node is None or isinstance(node, (str, bytes, int, float, bool)):
            return default
        node = node.get(key) if isinstance(node, Mapping) or hasattr(node, "get") else getattr(node, key, None)
    if node is None:
        return default
    return _plain(node) if plain else node


def _plain(node: Any) -> Any:
    """DictConfig/ListConfig (or any mapping) -> plain dicts and lists, without importing omegaconf."""
    if isinstance(node, str):
        return node
    if isinstance(node, Mapping) or (hasattr(node, "items") and hasattr(node, "keys")):
        return {k: _plain(v) for k, v in node.items()}
    if isinstance(node, list) or type(node).__name__ == "ListConfig":
        return [_plain(v) for v in node]
    if isinstance(node, tuple):
        return tuple(_plain(v) for v in node)
    return node


_transform_resolver: list[Any] = []  # [resolve_transforms], set by rllm_plugins.transforms.entries (above this module: not imported here)


def set_transform_resolver(resolve: Any) -> None:
    """Called once by :mod:`rllm_plugins.transforms.entries`: how ``advantage_transforms`` is resolved and checked."""
    _transform_resolver[:] = [resolve]


_shaper_resolver: list[Any] = []  # [resolve_shapers], set by rllm_plugins.shaping.entries (above this module: not imported here)


def set_shaper_resolver(resolve: Any) -> None:
    """Called once by :mod:`rllm_plugins.shaping.entries`: how ``reward_shapers`` is resolved and checked."""
    _shaper_resolver[:] = [resolve]


def _resolve_shapers(entries: Any) -> tuple[Any, ...]:
    if not _shaper_resolver:  # importing rllm_plugins (any submodule) imports the shapers first
        raise RuntimeError("rllm_plugins.shaping is not imported; import rllm_plugins")
    return tuple(_shaper_resolver[0](entries, "AlgorithmConfig.reward_shapers"))


def _resolve_transforms(entries: Any) -> tuple[Any, ...]:
    if not _transform_resolver:  # importing rllm_plugins (any submodule) imports the transforms first
        raise RuntimeError("rllm_plugins.transforms is not imported; import rllm_plugins")
    return tuple(_transform_resolver[0](entries, "AlgorithmConfig.advantage_transforms"))


def refuse_per_role_losses(config: AlgorithmConfig, framework: str, one_loss: str, fix: str = "") -> AlgorithmConfig:
    """``config``, or ``ValueError`` if it asks for a per-role policy loss (``loss_fn_map``), which ``framework``
    cannot apply: ``one_loss`` says which single loss it uses, ``fix`` is appended to the advice."""
    if config.loss_fn_map:
        pairs = ", ".join(f"{role!r}: ({config.estimator_name(role)!r}, {loss!r})" for role, loss in config.loss_fn_map.items())
        raise ValueError(
            f"per-role policy losses ({pairs}) are not applied with {framework}: {one_loss} "
            f"(rLLM applies a per-role loss only in its own backends). Give the estimator name alone, e.g. {{'judge': 'rloo'}}{fix}"
        )
    return config
