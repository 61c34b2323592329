"""``RLLMGRPOConfig``: TRL's ``GRPOConfig`` plus the rLLM estimator settings."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from trl import GRPOConfig

from rllm_plugins.config import AlgorithmConfig, build_algorithm_config
from rllm_plugins.options import check_estimator_kwargs
from rllm_plugins.registry import get_estimator
from rllm_plugins.spec import normalize_name

__all__ = ["RLLMGRPOConfig", "check_no_per_role_loss"]


def check_no_per_role_loss(config: AlgorithmConfig) -> AlgorithmConfig:
    """Raise ``ValueError`` if ``config`` asks for a per-role policy loss: TRL trains every role with one loss."""
    if config.loss_fn_map:
        pairs = ", ".join(f"{role!r}: ({config.estimator_name(role)!r}, {loss!r})" for role, loss in config.loss_fn_map.items())
        raise ValueError(
            f"per-role policy losses ({pairs}) are not applied with TRL: GRPOTrainer uses GRPOConfig.loss_type for every role "
            "(rLLM applies a per-role loss only in its own backends). Give the estimator name alone, e.g. {'judge': 'rloo'}, "
            "and choose the loss with loss_type"
        )
    return config


@dataclass
class RLLMGRPOConfig(GRPOConfig):
    """``GRPOConfig`` whose advantages come from an rLLM estimator chosen by name.

    The estimator replaces TRL's inline advantage formula, so ``scale_rewards`` and
    ``multi_objective_aggregation`` no longer apply (a warning says so when they are set to
    something other than TRL's defaults); ``adv_estimator="trl_grpo"`` reproduces TRL's
    ``scale_rewards="group"``, ``"trl_grpo_batch"`` its ``"batch"``.
    """

    _VALID_DICT_FIELDS: ClassVar[list[str]] = [*GRPOConfig._VALID_DICT_FIELDS, "adv_estimator_kwargs", "adv_estimator_map"]

    adv_estimator: str = field(
        default="grpo",
        metadata={
            "help": "Name of the rLLM advantage estimator: a built-in (`grpo`, `rloo`, `reinforce`, "
            "`reinforce_plus_plus_baseline`, `prpo`, `prpo_std_optional`, `opo`, `grpo_passk`, `trl_grpo`, `trl_grpo_batch`) or one from an "
            "installed `rllm_plugins` plugin (`rllm-plugins estimators` lists them). `grpo` is rLLM's GRPO "
            "(population std, eps 1e-6; Shao et al., 2024); `trl_grpo` is TRL's own (sample std, eps 1e-4)."
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
        norm = self.norm_adv_by_std_in_grpo
        if not isinstance(norm, (bool, np.bool_)):  # a str "false" is truthy
            raise ValueError(f"norm_adv_by_std_in_grpo must be a bool (True or False), got {type(norm).__name__} {norm!r}")
        self.norm_adv_by_std_in_grpo = bool(norm)
        self.adv_estimator_kwargs = self._as_dict("adv_estimator_kwargs")
        self.adv_estimator_map = {str(role): name for role, name in self._as_dict("adv_estimator_map").items()}
        if any(isinstance(name, (tuple, list)) for name in self.adv_estimator_map.values()):  # rLLM main's (estimator, loss_fn) pairs
            check_no_per_role_loss(AlgorithmConfig(estimator_map=self.adv_estimator_map))
        self.adv_estimator = self._check_estimator(self.adv_estimator, "adv_estimator")
        for role, name in self.adv_estimator_map.items():
            self.adv_estimator_map[role] = self._check_estimator(name, f"adv_estimator_map[{role!r}]")
        check_estimator_kwargs(
            [self.adv_estimator, *self.adv_estimator_map.values()],
            self.adv_estimator_kwargs,
            where="RLLMGRPOConfig.adv_estimator_kwargs",
            norm_field="RLLMGRPOConfig.norm_adv_by_std_in_grpo",
        )
        if self.adv_estimator_map and self.role_column is None:
            raise ValueError("adv_estimator_map is set but role_column is None: set role_column to the dataset column naming each prompt's role")
        ignored = []
        if self.scale_rewards != "group":
            ignored.append(f"scale_rewards={self.scale_rewards!r} (use adv_estimator='trl_grpo_batch' for 'batch', norm_adv_by_std_in_grpo=False for 'none')")
        if self.multi_objective_aggregation != "sum_then_normalize":
            ignored.append(f"multi_objective_aggregation={self.multi_objective_aggregation!r} (rewards are combined as a weighted sum)")
        if ignored:
            warnings.warn(
                f"RLLMGRPOConfig: advantages come from the rLLM estimator {self.adv_estimator!r}, so these settings are ignored: {'; '.join(ignored)}",
                UserWarning,
                stacklevel=3,
            )

    def algorithm_config(self) -> AlgorithmConfig:
        """These settings as rLLM's ``AlgorithmConfig`` (for the object path, ``compute_advantages_via_groups``)."""
        node = {"adv_estimator": self.adv_estimator, "norm_adv_by_std_in_grpo": self.norm_adv_by_std_in_grpo, "estimator_kwargs": self.adv_estimator_kwargs}
        return check_no_per_role_loss(build_algorithm_config(node, self.adv_estimator_map))

    def _as_dict(self, name: str) -> dict[str, Any]:
        value = getattr(self, name)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise ValueError(f"{name} must be a dict (or a JSON object string), got {type(value).__name__}: {value!r}")
        return dict(value)

    @staticmethod
    def _check_estimator(name: Any, where: str) -> str:
        """The registry key of ``name``; an unknown name raises the registry's error, prefixed with ``where``."""
        if not isinstance(name, str):
            raise ValueError(f"{where} must be an estimator name (str), got {type(name).__name__}: {name!r}")
        try:
            get_estimator(name)
        except ValueError as e:
            raise type(e)(f"{where}: {e}") from None
        return normalize_name(name)
