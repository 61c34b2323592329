"""``RLLMGRPOConfig``: TRL's ``GRPOConfig`` plus the rLLM estimator settings."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, ClassVar

from trl import GRPOConfig

from rllm_plugins.estimators import check_group_size
from rllm_plugins.registry import get_estimator
from rllm_plugins.spec import normalize_name

__all__ = ["RLLMGRPOConfig"]


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
            "`reinforce_plus_plus_baseline`, `prpo`, `opo`, `grpo_passk`, `trl_grpo`, `trl_grpo_batch`, `dr_grpo`, `maxrl`, "
            "`passk_training`, `gpg`, `verl_grpo`, `verl_rloo_vectorized`, `verl_reinforce_plus_plus_baseline`) or one from an "
            "installed `rllm_plugins` plugin (`rllm-plugins estimators` lists them). `grpo` is rLLM's GRPO "
            "(population std, eps 1e-6; Shao et al., 2024); `trl_grpo` is TRL's own (sample std, eps 1e-4)."
        },
    )
    norm_adv_by_std_in_grpo: bool = field(
        default=True,
        metadata={
            "help": "Divide by the group standard deviation in std-normalising estimators (`grpo`, `prpo`, `trl_grpo`, "
            "...). `False` gives the Dr. GRPO advantage `r - mean` (Liu et al., 2025), which avoids the question-level "
            "difficulty bias of std scaling."
        },
    )
    adv_estimator_kwargs: dict[str, Any] | str | None = field(
        default=None,
        metadata={"help": 'Extra keyword arguments for every estimator call, e.g. `{"epsilon": 1e-4}` (a dict, or a JSON string on the command line).'},
    )
    adv_estimator_map: dict[str, str] | str | None = field(
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
        self.adv_estimator_kwargs = self._as_dict("adv_estimator_kwargs")
        self.adv_estimator_map = {str(role): name for role, name in self._as_dict("adv_estimator_map").items()}
        self.adv_estimator = self._check_estimator(self.adv_estimator, "adv_estimator")
        for role, name in self.adv_estimator_map.items():
            self.adv_estimator_map[role] = self._check_estimator(name, f"adv_estimator_map[{role!r}]")
        for where, name in [("adv_estimator", self.adv_estimator), *((f"adv_estimator_map[{r!r}]", n) for r, n in self.adv_estimator_map.items())]:
            if self.num_generations is not None:  # a group is one prompt's num_generations completions
                try:
                    check_group_size(get_estimator(name).spec, self.adv_estimator_kwargs, self.num_generations)
                except ValueError as e:
                    raise ValueError(f"{where} with num_generations={self.num_generations}: {e}") from None
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
