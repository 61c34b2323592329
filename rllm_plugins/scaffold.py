"""``rllm-plugins new NAME``: a complete plugin project, ready to install, test and publish.

:func:`project_files` gives the files of one variant (an outcome-level estimator, a stateful one, a step-level one, or
an advantage transform) as ``{relative path: text}``; :func:`write_project` writes them into an empty folder. The
templates below are the files themselves, with ``__NAME__`` (the estimator or transform name), ``__PACKAGE__`` (the
import name, ``rllm_<name>``) and ``__DIST__`` (the distribution, ``rllm-<name>`` with dashes) filled in.
"""

from __future__ import annotations

from pathlib import Path

from .names import validate_name

__all__ = ["KINDS", "LEVELS", "ScaffoldError", "check_request", "project_files", "write_project"]

KINDS = ("estimator", "transform")
LEVELS = ("outcome", "step")


class ScaffoldError(ValueError):
    """A request ``rllm-plugins new`` refuses (the command prints it and exits 2)."""


PYPROJECT = """\
[build-system]
requires = ["setuptools>=69"]
build-backend = "setuptools.build_meta"

[project]
name = "__DIST__"
version = "0.1.0"
description = "An rllm-plugins __WHAT__ plugin: __NAME__"
readme = "README.md"
requires-python = ">=3.10"
dependencies = ["rllm-plugins", "numpy>=1.24"]

[project.optional-dependencies]
test = ["pytest>=8"]

# the group is rllm_plugins (with the s); the name left of = is the plugin's (RLLM_PLUGINS_DISABLE, rllm-plugins plugins)
[project.entry-points.rllm_plugins]
__NAME__ = "__PACKAGE__.plugin"

[tool.setuptools]
packages = ["__PACKAGE__"]

[tool.pytest.ini_options]
testpaths = ["tests"]
"""

INIT = '''\
"""__DIST__: the __WHAT__ __NAME__ for rllm-plugins."""

from .__MODULE__ import SPEC

__all__ = ["SPEC"]
'''

PLUGIN = '''\
"""Entry point of the ``rllm_plugins`` group: contributes the __WHAT__ ``__NAME__``."""

from __future__ import annotations

from collections.abc import Iterable

from rllm_plugins import __SPEC_CLASS__, hookimpl

from .__MODULE__ import SPEC


@hookimpl
def __HOOK__() -> Iterable[__SPEC_CLASS__]:
    yield SPEC
'''

OUTCOME_ESTIMATOR = '''\
"""The estimator ``__NAME__``: each trajectory's reward minus the mean reward of its task group."""

from __future__ import annotations

from typing import Any

import numpy as np

from rllm_plugins import AdvEstimatorSpec


def mean_baseline(rewards: list[np.ndarray], **kwargs: Any) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Mean baseline: reward minus the mean reward of its group (a group of one gets 0, an empty group stays empty)."""
    advantages = [np.asarray(r, dtype=np.float64) - np.mean(r) if len(r) else np.zeros(0) for r in rewards]
    return advantages, advantages


SPEC = AdvEstimatorSpec(name="__NAME__", fn=mean_baseline, description="r - group mean", options=())
'''

STATEFUL_ESTIMATOR = '''\
"""The estimator ``__NAME__``: a running baseline, each reward minus the mean of every reward of the earlier calls.

Its state is ``{"count": n, "mean": m}`` (``{}`` at first): a batch is scored against ``m``, then folded into it. The
framework keeps the state per role between calls and saves it with its checkpoints (docs/running_baselines.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rllm_plugins import AdvEstimatorSpec


def running_mean_baseline(values: np.ndarray, offsets: np.ndarray, /, *, state: Mapping[str, Any], **_: Any) -> tuple[np.ndarray, dict[str, Any]]:
    """r minus the mean of every reward seen in earlier calls; returns (advantages, new state)."""
    count, mean = int(state.get("count", 0)), float(state.get("mean", 0.0))
    total = count + values.size
    new_mean = mean if total == 0 else mean + float(np.sum(values - mean)) / total
    return values - mean, {"count": total, "mean": new_mean}


SPEC = AdvEstimatorSpec(
    name="__NAME__",
    batched=running_mean_baseline,
    description="r - running mean of earlier rewards",
    stateful=True,
    options=(),
    state_schema={"count": int, "mean": float},
)
'''

STEP_ESTIMATOR = '''\
"""The step-level estimator ``__NAME__``: every step of a trajectory gets its outcome minus the mean outcome of its task group."""

from __future__ import annotations

from typing import Any

import numpy as np

from rllm_plugins import AdvEstimatorSpec
from rllm_plugins.steps import StepBatch


def step_mean_baseline(batch: StepBatch, /, **_: Any) -> np.ndarray:
    """Each step: its trajectory's outcome minus the group's mean outcome."""
    centred = batch.outcomes - batch.trajectories.expand(batch.trajectories.mean(batch.outcomes))  # (N,) per trajectory
    return np.repeat(centred, np.diff(batch.step_offsets))  # (S,) per step


SPEC = AdvEstimatorSpec(name="__NAME__", batched=step_mean_baseline, level="step", description="outcome - group mean, at every step", options=())
'''

TRANSFORM = '''\
"""The advantage transform ``__NAME__``: each unit's advantage minus ``weight`` times the mean advantage of its task group."""

from __future__ import annotations

import numpy as np

from rllm_plugins import TransformSpec


def recentre(advantages: np.ndarray, *, offsets: np.ndarray, weight: float = 1.0) -> np.ndarray:
    """Advantages minus ``weight`` times their group's mean (groups: ``offsets``; an empty group has no unit)."""
    sizes = np.diff(offsets)
    group = np.repeat(np.arange(sizes.size), sizes)
    means = np.bincount(group, advantages, minlength=sizes.size) / np.maximum(sizes, 1)
    return advantages - weight * means[group]


SPEC = TransformSpec("__NAME__", recentre, "advantages minus weight times their group's mean")
'''

TEST_HEAD = '''\
"""The checks rllm-plugins runs on every estimator and transform, one pytest item per rule, and the plugin's own numbers."""

import numpy as np

from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups
from rllm_plugins.testing import parametrize_with_checks


def group(rewards, group_id="q1:solver", steps=1):
    return TrajectoryGroup([Trajectory(steps=[Step(response_ids=[1]) for _ in range(steps)], reward=r) for r in rewards], group_id=group_id)


# One item per contract rule, and per conformance cell on every installed path (core; trl and verl where installed);
# a rule broken on purpose goes in expected_failures={"__NAME__": {"rule": "why"}} (a strict xfail).
@parametrize_with_checks(["__NAME__"])
def test_conformance(check):
    check()
'''

OUTCOME_TEST = '''

def test_selected_by_name_it_gives_reward_minus_group_mean():
    groups = [group([0.0, 1.0, 5.0])]
    collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator="__NAME__"))
    np.testing.assert_allclose([t.steps[0].advantage for t in groups[0].trajectories], [-2.0, -1.0, 3.0])
'''

STATEFUL_TEST = '''

def test_selected_by_name_it_keeps_a_running_mean_across_calls():
    config = AlgorithmConfig(estimator="__NAME__")  # one config per run: it keeps the state
    first, second = [group([1.0, 3.0])], [group([0.0])]
    collect_reward_and_advantage_from_trajectory_groups(first, config)
    collect_reward_and_advantage_from_trajectory_groups(second, config)
    assert [t.steps[0].advantage for t in first[0].trajectories] == [1.0, 3.0]  # mean 0 at first
    assert second[0].trajectories[0].steps[0].advantage == -2.0  # the mean of 1 and 3
    state = config.state_dict()["estimators"]["__NAME__"]["solver"]  # kept per role, saved with checkpoints
    assert state["count"] == 3
    np.testing.assert_allclose(state["mean"], 4 / 3)
'''

STEP_TEST = '''

def test_selected_by_name_every_step_gets_outcome_minus_group_mean():
    groups = [group([0.0, 1.0, 5.0], steps=2)]
    collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator="__NAME__"))
    assert [[s.advantage for s in t.steps] for t in groups[0].trajectories] == [[-2.0, -2.0], [-1.0, -1.0], [3.0, 3.0]]
'''

TRANSFORM_TEST = '''

def test_selected_by_name_it_recentres_each_group():
    groups = [group([0.0, 1.0, 5.0]), group([2.0, 4.0], group_id="q2:solver")]
    config = AlgorithmConfig(estimator="reinforce", advantage_transforms=["__NAME__"])  # reinforce: advantage = reward
    collect_reward_and_advantage_from_trajectory_groups(groups, config)
    np.testing.assert_allclose([t.steps[0].advantage for g in groups for t in g.trajectories], [-2.0, -1.0, 3.0, -1.0, 1.0])
'''

CI = """\
name: ci

on: [push, pull_request]

jobs:
  test:
    runs-on: ubuntu-latest
    strategy:
      matrix:
        python-version: ["3.10", "3.12"]
    env:
      # what pip installs as rllm-plugins: a requirement, a wheel's URL or "git+<its repository URL>"
      RLLM_PLUGINS: rllm-plugins
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with:
          python-version: ${{ matrix.python-version }}
      - run: python -m pip install "$RLLM_PLUGINS"
      - run: python -m pip install ".[test]"
      - run: rllm-plugins plugins --strict   # exit 1 if a plugin failed to load, conflicts or is misplaced
      - run: rllm-plugins check __NAME__
      - run: python -m pytest
"""

README = """\
# __DIST__

__SUMMARY__

A plugin for rllm-plugins: once installed, `__NAME__` is selectable by name in plain Python, in verl and in TRL,
with no code change anywhere.

```
pyproject.toml                   the distribution, and its entry point in the group rllm_plugins
__PACKAGE__/
  __MODULE__.py__PAD__the __WHAT__ and its spec (__SPEC_CLASS__), side by side
  plugin.py                      the entry point: one @hookimpl __HOOK__() yielding the spec
tests/test___NAME__.py__TESTPAD__the checks of rllm-plugins, one pytest item per rule, and the plugin's own numbers
.github/workflows/ci.yml         installs the project and runs its tests
```

## Install and check

```
pip install -e ".[test]"
rllm-plugins plugins --strict   # __NAME__ is active; exit code 1 if a plugin failed to load
rllm-plugins check __NAME__   # the contract check; exit code 0 when it holds
python -m pytest   # the same checks, one item per rule, and the plugin's own tests
```

## Use it

Plain Python (rLLM's API):

```python
__PYTHON__
```

verl:

```
__VERL__
```

TRL:

```python
__TRL__
```
"""

USES = {
    "estimator": (
        'config = AlgorithmConfig(estimator="__NAME__")',
        "python -m verl.trainer.main_ppo algorithm.adv_estimator=rllm___NAME__ ...",
        'args = RLLMGRPOConfig(output_dir="out", adv_estimator="__NAME__")',
    ),
    "transform": (
        'config = AlgorithmConfig(estimator="grpo", advantage_transforms=["__NAME__"])',
        "python -m verl.trainer.main_ppo algorithm.adv_estimator=grpo '+algorithm.rllm_advantage_transforms=[__NAME__]' ...",
        'args = RLLMGRPOConfig(output_dir="out", advantage_transforms=["__NAME__"])',
    ),
}

SUMMARIES = {
    ("estimator", "outcome", False): "The advantage estimator `__NAME__`: each trajectory's reward minus the mean reward of its task group.",
    ("estimator", "outcome", True): "The stateful advantage estimator `__NAME__`: each reward minus the running mean of every reward of the earlier "
    "steps (the frameworks keep its state and save it with their checkpoints).",
    ("estimator", "step", False): "The step-level advantage estimator `__NAME__`: every step of a trajectory gets its outcome minus the mean "
    "outcome of its task group.",
    ("transform", None, False): "The advantage transform `__NAME__`: each advantage minus `weight` (1.0) times the mean advantage of its task "
    "group, after any estimator.",
}


def check_request(name: str, kind: str = "estimator", level: str | None = None, stateful: bool = False) -> str:
    """The registry key of ``name`` if ``rllm-plugins new`` can make this project; else :class:`ScaffoldError` saying why."""
    try:
        key = validate_name(name)
    except ValueError as e:
        raise ScaffoldError(str(e).replace("invalid estimator name", f"invalid {kind} name", 1)) from None
    if key != name:
        raise ScaffoldError(f"invalid {kind} name {name!r}: write it as the registry keeps it, {key!r}")
    if kind == "transform" and stateful:
        raise ScaffoldError("--stateful is for estimators: an advantage transform keeps no state")
    if kind == "transform" and level is not None:
        raise ScaffoldError("--level is for estimators: a transform's level is declared in its TransformSpec (sequence, the template's)")
    if stateful and level == "step":
        raise ScaffoldError("--stateful is for outcome-level estimators: a stateful estimator cannot be step-level")
    builtins = _builtin_names(kind)
    if key in builtins:
        raise ScaffoldError(f"{key!r} is a built-in {kind} of rllm-plugins, which a plugin cannot replace: choose another name")
    return key


def _builtin_names(kind: str) -> set[str]:
    if kind == "transform":
        from .transforms.builtin import BUILTIN_TRANSFORMS

        return {spec.name for spec in BUILTIN_TRANSFORMS}
    from .estimators import BUILTIN_SPECS

    return {n for spec in BUILTIN_SPECS for n in (spec.name, *spec.aliases)}


def project_files(name: str, kind: str = "estimator", level: str | None = None, stateful: bool = False) -> dict[str, str]:
    """The files of the project, ``{path relative to the project: text}`` (refuses what :func:`check_request` refuses)."""
    key = check_request(name, kind, level, stateful)
    level = None if kind == "transform" else (level or "outcome")
    package = f"rllm_{key}"
    if kind == "transform":
        module, code, test = "transform", TRANSFORM, TRANSFORM_TEST
    elif level == "step":
        module, code, test = "estimator", STEP_ESTIMATOR, STEP_TEST
    else:
        module, code, test = "estimator", STATEFUL_ESTIMATOR if stateful else OUTCOME_ESTIMATOR, STATEFUL_TEST if stateful else OUTCOME_TEST
    python, verl, trl = USES[kind]
    test_path = f"tests/test_{key}.py"
    fill = {
        "__SUMMARY__": SUMMARIES[(kind, level, stateful)],
        "__PYTHON__": "from rllm_plugins import AlgorithmConfig\n\n" + python,
        "__VERL__": verl,
        "__TRL__": "from rllm_trl import RLLMGRPOConfig\n\n" + trl,
        "__PAD__": " " * max(1, 33 - len(f"  {module}.py")),
        "__TESTPAD__": " " * max(1, 33 - len(test_path)),
        "__SPEC_CLASS__": "TransformSpec" if kind == "transform" else "AdvEstimatorSpec",
        "__HOOK__": "rllm_advantage_transforms" if kind == "transform" else "rllm_adv_estimators",
        "__WHAT__": "advantage transform" if kind == "transform" else "estimator",
        "__MODULE__": module,
        "__PACKAGE__": package,
        "__DIST__": package.replace("_", "-"),
        "__NAME__": key,
    }
    files = {
        "pyproject.toml": PYPROJECT,
        "README.md": README,
        ".github/workflows/ci.yml": CI,
        f"{package}/__init__.py": INIT,
        f"{package}/{module}.py": code,
        f"{package}/plugin.py": PLUGIN,
        test_path: TEST_HEAD + test,
    }
    return {path: _fill(text, fill) for path, text in files.items()}


def _fill(text: str, fill: dict[str, str]) -> str:
    for token, value in fill.items():  # in order: the summary and the uses hold __NAME__, filled after them
        text = text.replace(token, value)
    return text


def default_directory(name: str) -> Path:
    """``./rllm-<name>`` (underscores as dashes), the distribution's name."""
    return Path(f"rllm-{name.replace('_', '-')}")


def write_project(directory: Path, files: dict[str, str]) -> list[Path]:
    """Write ``files`` under ``directory`` (which must not exist or be empty); returns the paths written, sorted."""
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise ScaffoldError(f"{directory} already exists and is not an empty folder: choose another --dir")
    written = []
    for relative, text in sorted(files.items()):
        path = directory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
