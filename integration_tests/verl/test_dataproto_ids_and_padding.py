"""``dataproto_to_groups``: a uid is an id (never a role), padding rows never join a group, ids are one per row."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

pytest.importorskip("verl")
from rllm_verl import ROW_ID_KEY, apply_advantages, dataproto_to_groups
from verl import DataProto
from verl.protocol import pad_dataproto_to_divisor

from rllm_plugins import AlgorithmConfig, collect_reward_and_advantage_from_trajectory_groups

from .conftest import make_batch


def _advantages(data: DataProto, config: AlgorithmConfig, **kwargs: object) -> np.ndarray:
    groups = dataproto_to_groups(data, **kwargs)
    collect_reward_and_advantage_from_trajectory_groups(groups, config)
    apply_advantages(data, groups)
    return data.batch["advantages"].sum(dim=-1).numpy()  # one response token per row below: the row's advantage


def test_a_uid_with_a_colon_is_not_a_role_and_role_level_estimators_see_the_whole_batch():
    data = make_batch([1.0, 0.0, 0.6, 0.4], [1, 1, 1, 1], ["gsm8k:1", "gsm8k:1", "gsm8k:2", "gsm8k:2"])
    groups = dataproto_to_groups(data)
    assert [g.group_role for g in groups] == ["all_groups", "all_groups"]
    assert [g.group_id for g in groups] == ["gsm8k%3A1", "gsm8k%3A2"]
    got = _advantages(data, AlgorithmConfig(estimator="reinforce_plus_plus_baseline"))
    centred = [0.5, -0.5, 0.1, -0.1]  # reward minus its group's mean, by hand
    std = math.sqrt(sum(c * c for c in centred) / 4)  # whitened over the one role: every row of the batch
    np.testing.assert_allclose(got, [c / (std + 1e-6) for c in centred], rtol=1e-6)
    np.testing.assert_allclose(got, [1.387, -1.387, 0.277, -0.277], atol=1e-3)


def test_with_a_role_column_a_uid_with_a_colon_keeps_the_columns_role():
    data = make_batch([1.0, 0.0], [1, 1], ["a:b", "a:b"])
    data.non_tensor_batch["group_roles"] = np.array(["judge", "judge"], dtype=object)
    [group] = dataproto_to_groups(data)
    assert (group.group_id, group.group_role) == ("a%3Ab:judge", "judge")


def test_a_role_with_a_colon_is_refused():
    data = make_batch([1.0, 0.0], [1, 1], ["t", "t"])
    data.non_tensor_batch["group_roles"] = np.array(["a:b", "a:b"], dtype=object)
    with pytest.raises(ValueError, match=r"row 0: group_roles 'a:b' contains ':'; a role is read up to the next ':'"):
        dataproto_to_groups(data)


def _rloo_batch() -> DataProto:
    return make_batch([1.0, 0.0, 0.5, 0.5, 0.2, 0.2], [1] * 6, ["p", "p", "q", "q", "r", "r"])


def test_a_batch_padded_before_conversion_is_refused_with_how_to_fix():
    padded, pad_size = pad_dataproto_to_divisor(_rloo_batch(), 4)
    assert pad_size == 2
    with pytest.raises(ValueError) as error:
        dataproto_to_groups(padded)
    assert str(error.value) == (
        "rows 6..7 repeat rows 0..1 in every column, as verl.protocol.pad_dataproto_to_divisor pads a batch: padding "
        "copies would join their groups and change every advantage. Convert the batch (dataproto_to_groups) before padding it, "
        "or pass pad_size=<the pad_size verl returned> (pad_size=0 if these rows are real)"
    )
    assert ROW_ID_KEY not in padded.non_tensor_batch


def test_pad_size_keeps_verls_padding_rows_out_of_their_groups_and_copies_their_advantages():
    padded, pad_size = pad_dataproto_to_divisor(_rloo_batch(), 4)
    got = _advantages(padded, AlgorithmConfig(estimator="rloo"), pad_size=pad_size)
    # rloo by hand on the unpadded groups: r_i - mean of the others
    real = [1.0 - 0.0, 0.0 - 1.0, 0.0, 0.0, 0.0, 0.0]
    np.testing.assert_allclose(got, [*real, real[0], real[1]], atol=1e-6)  # padding rows copy rows 0 and 1


def test_padding_larger_than_the_batch_is_detected_and_handled():
    padded, pad_size = pad_dataproto_to_divisor(make_batch([1.0, 0.0], [1, 1], ["p", "p"]), 5)
    assert (len(padded), pad_size) == (5, 3)  # rows 0 1 | 0 1 | 0
    with pytest.raises(ValueError, match="row 4 repeats row 0 in every column"):
        dataproto_to_groups(padded)
    got = _advantages(padded, AlgorithmConfig(estimator="rloo"), pad_size=pad_size)
    np.testing.assert_allclose(got, [1.0, -1.0, 1.0, -1.0, 1.0], atol=1e-6)


def test_real_rows_that_look_like_padding_convert_with_pad_size_zero():
    data = make_batch([1.0, 1.0], [1, 1], ["p", "p"])  # two identical responses of one prompt
    with pytest.raises(ValueError, match="pad_size=0 if these rows are real"):
        dataproto_to_groups(data)
    [group] = dataproto_to_groups(make_batch([1.0, 1.0], [1, 1], ["p", "p"]), pad_size=0)
    assert len(group.trajectories) == 2


def test_a_pad_size_that_does_not_match_the_rows_is_refused():
    with pytest.raises(ValueError, match=r"pad_size=1: row 5 should be verl's padding copy of row 0, but the rows differ"):
        dataproto_to_groups(_rloo_batch(), pad_size=1)
    with pytest.raises(ValueError, match=r"pad_size must be an int from 0 to 5 .* got -1"):
        dataproto_to_groups(_rloo_batch(), pad_size=-1)


def test_converting_then_padding_still_round_trips():
    data = _rloo_batch()
    groups = dataproto_to_groups(data)
    collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator="rloo"))
    padded, _ = pad_dataproto_to_divisor(data, 4)
    apply_advantages(padded, groups)
    np.testing.assert_allclose(padded.batch["advantages"].sum(dim=-1).numpy(), [1, -1, 0, 0, 0, 0, 1, -1], atol=1e-6)
    with pytest.raises(ValueError, match="repeats ids: the batch was padded"):
        dataproto_to_groups(padded)


def test_a_two_dimensional_uid_column_is_refused():
    data = make_batch([1.0, 0.0], [1, 1], ["x", "x"])
    data.non_tensor_batch["uid"] = np.array([("task", 1), ("task", 1)], dtype=object)
    with pytest.raises(ValueError, match=r"non_tensor_batch\['uid'\] has shape \(2, 2\); it needs one id per row \(1-D\)"):
        dataproto_to_groups(data)


def test_an_unhashable_uid_is_refused():
    data = make_batch([1.0, 0.0], [1, 1], ["x", "x"])
    uids = np.empty(2, dtype=object)
    uids[0], uids[1] = ["task", 1], ["task", 1]
    data.non_tensor_batch["uid"] = uids
    with pytest.raises(ValueError, match=r"row 0: uid \['task', 1\] is a list, not a hashable id"):
        dataproto_to_groups(data)


def test_tensor_columns_count_in_the_padding_check():
    data = make_batch([1.0, 0.0, 1.0], [1, 1, 1], ["p", "p", "p"])
    data.batch["responses"] = torch.tensor([[5] * 7, [6] * 7, [7] * 7])  # row 2 differs from row 0 in its tokens
    assert len(dataproto_to_groups(data)[0].trajectories) == 3
