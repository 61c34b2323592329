"""Hook specifications of the ``rllm_plugins`` project (pluggy): estimators, advantage transforms and reward shapers.

A plugin is any object (usually a module) with ``@hookimpl``-marked functions named after
these specs; publish it under the entry-point group ``rllm_plugins``.
"""

from __future__ import annotations

from collections.abc import Iterable

import pluggy

from ..shaper_spec import ShaperSpec
from ..spec import AdvEstimatorSpec
from ..transform_spec import TransformSpec

PROJECT = "rllm_plugins"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def rllm_adv_estimators() -> Iterable[AdvEstimatorSpec]:  # type: ignore[empty-body]
    """Return (or yield) the advantage estimators this plugin contributes.

    :return: :class:`~rllm_plugins.AdvEstimatorSpec` objects; each ``name`` (and alias)
        becomes selectable everywhere: ``AlgorithmConfig.estimator``, verl's
        ``algorithm.adv_estimator=rllm_<name>``, TRL's ``adv_estimator=<name>``.
    """


@hookspec
def rllm_advantage_transforms() -> Iterable[TransformSpec]:  # type: ignore[empty-body]
    """Return (or yield) the advantage transforms this plugin contributes.

    :return: :class:`~rllm_plugins.TransformSpec` objects; each ``name`` becomes selectable in
        ``AlgorithmConfig(advantage_transforms=[...])``, verl's ``+algorithm.rllm_advantage_transforms``
        and TRL's ``RLLMGRPOConfig(advantage_transforms=[...])``.
    """


@hookspec
def rllm_reward_shapers() -> Iterable[ShaperSpec]:  # type: ignore[empty-body]
    """Return (or yield) the reward shapers this plugin contributes.

    :return: :class:`~rllm_plugins.ShaperSpec` objects; each ``name`` becomes selectable in
        ``AlgorithmConfig(reward_shapers=[...])``, verl's ``+algorithm.rllm_reward_shapers``
        and TRL's ``RLLMGRPOConfig(reward_shapers=[...])``.
    """
