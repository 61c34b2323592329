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

    def loaded(self) -> bool:
        import sys

        return "rllm_verl.verl_plugin" in sys.modules


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
    names = sorted(ref.session_estimators)
    data, keys = ref.make_session_batch(np.random.default_rng(7))
    rewards, mask, uids = data.batch["token_level_rewards"], data.batch["response_mask"], list(data.non_tensor_batch["uid"])
    actor = TaskRunnerLike.remote()
    out = ray.get(actor.sessions.remote(names, keys, uids, rewards, mask), timeout=300)
    assert out["extension"] == "sessions"
    for name in names:
        np.testing.assert_allclose(out[name], ref.sessions(keys, uids, rewards, mask, ref.session_estimators[name]), atol=1e-6, err_msg=name)
