"""In a real local Ray cluster, an actor that only imports verl sees ``rllm_rloo`` and computes with it."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("verl")
ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def ray_cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@ray.remote
class TaskRunnerLike:
    """Stands where verl's TaskRunner computes advantages: a fresh worker process that imports verl and nothing of ours."""

    def rllm_names(self) -> list[str]:
        import verl  # noqa: F401 - the entry point registers on this import
        from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY

        return sorted(name for name in ADV_ESTIMATOR_REGISTRY if name.startswith("rllm_"))

    def rloo(self, rewards: list[float], uids: list[str]) -> list[float]:
        import torch
        import verl  # noqa: F401
        from verl.trainer.ppo.core_algos import get_adv_estimator_fn

        token_level_rewards = torch.tensor(rewards).unsqueeze(-1)
        advantages, _ = get_adv_estimator_fn("rllm_rloo")(
            token_level_rewards=token_level_rewards, response_mask=torch.ones_like(token_level_rewards), index=np.array(uids, dtype=object)
        )
        return advantages[:, 0].tolist()

    def sessions(self, names: list[str], keys: list[str], uids: list[str], rewards, mask) -> dict:
        import verl.trainer.ppo.v1.trainer_base as trainer_base
        from verl import DataProto

        out = {}
        for name in names:
            tensors = {"token_level_rewards": rewards.clone(), "response_mask": mask.clone()}
            data = DataProto.from_dict(tensors=tensors, non_tensors={"uid": np.array(uids, dtype=object)})
            out[name] = trainer_base.compute_advantage_for_multi_trajectories(data, keys, adv_estimator=name).batch["advantages"].numpy()
        out["extension"] = getattr(trainer_base.compute_advantage_for_multi_trajectories, "rllm_extension", None)
        return out

    def gigpo(self, responses, mask, rewards, uids: list[str]):
        import verl  # noqa: F401
        from omegaconf import OmegaConf
        from verl import DataProto
        from verl.trainer.ppo.ray_trainer import compute_advantage

        data = DataProto.from_dict(
            tensors={"responses": responses, "response_mask": mask, "token_level_rewards": rewards}, non_tensors={"uid": np.array(uids, dtype=object)}
        )
        config = OmegaConf.create({"adv_estimator": "rllm_gigpo", "gamma": 1.0, "norm_adv_by_std_in_grpo": True})
        return compute_advantage(data, adv_estimator="rllm_gigpo", config=config).batch["advantages"].numpy()

    def loaded(self) -> bool:
        import sys

        return "rllm_verl.plugin" in sys.modules


def test_an_actor_that_only_imports_verl_computes_with_rllm_rloo(ray_cluster):
    actor = TaskRunnerLike.remote()
    names = ray.get(actor.rllm_names.remote(), timeout=180)
    assert {"rllm_rloo", "rllm_grpo", "rllm_median_baseline"} <= set(names)
    assert ray.get(actor.loaded.remote())
    advantages = ray.get(actor.rloo.remote([1.0, 0.0, 0.0, 2.0, 5.0], ["a", "a", "a", "b", "solo"]))
    # leave-one-out by hand: a -> 1 - 0, 0 - 0.5, 0 - 0.5; b alone keeps 2; solo keeps 5
    np.testing.assert_allclose(advantages, [1.0, -0.5, -0.5, 2.0, 5.0])


def test_an_actor_that_only_imports_verl_computes_session_advantages(ray_cluster, ref):
    """Where verl's v1 TaskRunner computes advantages: the session extension is active there too."""
    pytest.importorskip("transfer_queue", reason="verl's v1 trainer needs TransferQueue")
    from rllm_verl.versions import verl_features

    if not verl_features().v1_trainer:  # test_versions.py checks that the sessions extension is absent there
        pytest.skip(f"verl {verl_features().version} has no v1 trainer")
    names = sorted(ref.session_estimators)
    data, keys = ref.make_session_batch(np.random.default_rng(7))
    rewards, mask, uids = data.batch["token_level_rewards"], data.batch["response_mask"], list(data.non_tensor_batch["uid"])
    actor = TaskRunnerLike.remote()
    out = ray.get(actor.sessions.remote(names, keys, uids, rewards, mask), timeout=300)
    assert out["extension"] == "sessions"
    for name in names:
        np.testing.assert_allclose(out[name], ref.sessions(keys, uids, rewards, mask, ref.session_estimators[name]), atol=1e-6, err_msg=name)


def test_an_actor_that_only_imports_verl_computes_rllm_gigpo_on_multi_turn_rows(ray_cluster):
    """Turns and anchors found where verl computes advantages: responses reach the estimator through the reward-key extension."""
    import torch

    responses = torch.tensor([[5, 5, 9, 9, 6, 6, 0, 0], [5, 9, 9, 7, 7, 0, 0, 0], [5, 5, 9, 6, 6, 9, 7, 7]])
    mask = torch.tensor([[1, 1, 0, 0, 1, 1, 0, 0], [1, 0, 0, 1, 1, 0, 0, 0], [1, 1, 0, 1, 1, 0, 1, 1]], dtype=torch.float32)
    rewards = torch.zeros(3, 8)
    rewards[0, 5] = rewards[2, 7] = 1.0
    got = ray.get(TaskRunnerLike.remote().gigpo.remote(responses, mask, rewards, ["a", "a", "a"]), timeout=300)
    # outcomes [1, 0, 1]: A^E = [0.707, -1.414, 0.707]; turn 0 ('prompt'): returns [1, 0, 1] -> the same z-scores;
    # after [9, 9]: rows 0 and 1, returns 1 and 0 -> +-1; after [9]: row 2's turns 1 and 2, returns 1 and 1 -> 0
    e = np.array([1.0, -2.0, 1.0]) / np.sqrt(2.0) * (np.sqrt(2 / 9) / (np.sqrt(2 / 9) + 1e-6))
    s = 0.5 / (0.5 + 1e-6)
    want = [
        [2 * e[0]] * 2 + [0, 0] + [e[0] + s] * 2 + [0, 0],
        [2 * e[1], 0, 0, e[1] - s, e[1] - s, 0, 0, 0],
        [2 * e[2]] * 2 + [0] + [e[2]] * 2 + [0] + [e[2]] * 2,
    ]
    np.testing.assert_allclose(got, want, rtol=1e-5)
