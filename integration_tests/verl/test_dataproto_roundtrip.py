"""rLLM-style DataProtos: rows -> groups -> rLLM collection -> advantages back on the right rows, whatever verl did to row order."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("verl")
from rllm_verl import ROW_ID_KEY, apply_advantages, dataproto_to_groups
from verl import DataProto
from verl.protocol import pad_dataproto_to_divisor

from rllm_plugins import AlgorithmConfig, collect_reward_and_advantage_from_trajectory_groups

T = 5
# (uid, role, trajectory id, step id, reward on this step, response length)
ROWS = [
    ("t1", "solver", "t1-a", 0, 0.0, 3),
    ("t1", "solver", "t1-a", 1, 1.0, 2),  # trajectory t1-a: two steps, reward 1
    ("t1", "solver", "t1-b", 0, 0.0, 5),
    ("t1", "solver", "t1-c", 0, 0.5, 4),
    ("t2", "judge", "t2-a", 0, 1.0, 1),
    ("t2", "judge", "t2-b", 0, 0.0, 2),
    ("t3", "solver", "t3-a", 0, 2.0, 4),  # a group of one
]


def _batch() -> DataProto:
    n = len(ROWS)
    mask = torch.zeros(n, T, dtype=torch.int64)
    rewards = torch.zeros(n, T)
    for row, (*_, reward, length) in enumerate(ROWS):
        mask[row, :length] = 1
        rewards[row, length - 1] = reward
    columns = list(zip(*ROWS, strict=True))
    return DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask, "responses": torch.arange(n * T).reshape(n, T)},
        non_tensors={
            "uid": np.array(columns[0], dtype=object),
            "group_roles": np.array(columns[1], dtype=object),
            "trajectory_ids": np.array(columns[2], dtype=object),
            "step_ids": np.array(columns[3], dtype=np.int64),
        },
    )


def _expected_by_trajectory() -> dict[str, float]:
    """solver groups use rloo, the judge group grpo; trajectory reward = sum of its steps' rewards (by hand)."""
    t1 = {"t1-a": 1.0, "t1-b": 0.0, "t1-c": 0.5}
    mean = sum(t1.values()) / 3
    expected = {tid: 1.5 * (r - mean) for tid, r in t1.items()}
    expected.update({"t2-a": 0.5 / (0.5 + 1e-6), "t2-b": -0.5 / (0.5 + 1e-6), "t3-a": 2.0})
    return expected


def test_groups_trajectories_steps_and_roles_come_from_the_columns():
    groups = dataproto_to_groups(_batch(), trajectory_key="trajectory_ids", step_key="step_ids")
    assert [g.group_id for g in groups] == ["t1:solver", "t2:judge", "t3:solver"]
    assert [[t.uid for t in g.trajectories] for g in groups] == [["t1-a", "t1-b", "t1-c"], ["t2-a", "t2-b"], ["t3-a"]]
    first = groups[0].trajectories[0]
    assert first.reward == 1.0 and [s.reward for s in first.steps] == [0.0, 1.0]
    assert first.steps[0].response_ids == [0, 1, 2] and first.steps[1].response_ids == [5, 6]


def test_round_trip_keeps_each_rows_advantage_after_permutation_and_padding():
    data = _batch()
    groups = dataproto_to_groups(data, trajectory_key="trajectory_ids", step_key="step_ids")
    collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator="rloo", estimator_map={"judge": "grpo"}))
    perm = np.random.default_rng(0).permutation(len(data))
    data.reorder(torch.from_numpy(perm))
    padded, pad = pad_dataproto_to_divisor(data, 4)
    assert pad == 1
    apply_advantages(padded, groups)
    expected = _expected_by_trajectory()
    mask = padded.batch["response_mask"].numpy()
    for row in range(len(padded)):
        tid = padded.non_tensor_batch["trajectory_ids"][row]
        np.testing.assert_allclose(padded.batch["advantages"][row].numpy(), expected[tid] * mask[row], rtol=1e-6, err_msg=f"row {row} ({tid})")
    assert padded.batch["returns"] is padded.batch["advantages"] or torch.equal(padded.batch["returns"], padded.batch["advantages"])


def test_precomputed_per_token_advantages_land_on_the_masked_tokens():
    data = _batch()
    data.non_tensor_batch["precomputed"] = np.array([list(np.arange(length) + 0.5) for *_, length in ROWS], dtype=object)
    groups = dataproto_to_groups(data, trajectory_key="trajectory_ids", precomputed_key="precomputed")
    collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(use_precomputed_advantage=True))
    data.reorder(torch.tensor([6, 5, 4, 3, 2, 1, 0]))
    apply_advantages(data, groups)
    for row in range(len(data)):
        length = int(data.batch["response_mask"][row].sum())
        assert data.batch["advantages"][row, :length].tolist() == [i + 0.5 for i in range(length)]
        assert data.batch["advantages"][row, length:].abs().sum() == 0


def test_rows_unknown_to_the_groups_are_an_error_and_nothing_is_written():
    data = _batch()
    groups = dataproto_to_groups(data)
    collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator="grpo"))
    other = _batch()
    other.non_tensor_batch[ROW_ID_KEY] = np.arange(100, 100 + len(other))
    with pytest.raises(ValueError, match="row 0 \\(row id 100\\) has no step in the groups"):
        apply_advantages(other, groups)
    assert "advantages" not in other.batch.keys()  # noqa: SIM118 - TensorDict has no `in`
    with pytest.raises(ValueError, match="dataproto_to_groups\\(data\\) first"):
        apply_advantages(_batch(), groups)


def test_missing_group_column_names_the_key():
    with pytest.raises(ValueError, match="no non_tensor_batch\\['prompt_id'\\]"):
        dataproto_to_groups(_batch(), group_key="prompt_id")


def test_verl_algorithm_config_is_the_trainer_wiring_and_refuses_a_per_role_loss():
    # rLLM main: UnifiedTrainer passes traj_group_adv_estimator_map to AlgorithmConfig.from_config (rllm/trainer/unified_trainer.py)
    from rllm_verl import verl_algorithm_config

    config = verl_algorithm_config({"rllm": {"algorithm": {"adv_estimator": "rloo"}}}, {"judge": "grpo"})
    assert config.estimator_name("judge") == "grpo" and config.estimator_name("solver") == "rloo"
    with pytest.raises(ValueError, match=r"per-role policy losses \('judge': \('grpo', 'ppo'\)\) are not applied with verl"):
        verl_algorithm_config({"rllm": {"algorithm": {"adv_estimator": "rloo"}}}, {"judge": ("grpo", "ppo")})


def _one_group_batch(rewards: torch.Tensor) -> DataProto:
    """Rows of one uid, each reward on the first of 2 tokens (both masked)."""
    n = rewards.shape[0]
    token_level_rewards = torch.zeros(n, 2, dtype=rewards.dtype)
    token_level_rewards[:, 0] = rewards
    return DataProto.from_dict(
        tensors={"token_level_rewards": token_level_rewards, "response_mask": torch.ones(n, 2, dtype=torch.int64)},
        non_tensors={"uid": np.array(["p"] * n, dtype=object)},
    )


def test_integer_rewards_get_their_advantages_in_the_default_float_dtype():
    """Before: RLOO's [1/3, -1, 5/3, -1] written into int64, truncated to [0, -1, 1, -1]."""
    data = _one_group_batch(torch.tensor([1, 0, 2, 0], dtype=torch.int64))
    groups = dataproto_to_groups(data)
    collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator="rloo"))
    apply_advantages(data, groups)
    rewards = [1, 0, 2, 0]
    expected = [r - sum(x for j, x in enumerate(rewards) if j != i) / 3 for i, r in enumerate(rewards)]  # leave-one-out baseline
    assert data.batch["advantages"].dtype == torch.get_default_dtype()
    np.testing.assert_allclose(data.batch["advantages"][:, 0].numpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(data.batch["advantages"][:, 1].numpy(), expected, rtol=1e-6)


@pytest.mark.parametrize(("dtype", "value", "limit"), [(torch.float16, 60000.0, "65504"), (torch.float32, 3e38, "3.40282e+38")])
def test_an_advantage_past_the_rewards_float_range_is_an_error_naming_the_row(dtype, value, limit):
    """Before: fp16 and float32 advantages past their range were written as inf."""
    data = _one_group_batch(torch.tensor([value, -value], dtype=dtype))
    groups = dataproto_to_groups(data)
    collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator="rloo"))
    row_id = data.non_tensor_batch[ROW_ID_KEY].tolist()[0]
    advantage = 2 * float(torch.tensor(value, dtype=dtype))
    with pytest.raises(ValueError) as error:
        apply_advantages(data, groups)
    wider = "float32" if dtype == torch.float16 else "float64"
    assert str(error.value) == (
        f"apply_advantages: advantage {advantage} of row 0 (row id {row_id!r}) overflows {dtype} (largest {limit}), the dtype of "
        f"token_level_rewards; compute rewards in {wider}, or scale them down"
    )
    assert "advantages" not in data.batch.keys()  # noqa: SIM118 - a TensorDict
