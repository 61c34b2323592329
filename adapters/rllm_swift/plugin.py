"""The ms-swift plugin file: ``--external_plugins <this file>`` selects the estimator named by ``RLLM_SWIFT_ESTIMATOR``.

ms-swift imports each ``--external_plugins`` file when it reads its arguments, before it builds the trainer. The
environment says what to run:

- ``RLLM_SWIFT_ESTIMATOR``: the estimator (``rloo``, ``trl_grpo``, ``rllm_rloo``, ...; required);
- ``RLLM_SWIFT_ESTIMATOR_KWARGS``: its keyword options as a JSON object (``{"epsilon": 1e-6}``);
- ``RLLM_SWIFT_ADVANTAGE_TRANSFORMS``, ``RLLM_SWIFT_REWARD_SHAPERS``: JSON lists (``'["clip"]'``);
- ``RLLM_SWIFT_DISABLE=1``: nothing is changed, ms-swift computes its own advantages.

``python -m rllm_swift.plugin`` prints this file's path.
"""

from __future__ import annotations

import os
from pathlib import Path

ENVIRONMENT = ("RLLM_SWIFT_ESTIMATOR", "RLLM_SWIFT_ESTIMATOR_KWARGS", "RLLM_SWIFT_ADVANTAGE_TRANSFORMS", "RLLM_SWIFT_REWARD_SHAPERS")


def from_environment() -> object | None:
    """Select and install what the environment names; None when ``RLLM_SWIFT_DISABLE=1``."""
    import rllm_swift

    if rllm_swift.seam.opted_out():
        return None
    name = os.environ.get("RLLM_SWIFT_ESTIMATOR", "").strip()
    if not name:
        raise ValueError(
            f"{Path(__file__).name} is in --external_plugins but RLLM_SWIFT_ESTIMATOR is not set: name an estimator (RLLM_SWIFT_ESTIMATOR=rloo; "
            "rllm-plugins estimators lists them), or set RLLM_SWIFT_DISABLE=1 to train with ms-swift's own"
        )
    return rllm_swift.use(
        name,
        estimator_kwargs=os.environ.get("RLLM_SWIFT_ESTIMATOR_KWARGS") or None,
        transforms=os.environ.get("RLLM_SWIFT_ADVANTAGE_TRANSFORMS") or None,
        shapers=os.environ.get("RLLM_SWIFT_REWARD_SHAPERS") or None,
    )


if __name__ == "__main__":
    print(Path(__file__).resolve())
else:
    from_environment()
