"""The path table of the conformance matrix: the ways an estimator's advantages are computed, and the wrappers around them.

A :class:`Path` takes a :class:`Call` (estimator name and options) and a :class:`~.samples.Sample`, encodes
the sample as its framework does, runs, and returns the advantages flat, one per step (:class:`Output`). The
core contributes the paths below; an adapter contributes its own through the entry-point group
:data:`PATHS_GROUP` (``name = "module:function"``, ``function() -> list[Path]``), so the core never imports
an adapter: ``rllm_verl`` adds verl's ``compute_advantage``, ``rllm_trl`` TRL's outcome and turn paths.

Core paths: ``collector`` (the reference), ``list_form`` and ``batched_form`` (the spec's two forms called
directly); wrappers: ``composite_term`` (``composite([[e, 1.0, options]])``), ``gdpo_one_key`` (one named
reward, ``normalize_then_sum``: the estimator, then whitening over the role) and ``per_role_map`` (the
estimator for one role of ``estimator_map`` beside another role).

Every path that takes advantage transforms (``Path.takes_transforms``: the collector, and each of verl's and
TRL's paths) is followed by its transformed twin, ``<path>+transforms`` (:func:`transformed_twin`): the same path
with :data:`TWIN_TRANSFORMS` selected as its framework's users select them (a batch statistic, ``whiten`` centring
over every unit, then the elementwise ``clip`` and ``scale``), compared with :func:`centred_clipped_and_scaled` of
the untransformed path's own output: a path that hands a transform other units than its estimator compared (padding
rows, outputs of a session) fails there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from importlib import metadata
from typing import Any

import numpy as np

from ...advantage import collect_reward_and_advantage_from_trajectory_groups
from ...calling import call_with_accepted_kwargs
from ...config import AlgorithmConfig
from ...needs import needs_of
from ...registry import get_estimator
from ...segments import offsets_from_sizes
from ...state.store import check_state
from ...steps.forms import batch_from_lists, split_step_output
from ...types import Step, Trajectory, TrajectoryGroup
from .samples import MODEL_TOKEN, Sample

__all__ = [
    "COLLECTOR",
    "PATHS_GROUP",
    "PROMPT",
    "TRANSFORMS",
    "TWIN_TRANSFORMS",
    "Call",
    "Output",
    "Path",
    "batched_returns",
    "centred_clipped_and_scaled",
    "clipped_and_scaled",
    "core_paths",
    "group_paths",
    "installed_paths",
    "path_groups",
    "path_table",
    "transform_table",
    "transform_twin",
    "transformed_by",
    "transformed_twin",
]

PATHS_GROUP = "rllm_plugins.conformance_paths"
PROMPT = (1, 2)  # the prompt token ids of every task group (the anchor of every first step)


@dataclass(frozen=True)
class Call:
    """One estimator call: its registered ``name`` and ``options`` (estimator keyword arguments); ``transforms`` the advantage
    transforms selected after it (entries ``("name", {options})``), which a path taking them selects as its framework's users do."""

    name: str
    options: Mapping[str, Any]
    transforms: tuple[tuple[str, Mapping[str, Any]], ...] = ()

    @property
    def level(self) -> str:
        return get_estimator(self.name).spec.level

    @property
    def stateful(self) -> bool:
        return get_estimator(self.name).spec.stateful

    @property
    def needs_values(self) -> bool:
        return get_estimator(self.name).spec.needs_values


@dataclass
class Output:
    """Advantages float64 ``(S,)`` one per step of the sample, the state after the call (stateful paths), the padding rows'
    advantages and a value-based estimator's returns ``(S,)`` (the critic's targets) where the path gives them."""

    advantages: np.ndarray
    state: dict[str, Any] | None = None
    padding: np.ndarray | None = None
    returns: np.ndarray | None = None


Runner = Callable[[Call, Sample, "Mapping[str, Any] | None"], Output]


@dataclass(frozen=True)
class Path:
    """One path or wrapper.

    ``run(call, sample, state)`` -> :class:`Output` (``state``: what a previous ``Output.state`` held, None at first);
    ``levels`` the estimator levels it takes; ``dtype`` the float type it computes its output in (the tolerance of
    every comparison); ``max_reward`` the largest reward its input type holds; ``keeps_state`` whether it carries a
    stateful estimator's state; ``pad(call, sample, n)`` runs with ``n`` rows without model tokens appended (their
    advantages in ``Output.padding``); ``configure(name, options)`` runs the path's config-time checks;
    ``reference(collector_advantages, sample)`` what the collector's output becomes on this path (default: itself);
    ``run_composite`` how the same framework runs a ``composite`` of this path's estimators when the path itself
    takes no step-level estimator (verl routes it to the step bridge, TRL to its turn path). ``takes_transforms``:
    ``run`` and ``pad`` select ``Call.transforms`` as the framework's users do, and the matrix adds the path's
    transformed twin (:func:`transformed_twin`); ``base`` is set on a twin: the untransformed path, whose output its
    ``reference`` transforms (instead of the collector's).
    """

    name: str
    kind: str  # "path" or "wrapper"
    framework: str
    description: str
    run: Runner
    levels: tuple[str, ...] = ("outcome", "step")
    dtype: str = "float64"
    max_reward: float = 1e300
    keeps_state: bool = False
    pad: Callable[[Call, Sample, int], Output] | None = None
    configure: Callable[[str, Mapping[str, Any]], object] | None = field(default=None)
    reference: Callable[[np.ndarray, Sample], np.ndarray] | None = field(default=None)
    stateful: bool = True  # whether it takes stateful estimators at all
    refuses: Mapping[str, str] = field(default_factory=dict)  # estimator name -> why this path does not take it
    fast_configure: bool = True  # False: ``configure`` takes seconds (the fast sample skips it)
    run_composite: Runner | None = None  # how this framework runs a composite (step-level) of the estimators this path takes
    critic_values: str | None = "this path's sample carries no critic values yet (value-based estimators: their own tests)"  # None: it hands them over
    # False where the path's own output breaks the scale law by design (a clip saturates: an unnormalised estimator's
    # rounding noise at rewards x 1e150, 1e-16 relative, becomes the clip's bound); the scale relation then checks
    # finiteness and refusals only, and the law itself on the paths without the wrapper
    scale_law: bool = True
    takes_transforms: bool = False
    base: Path | None = None

    def not_applicable(self, call: Call) -> str | None:
        """Why this path does not take ``call``'s estimator (None: it does)."""
        if call.name in self.refuses:
            return self.refuses[call.name]
        if call.level not in self.levels:
            return f"{call.level}-level estimators do not run on {self.name}"
        if call.stateful and not self.stateful:
            return f"{self.name} takes no stateful estimator"
        if call.needs_values and self.critic_values is not None:  # else it would refuse alike everywhere, read as a pass
            return self.critic_values
        return None


def trajectory_groups(sample: Sample, role: str | None = None) -> list[TrajectoryGroup]:
    """The sample as rLLM objects: one step per sample step (``response_ids`` its model tokens, ``metadata["anchor_state"]``)."""
    groups = []
    for g, group in enumerate(sample.groups):
        trajectories = []
        for traj in group:
            steps = [
                Step(
                    prompt_ids=list(PROMPT),
                    response_ids=[MODEL_TOKEN + k] * n,
                    reward=0.0 if sample.level == "outcome" else r,
                    metadata={"anchor_state": anchor if anchor else ("prompt",)},
                    value=traj.values[k] if traj.values else None,
                )
                for k, (r, n, anchor) in enumerate(zip(traj.step_rewards, traj.lengths, traj.anchors, strict=True))
            ]
            trajectories.append(Trajectory(steps=steps, reward=traj.reward))
        groups.append(TrajectoryGroup(trajectories, group_id=f"task{g}" + (f":{role}" if role else "")))
    return groups


def step_advantages(groups: list[TrajectoryGroup]) -> np.ndarray:
    """Every step's advantage, flat in (group, trajectory, step) order."""
    return np.array([float(step.advantage) for group in groups for traj in group.trajectories for step in traj.steps], dtype=np.float64)


def _config(call: Call, state: Mapping[str, Any] | None, **fields: Any) -> AlgorithmConfig:
    config = AlgorithmConfig(estimator=call.name, estimator_kwargs=dict(call.options), **fields)
    if state is not None:
        config.estimator_state.load_state_dict(state)
    return config


def _collector(call: Call, sample: Sample, state: Mapping[str, Any] | None) -> Output:
    groups = trajectory_groups(sample)
    config = _config(call, state, advantage_transforms=[list(entry) for entry in call.transforms])
    collect_reward_and_advantage_from_trajectory_groups(groups, config)
    return Output(step_advantages(groups), config.estimator_state.state_dict())


def _configure_core(name: str, options: Mapping[str, Any]) -> None:
    """The core's checks before any estimator runs: the config, then the collector's option checks (on no groups)."""
    collect_reward_and_advantage_from_trajectory_groups([], AlgorithmConfig(estimator=name, estimator_kwargs=dict(options)))


def _outcome_inputs(sample: Sample) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    rewards = [np.array([t.reward for t in group], dtype=np.float64) for group in sample.groups]
    lengths = np.array([float(sum(t.lengths)) for group in sample.groups for t in group])
    task_ids = np.array([f"task{g}" for g, group in enumerate(sample.groups) for _ in group], dtype=object)
    return rewards, lengths, task_ids


def _step_inputs(sample: Sample) -> tuple[list[np.ndarray], list[list[np.ndarray]], list[list[list[Any]]]]:
    rewards = [np.array([t.reward for t in group], dtype=np.float64) for group in sample.groups]
    step_rewards = [[np.array(t.step_rewards, dtype=np.float64) for t in group] for group in sample.groups]
    anchors = [[[a if a else ("prompt",) for a in t.anchors] for t in group] for group in sample.groups]
    return rewards, step_rewards, anchors


def _critic_inputs(sample: Sample) -> dict[str, list[list[np.ndarray]]]:
    """A value-based estimator's nested ``step_values`` and ``step_tokens`` (each step's model tokens), as the list form takes them."""
    return {
        "step_values": [[np.array(t.values, dtype=np.float64) for t in group] for group in sample.groups],
        "step_tokens": [[np.array(t.lengths, dtype=np.float64) for t in group] for group in sample.groups],
    }


def _flat(by_group: Any) -> np.ndarray:
    return np.concatenate([np.asarray(a, dtype=np.float64).reshape(-1) for a in by_group]) if len(by_group) else np.zeros(0)


def _per_step(sample: Sample, per_trajectory: np.ndarray) -> np.ndarray:
    """One value per trajectory -> one per step (an outcome-level estimator's value on each of its steps)."""
    return np.repeat(per_trajectory, [len(t.step_rewards) for group in sample.groups for t in group])


def _as_owners_keep(call: Call, state: Any) -> dict[str, Any]:
    """A form's new state as every owner keeps it (numpy scalars as Python numbers; ``ValueError`` for what is not plain data),
    so the forms' state is what a checkpoint saves."""
    return check_state(state, f"estimator {call.name!r}", "the new state")


def _list_form(call: Call, sample: Sample, state: Mapping[str, Any] | None) -> Output:
    spec = get_estimator(call.name).spec
    options = dict(call.options)
    if spec.level == "step":  # what it reads with these options (a composite's terms: lengths, a state) from the groups
        rewards, step_rewards, anchors = _step_inputs(sample)
        kwargs = {"algorithm_config": AlgorithmConfig(estimator=call.name), "traj_groups": trajectory_groups(sample), "norm_adv_by_std_in_grpo": True}
        if needs_of(spec, options).values:
            kwargs.update(_critic_inputs(sample))
        if needs_of(spec, options).state:
            kwargs.update(state=dict(state or {}), task_ids=_outcome_inputs(sample)[2])
            (advantages, _), new_state = call_with_accepted_kwargs(spec.list_form, rewards, step_rewards, anchors, **kwargs, **options)
            return Output(_flat([a for group in advantages for a in group]), _as_owners_keep(call, new_state))
        advantages, returns = call_with_accepted_kwargs(spec.list_form, rewards, step_rewards, anchors, **kwargs, **options)
        by_step = _flat([r for group in returns for r in group]) if needs_of(spec, options).values else None
        return Output(_flat([a for group in advantages for a in group]), returns=by_step)
    rewards, _, task_ids = _outcome_inputs(sample)
    groups = trajectory_groups(sample)
    kwargs = {"rewards": rewards, "algorithm_config": AlgorithmConfig(estimator=call.name), "traj_groups": groups, "norm_adv_by_std_in_grpo": True}
    if spec.stateful:
        (advantages, _), new_state = call_with_accepted_kwargs(spec.list_form, state=dict(state or {}), task_ids=task_ids, **kwargs, **options)
        return Output(_per_step(sample, _flat(advantages)), _as_owners_keep(call, new_state))
    advantages, _ = call_with_accepted_kwargs(spec.list_form, **kwargs, **options)
    return Output(_per_step(sample, _flat(advantages)))


def _batched_form(call: Call, sample: Sample, state: Mapping[str, Any] | None) -> Output:
    spec = get_estimator(call.name).spec
    options = {**call.options, "norm_adv_by_std_in_grpo": True}
    if spec.level == "step":  # what it reads with these options (a composite's terms: lengths, a state) in the batch
        needs = needs_of(spec, call.options)
        _, lengths, task_ids = _outcome_inputs(sample)
        batch = batch_from_lists(*_step_inputs(sample), **(_critic_inputs(sample) if needs.values else {}))
        batch = replace(batch, lengths=lengths) if needs.lengths else batch
        config = AlgorithmConfig(estimator=call.name)
        if needs.state:
            advantages, new_state = call_with_accepted_kwargs(
                spec.batched_form, batch, algorithm_config=config, state=dict(state or {}), task_ids=task_ids, **options
            )
            return Output(np.asarray(advantages, dtype=np.float64), _as_owners_keep(call, new_state))
        result = call_with_accepted_kwargs(spec.batched_form, batch, algorithm_config=config, **options)
        advantages, returns = split_step_output(result, needs.values, batch.num_steps, f"estimator {call.name!r}")
        return Output(advantages, returns=returns if needs.values else None)
    rewards, lengths, task_ids = _outcome_inputs(sample)
    values = np.concatenate(rewards)
    offsets = offsets_from_sizes([r.size for r in rewards])
    if spec.stateful:
        advantages, new_state = call_with_accepted_kwargs(
            spec.batched_form, values, offsets, state=dict(state or {}), lengths=lengths, task_ids=task_ids, **options
        )
        return Output(_per_step(sample, np.asarray(advantages, dtype=np.float64)), _as_owners_keep(call, new_state))
    return Output(_per_step(sample, np.asarray(call_with_accepted_kwargs(spec.batched_form, values, offsets, lengths=lengths, **options), dtype=np.float64)))


def batched_returns(call: Call, sample: Sample) -> np.ndarray | None:
    """A value-based estimator's returns from the spec's batched form, one per step (None for others): the reference of a path's returns."""
    return _batched_form(call, sample, None).returns


def _composite_term(call: Call, sample: Sample, state: Mapping[str, Any] | None) -> Output:
    term = Call("composite", {"terms": [[call.name, 1.0, dict(call.options)]]})
    return _collector(term, sample, state)


GDPO_KEY = "score"


def _gdpo_one_key(call: Call, sample: Sample, state: Mapping[str, Any] | None) -> Output:
    groups = trajectory_groups(sample)
    for group in groups:
        for traj in group.trajectories:
            traj.metadata = {"rewards": {GDPO_KEY: traj.reward}}
    config = _config(call, state, multi_objective_aggregation="normalize_then_sum")
    collect_reward_and_advantage_from_trajectory_groups(groups, config)
    return Output(step_advantages(groups), config.estimator_state.state_dict())


def whitened(advantages: np.ndarray, _sample: Sample) -> np.ndarray:
    """GDPO's last step written plainly: ``(a - mean) / (sample std + 1e-6)`` over the role, 0 for fewer than two values."""
    if advantages.size < 2:
        return np.zeros_like(advantages)
    mean = sum(advantages.tolist()) / advantages.size
    std = (sum((a - mean) ** 2 for a in advantages.tolist()) / (advantages.size - 1)) ** 0.5
    return (advantages - mean) / (std + 1e-6)


OTHER_ROLE, ROLE = "judge", "solver"


def _per_role_map(call: Call, sample: Sample, state: Mapping[str, Any] | None) -> Output:
    mine = trajectory_groups(sample, ROLE)
    other = trajectory_groups(Sample(tuple((g[0],) * 2 if g else () for g in sample.groups), sample.level), OTHER_ROLE)
    config = AlgorithmConfig(estimator="grpo", estimator_map={ROLE: call.name}, estimator_kwargs=dict(call.options))
    if state is not None:
        config.estimator_state.load_state_dict(state)
    interleaved = [g for pair in zip(other, mine, strict=True) for g in pair]
    collect_reward_and_advantage_from_trajectory_groups(interleaved, config)
    return Output(step_advantages(mine), config.estimator_state.state_dict())


TRANSFORMS = (("clip", {"min": -0.5, "max": 0.5}), ("scale", {"negative": 0.5}))  # elementwise: they apply token by token too
TWIN_TRANSFORMS = (("whiten", {"std": False}), *TRANSFORMS)  # a batch statistic first: the mean sees every unit, and only units
TWIN_SUFFIX = "+transforms"


def clipped_and_scaled(advantages: np.ndarray, _sample: Sample) -> np.ndarray:
    """:data:`TRANSFORMS` written plainly: clipped to [-0.5, 0.5], then the negative ones halved."""
    clipped = np.minimum(np.maximum(advantages, -0.5), 0.5)
    return np.where(clipped < 0, clipped * 0.5, clipped)


def centred_clipped_and_scaled(advantages: np.ndarray, sample: Sample) -> np.ndarray:
    """:data:`TWIN_TRANSFORMS` written plainly: each unit minus the mean over the batch's units (its trajectories, or its
    steps at the step level: the path's own output, padding in none), then :func:`clipped_and_scaled`."""
    values = np.asarray(advantages, dtype=np.float64)
    mean = sum(values.tolist()) / values.size if values.size else 0.0
    return clipped_and_scaled(values - mean, sample)


def transformed_twin(path: Path) -> Path:
    """``path`` with :data:`TWIN_TRANSFORMS` selected after every estimator (its framework's way), compared with
    :func:`centred_clipped_and_scaled` of ``path``'s own output on the same call: a wrapper named ``<path>+transforms``."""

    def with_transforms(call: Call) -> Call:
        return replace(call, transforms=TWIN_TRANSFORMS)

    def run(call: Call, sample: Sample, state: Mapping[str, Any] | None) -> Output:
        return path.run(with_transforms(call), sample, state)

    pad = path.pad

    def padded(call: Call, sample: Sample, n: int) -> Output:
        assert pad is not None
        return pad(with_transforms(call), sample, n)

    return replace(
        path,
        name=path.name + TWIN_SUFFIX,
        kind="wrapper",
        description=f"{path.name}, then advantage_transforms whiten (centred), clip to [-0.5, 0.5], scale negative 0.5 as its users select them",
        run=run,
        pad=padded if pad is not None else None,
        reference=centred_clipped_and_scaled,
        run_composite=None,
        scale_law=False,  # a clip saturates: the advantages no longer scale with the rewards
        takes_transforms=False,
        base=path,
    )


def transform_table() -> list[str]:
    """Every advantage transform an installed plugin offers that runs on one value per unit (sequence level), sorted: each
    joins the matrix by being installed, as an estimator does (:func:`transform_twin`). Transforms registered in user code
    (a test module's) stay out: the matrix's tables are those of the installation."""
    from ...transforms.registry import all_transforms  # the registry of transforms, read when the table is built

    return sorted(name for name, t in all_transforms().items() if t.provider.kind == "plugin" and t.spec.level == "sequence")


def _units(sample: Sample) -> tuple[np.ndarray, dict[str, Any]]:
    """Where each unit of ``sample`` starts among its steps (a trajectory at the outcome level, a step at the step level),
    and the context every path hands a transform for those units (offsets by task group, their rewards, scores, lengths)."""
    trajectories = [t for group in sample.groups for t in group]
    steps = [len(t.step_rewards) for t in trajectories]
    if sample.level == "outcome":
        sizes = [len(group) for group in sample.groups]
        starts = np.concatenate([[0], np.cumsum(steps)[:-1]]).astype(np.int64) if steps else np.zeros(0, dtype=np.int64)
        rewards = np.array([t.reward for t in trajectories], dtype=np.float64)
        lengths = np.array([float(sum(t.lengths)) for t in trajectories])
        turn_index = np.zeros(len(trajectories), dtype=np.int64)
        traj_offsets = np.arange(len(trajectories) + 1, dtype=np.int64)
    else:
        sizes = [sum(len(t.step_rewards) for t in group) for group in sample.groups]
        starts = np.arange(sum(steps), dtype=np.int64)
        rewards = np.array([r for t in trajectories for r in t.step_rewards], dtype=np.float64)
        lengths = np.array([float(n) for t in trajectories for n in t.lengths])
        turn_index = np.array([k for t in trajectories for k in range(len(t.step_rewards))], dtype=np.int64)
        traj_offsets = offsets_from_sizes(steps)
    context = {"offsets": offsets_from_sizes(sizes), "rewards": rewards, "scores": rewards, "lengths": lengths, "turn_index": turn_index}
    return starts, {**context, "traj_offsets": traj_offsets}


def transformed_by(name: str) -> Callable[[np.ndarray, Sample], np.ndarray]:
    """The reference of ``name``'s twin: the transform applied to the untransformed path's output, one value per unit of the
    sample (trajectories or steps) with the context the sample gives, back on every step of its unit."""

    def reference(advantages: np.ndarray, sample: Sample) -> np.ndarray:
        from ...transforms import apply_transforms

        starts, context = _units(sample)
        values = np.asarray(advantages, dtype=np.float64)
        if not starts.size:
            return values.copy()
        out, _ = apply_transforms(values[starts], [(name, {})], **context)
        per_unit = np.diff(np.append(starts, values.size))
        return np.repeat(out, per_unit)

    return reference


def transform_twin(path: Path, name: str) -> Path:
    """``path`` with the transform ``name`` selected after every estimator (its framework's way), compared with
    :func:`transformed_by` of ``path``'s own output: a wrapper named ``<path>+<name>``, so that a path that hands a transform
    other units, groups or context than the sample's fails there."""
    twin = transformed_twin(path)

    def run(call: Call, sample: Sample, state: Mapping[str, Any] | None) -> Output:
        return path.run(replace(call, transforms=((name, {}),)), sample, state)

    pad = path.pad

    def padded(call: Call, sample: Sample, n: int) -> Output:
        assert pad is not None
        return pad(replace(call, transforms=((name, {}),)), sample, n)

    return replace(
        twin,
        name=f"{path.name}+{name}",
        description=f"{path.name}, then the advantage transform {name} as its users select it",
        run=run,
        pad=padded if pad is not None else None,
        reference=transformed_by(name),
    )


def with_twins(paths: list[Path]) -> list[Path]:
    """``paths``, each path that takes transforms followed by its :func:`transformed_twin` and by one :func:`transform_twin`
    per transform of :func:`transform_table` (installed plugins')."""
    names = transform_table()
    out: list[Path] = []
    for p in paths:
        out.append(p)
        if p.takes_transforms:
            out += [transformed_twin(p), *(transform_twin(p, name) for name in names)]
    return out


COLLECTOR = Path(
    "collector",
    "path",
    "core",
    "collect_reward_and_advantage_from_trajectory_groups (the reference)",
    _collector,
    keeps_state=True,
    configure=_configure_core,
    critic_values=None,
    takes_transforms=True,
)


def core_paths() -> list[Path]:
    """The core's paths and wrappers (the collector's transformed twin after it)."""
    return with_twins(
        [
            COLLECTOR,
            Path("list_form", "path", "core", "the spec's list form, called as rLLM calls it", _list_form, keeps_state=True, critic_values=None),
            Path("batched_form", "path", "core", "the spec's batched form over flat values and offsets", _batched_form, keeps_state=True, critic_values=None),
            Path(
                "composite_term",
                "wrapper",
                "core",
                "composite([[e, 1.0, options]]) in the collector",
                _composite_term,
                keeps_state=True,
                refuses={"composite": "a composite is no term of a composite"},
                critic_values="composite refuses a value-based term: its returns are a critic's targets, which a sum of terms has not",
            ),
            Path(
                "gdpo_one_key",
                "wrapper",
                "core",
                "one named reward, normalize_then_sum (GDPO): e, then whitening",
                _gdpo_one_key,
                levels=("outcome",),
                reference=whitened,
                stateful=False,
            ),
            Path("per_role_map", "wrapper", "core", "estimator_map={role: e} beside a role running grpo", _per_role_map, keeps_state=True, critic_values=None),
        ]
    )


def path_groups() -> list[str]:
    """The names of the entry points of :data:`PATHS_GROUP` (``trl``, ``verl``, ``verl_v1``), sorted; nothing is imported."""
    return sorted({ep.name for ep in metadata.entry_points(group=PATHS_GROUP)})


def group_paths(group: str) -> list[Path] | str:
    """The paths the entry point ``group`` of :data:`PATHS_GROUP` contributes, without twins; or, when the adapter's
    framework is not installed, why none (``"No module named 'verl'"``)."""
    contributed: list[Path] = []
    for ep in sorted(metadata.entry_points(group=PATHS_GROUP), key=lambda ep: ep.value):
        if ep.name != group:
            continue
        try:
            contribute = ep.load()
        except ModuleNotFoundError as error:  # the adapter's framework is not installed; a module of the adapter's own is a bug
            if error.name is None or error.name.split(".")[0] == ep.module.split(".")[0]:
                raise
            return str(error)
        contributed.extend(contribute())
    return contributed


def installed_paths() -> list[Path]:
    """The paths adapters contribute through :data:`PATHS_GROUP` (each that takes transforms followed by its transformed twin);
    an adapter whose framework is missing contributes none."""
    paths: list[Path] = []
    for group in path_groups():
        contributed = group_paths(group)
        paths.extend(contributed if isinstance(contributed, list) else [])
    return with_twins(paths)


def path_table() -> list[Path]:
    """Every path and wrapper: the core's, then the installed adapters'."""
    return [*core_paths(), *installed_paths()]
