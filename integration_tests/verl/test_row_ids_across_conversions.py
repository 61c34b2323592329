"""Row ids of two ``dataproto_to_groups`` conversions never meet; uids are ids, NaN is none.

Before, every conversion numbered its rows 0..n-1: the groups of one batch wrote their advantages
onto another batch of the same size without a word, and two converted batches concatenated got
the second batch's advantages on the first batch's rows.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("verl")
from rllm_verl import apply_advantages, dataproto_to_groups
from verl import DataProto

from rllm_plugins import AlgorithmConfig, collect_reward_and_advantage_from_trajectory_groups

from .conftest import make_batch

RLOO = AlgorithmConfig(estimator="rloo")


def _converted(rewards, uids):
    data = make_batch(rewards, [1] * len(rewards), uids)
    groups = dataproto_to_groups(data)
    collect_reward_and_advantage_from_trajectory_groups(groups, RLOO)
    return data, groups


def _row_advantages(data: DataProto) -> list[float]:
    return data.batch["advantages"].sum(dim=-1).tolist()  # one response token per row


def test_two_converted_batches_concatenated_keep_their_own_advantages():
    a, groups_a = _converted([1.0, 0.0], ["p", "p"])
    b, groups_b = _converted([0.7, 0.1], ["q", "q"])
    both = DataProto.concat([a, b])
    apply_advantages(both, groups_a + groups_b)
    # rloo by hand: r_i minus the other reward of the pair
    np.testing.assert_allclose(_row_advantages(both), [1.0, -1.0, 0.6, -0.6], atol=1e-6)


def test_the_groups_of_another_batch_are_refused():
    _, groups_a = _converted([1.0, 0.0], ["p", "p"])
    b, _ = _converted([0.7, 0.1], ["q", "q"])
    with pytest.raises(ValueError, match=r"row 0 \(row id \d+\) has no step in the groups"):
        apply_advantages(b, groups_a)


def test_a_concatenation_of_converted_batches_converts_again_with_its_ids():
    a, _ = _converted([1.0, 0.0], ["p", "p"])
    b, _ = _converted([0.7, 0.1], ["q", "q"])
    both = DataProto.concat([a, b])
    groups = dataproto_to_groups(both)
    collect_reward_and_advantage_from_trajectory_groups(groups, RLOO)
    apply_advantages(both, groups)
    np.testing.assert_allclose(_row_advantages(both), [1.0, -1.0, 0.6, -0.6], atol=1e-6)


def test_steps_sharing_a_row_id_are_refused():
    data, groups = _converted([1.0, 0.0], ["p", "p"])
    twice = groups + groups
    with pytest.raises(ValueError, match=r"group 1 \('p'\), trajectory 0, step 0: row id \d+ belongs to two steps of the groups"):
        apply_advantages(data, twice)


NAN_UIDS = {
    "float-array": lambda: np.array([np.nan, np.nan, 1.0, 1.0]),
    "distinct-nan-objects": lambda: np.array([float("nan"), float("nan"), 1.0, 1.0], dtype=object),
    "one-nan-object": lambda: np.array([np.nan, np.nan, 1.0, 1.0], dtype=object),
    "reordered": lambda: np.array([1.0, float("nan"), 1.0, float("nan")], dtype=object),
}


@pytest.mark.parametrize("uids", NAN_UIDS.values(), ids=NAN_UIDS.keys())
def test_a_nan_uid_is_refused_by_dataproto_to_groups(uids):
    # before: a float column made every NaN row a group of one (rloo gave those rows their raw reward)
    data = make_batch([1.0, 0.0, 0.7, 0.1], [1] * 4, ["x"] * 4)
    data.non_tensor_batch["uid"] = uids()
    row = 1 if np.asarray(uids())[0] == 1.0 else 0
    with pytest.raises(ValueError) as error:
        dataproto_to_groups(data)
    assert str(error.value) == f"row {row}: uid is nan, which equals no other id (NaN); give every row a real id"


@pytest.mark.parametrize("uids", NAN_UIDS.values(), ids=NAN_UIDS.keys())
def test_a_nan_uid_is_refused_by_the_verl_estimator(uids):
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    data = make_batch([1.0, 0.0, 0.7, 0.1], [1] * 4, ["x"] * 4)
    row = 1 if np.asarray(uids())[0] == 1.0 else 0
    with pytest.raises(ValueError) as error:
        get_adv_estimator_fn("rllm_rloo")(
            token_level_rewards=data.batch["token_level_rewards"], response_mask=data.batch["response_mask"], index=uids(), config=None
        )
    assert str(error.value) == f"advantage estimator 'rllm_rloo': row {row} has uid nan, which equals no other id (NaN); give every row a real uid"


def test_an_rllm_main_style_estimator_runs_as_rllm_name_in_verl():
    # rLLM main's signature fn(rewards, algorithm_config, **kwargs); before: TypeError, no algorithm_config
    from rllm_verl.registration import register_estimators_into_verl
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    from rllm_plugins import register_adv_estimator, unregister_rllm_adv_estimator

    @register_adv_estimator("h_verl_main_style")
    def estimator(rewards, algorithm_config, **kwargs):
        out = [r - r.mean() if not algorithm_config.norm_adv_by_std_in_grpo else (r - r.mean()) / (r.std() + 1e-6) for r in rewards]
        return out, out

    try:
        register_estimators_into_verl()
        data = make_batch([1.0, 0.0, 0.5, 0.25], [1] * 4, ["p", "p", "q", "q"])
        from omegaconf import OmegaConf

        config = OmegaConf.create({"norm_adv_by_std_in_grpo": False})
        advantages, _ = get_adv_estimator_fn("rllm_h_verl_main_style")(
            token_level_rewards=data.batch["token_level_rewards"], response_mask=data.batch["response_mask"], index=data.non_tensor_batch["uid"], config=config
        )
    finally:
        unregister_rllm_adv_estimator("h_verl_main_style")
    np.testing.assert_allclose(advantages.sum(dim=-1).numpy(), [0.5, -0.5, 0.125, -0.125], atol=1e-6)


@pytest.mark.parametrize("kind", ["lists", "arrays"])
def test_padding_is_detected_through_object_columns_of_lists_and_arrays(kind):
    from verl.protocol import pad_dataproto_to_divisor

    data = make_batch([1.0, 0.0, 0.5, 0.25, 0.3, 0.1], [1] * 6, ["p", "p", "q", "q", "r", "r"])
    ids = [[1, 2], [1, 2, 3], [4], [5, 6], [7], [8]]
    column = np.empty(6, dtype=object)
    column[:] = [np.array(i) for i in ids] if kind == "arrays" else ids
    data.non_tensor_batch["raw_prompt_ids"] = column
    padded, pad_size = pad_dataproto_to_divisor(data, 4)
    with pytest.raises(ValueError, match=r"^rows 6\.\.7 repeat rows 0\.\.1 in every column"):
        dataproto_to_groups(padded)
    groups = dataproto_to_groups(padded, pad_size=pad_size)
    assert [len(g.trajectories) for g in groups] == [2, 2, 2]
    # real rows equal in every tensor but one list column are not padding
    real = make_batch([1.0, 0.0, 1.0], [1] * 3, ["p", "q", "p"])
    column = np.empty(3, dtype=object)
    column[:] = [np.array([1]), np.array([2]), np.array([1, 9])] if kind == "arrays" else [[1], [2], [1, 9]]
    real.non_tensor_batch["raw_prompt_ids"] = column
    assert [len(g.trajectories) for g in dataproto_to_groups(real)] == [2, 1]
