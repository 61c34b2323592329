"""Which unknown keys of rLLM's algorithm node stop a run, and which are kept for rLLM's trainer.

rLLM adds fields to ``rllm.algorithm`` with most releases (``loss_params`` on its ``terminal-rl`` branch,
``loss_plugins`` on main), and forks add more (IcePop's ``rollout_correction.icepop_*``), nearly all read only by a
trainer (losses, schedules, rollout correction). The rule, so that such a field never stops a run
while a typo never trains with a default:

- a key close to a key the estimator path reads (:data:`ESTIMATOR_PATH_KEYS`: ``estimator_kwarg``,
  ``estimator_maps``, ``norm_adv_by_std_in_gpro``) is a ``ValueError`` naming the closest one;
- a key of verl's own ``algorithm`` section (``gamma``, ``lam``, ...) is a ``ValueError``: verl's
  section was passed where rLLM's node belongs;
- any other key is the trainer's: kept as given (``AlgorithmConfig.trainer_fields``,
  ``RolloutCorrectionConfig.extra``) and said once per process (:class:`TrainerFieldWarning`).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["ESTIMATOR_PATH_KEYS", "TrainerFieldWarning", "split_trainer_fields"]

# keys of rLLM's algorithm node that decide advantages: a near miss of one of these is a typo
ESTIMATOR_PATH_KEYS = (
    "adv_estimator",
    "norm_adv_by_std_in_grpo",
    "use_precomputed_advantage",
    "estimator_map",
    "estimator_kwargs",
    "multi_objective_aggregation",
    "reward_weights",
    "pass_at_k",
    "stepwise_advantage_mode",
)
# verl 0.9's `algorithm` section (AlgoConfig) has these and rLLM's node none of them
VERL_ALGORITHM_KEYS = frozenset({"gamma", "lam", "kl_penalty", "kl_ctrl", "use_kl_in_reward", "use_pf_ppo", "pf_ppo", "rollout_is"})
TYPO_CUTOFF = 0.75  # difflib ratio: 'estimator_kwarg', 'estimator_maps' match; 'loss_params', 'kl_approx' do not

_said: set[str] = set()  # where/key already noted in this process


class TrainerFieldWarning(UserWarning):
    """An algorithm-node key this version does not read, kept for rLLM's trainer."""


def split_trainer_fields(node: Mapping[Any, Any], known: Iterable[str], where: str, *, estimator_keys: Iterable[str] = ESTIMATOR_PATH_KEYS) -> dict[str, Any]:
    """The keys of ``node`` outside ``known`` that are the trainer's, as ``{key: value}``; typos raise ``ValueError``.

    ``where`` names the node in messages (``"rllm.algorithm"``); ``estimator_keys`` are the keys a near miss
    of which is refused (none inside ``rollout_correction``, which only the trainer reads).
    """
    known = tuple(known)
    unknown = [key for key in node if key not in known]
    if not unknown:
        return {}
    verl_keys = [key for key in unknown if key in VERL_ALGORITHM_KEYS]
    if verl_keys:
        raise ValueError(
            f"{where}: unknown key(s) {verl_keys}: these are verl's `algorithm` section, not rLLM's algorithm node. "
            f"Pass rLLM's node (cfg.rllm.algorithm) or the whole config; AlgorithmConfig reads: {', '.join(sorted(known))}"
        )
    import difflib  # only for unknown keys: not paid by `import rllm_plugins`

    estimator_keys = tuple(estimator_keys)
    for key in unknown:
        others = [candidate for candidate in estimator_keys if candidate != key]  # a key is never its own near miss
        close = difflib.get_close_matches(str(key), others, n=1, cutoff=TYPO_CUTOFF)
        if close:
            raise ValueError(
                f"{where}: unknown key(s) {[key]}. Did you mean {close[0]!r}? A near miss of a key the advantage "
                f"estimator reads is refused rather than trained with its default. AlgorithmConfig reads: {', '.join(sorted(known))}"
            )
    fresh = [key for key in unknown if f"{where}.{key}" not in _said]
    if fresh:
        _said.update(f"{where}.{key}" for key in fresh)
        warnings.warn(
            f"{where}: {', '.join(map(str, fresh))} not read by rllm-plugins: rLLM's trainer's field(s), kept as given "
            "(AlgorithmConfig.trainer_fields / rollout_correction.extra); no advantage estimator reads them",
            TrainerFieldWarning,
            stacklevel=4,
        )
    return {str(key): node[key] for key in unknown}
