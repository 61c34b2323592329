"""rLLM-style estimators, advantage transforms and reward shapers in ms-swift's GRPO trainers.

ms-swift computes its advantages in ``swift.rl_core.advantage`` (``compute_advantages``, and
``compute_advantages_dynamic`` for its request-aware multi-turn mode); :mod:`rllm_swift.seam` replaces both by the
selected estimator. Select it in an ms-swift plugin file (``--external_plugins my_plugin.py``)::

    import rllm_swift

    rllm_swift.use("rloo", transforms=["clip"])

or pass the file this package ships, ``rllm_swift/plugin.py`` (``python -m rllm_swift.plugin`` prints its path), with
``RLLM_SWIFT_ESTIMATOR=rloo`` in the environment. ``RLLM_SWIFT_DISABLE=1`` leaves ms-swift's own estimators in place.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rllm_plugins.extras import missing_modules

if missing_modules(["swift", "torch"]):
    raise ModuleNotFoundError(
        f"rllm_swift needs ms-swift and torch, and {' and '.join(missing_modules(['swift', 'torch']))} not installed. "
        'Install: pip install "ms-swift>=4.6,<4.7" rllm-plugins',
        name="swift",
    )

from .compute import Selection, select
from .seam import OPT_OUT, current, install, installed, uninstall
from .versions import SUPPORTED, SwiftSeamError

__all__ = ["OPT_OUT", "PLUGIN_FILE", "SUPPORTED", "Selection", "SwiftSeamError", "current", "install", "installed", "select", "uninstall", "use"]

PLUGIN_FILE = Path(__file__).with_name("plugin.py")
"""The file to pass to ms-swift's ``--external_plugins``: it selects what ``RLLM_SWIFT_ESTIMATOR`` names."""


def use(
    estimator: str,
    *,
    estimator_kwargs: dict[str, Any] | str | None = None,
    transforms: Any = None,
    shapers: Any = None,
) -> Selection:
    """Select ``estimator`` (a registered name: ``rloo``, ``trl_grpo``, ... or ``rllm_rloo``) for ms-swift's GRPO advantages, with
    its keyword options, advantage transforms and reward shapers, and install the seam; the selection. Everything is checked
    here, before ms-swift builds its trainer."""
    selection = select(estimator, estimator_kwargs=estimator_kwargs, transforms=transforms, shapers=shapers)
    install(selection)
    return selection
