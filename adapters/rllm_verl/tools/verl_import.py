"""Why verl cannot be imported here, and the fix: one verdict in place of a traceback.

:func:`verl_import_error` imports the verl modules a command needs and, when one fails, says what failed and how
to fix it, in one string ``"<what failed>. Fix: <the fix>"`` (None when they import):

- ``VERL_USE_EXTERNAL_MODULES`` naming a module that does not import: ``import verl`` imports each comma-separated
  name as is, unstripped, so ``"json, rllm_verl.plugin"`` fails on ``' rllm_verl'`` and ``"rllm_verl.plugins"`` on
  the typo; the fix is the corrected line (:func:`~rllm_verl.tools.loading.external_modules_error`);
- a module of that variable that raises while imported: where it raised;
- numpy, pyarrow or transformers releases verl does not run with (pyarrow 26 refuses numpy 1; verl 0.7 and 0.8 run
  with numpy 1 and transformers 4): the versions installed and the pins (:data:`OLD_VERL_PINS`);
- anything else: the error, where it was raised, and the command that shows the whole traceback.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import traceback
from collections.abc import Mapping, Sequence

from rllm_verl.tools.loading import external_modules_error

__all__ = ["OLD_VERL_PINS", "REHEARSE_MODULES", "import_error_verdict", "verl_import_error"]

OLD_VERL_PINS = ("numpy<2", "transformers<5", "pyarrow<26")
"""What verl 0.7.1 and 0.8.0 run with: numpy 1, transformers 4, and a pyarrow that still takes numpy 1."""
REHEARSE_MODULES = ("verl", "verl.experimental.agent_loop.agent_loop", "verl.trainer.ppo.ray_trainer")
"""The verl modules ``verl-rehearse`` imports (the agent loop imports ``datasets``, and so pyarrow)."""
DEPENDENCIES = ("numpy", "pyarrow", "transformers")


def verl_import_error(modules: Sequence[str] = ("verl",), environ: Mapping[str, str] | None = None) -> str | None:
    """Import each of ``modules`` (``import verl`` first); None when they import, else :func:`import_error_verdict` of the first
    failure. ``environ`` (default ``os.environ``) is read for ``VERL_USE_EXTERNAL_MODULES``; verl itself reads ``os.environ``."""
    from rllm_verl.versions import installed_verl_version

    if installed_verl_version() is None:
        return "verl is not installed in this Python environment. Fix: pip install 'rllm-plugins[verl]'"
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as error:
            return import_error_verdict(module, error, environ)
    return None


def import_error_verdict(
    module: str,
    error: BaseException,
    environ: Mapping[str, str] | None = None,
    verl_version: str | None = None,
    installed: Mapping[str, str] | None = None,
) -> str:
    """What failed when importing ``module`` raised ``error``, and the fix (``"<what failed>. Fix: <the fix>"``).

    ``verl_version`` and ``installed`` (the versions of numpy, pyarrow and transformers) default to those installed."""
    from rllm_verl.versions import EXTERNAL_MODULES_ENV, installed_verl_version, parse_version

    environ = os.environ if environ is None else environ
    raw = environ.get(EXTERNAL_MODULES_ENV, "")
    version = verl_version or installed_verl_version() or "?"
    failed = f"{type(error).__name__}: {error}"
    modules_error = external_modules_error(environ) if raw else None
    if modules_error is not None:  # a name of the list is no module (a space, an empty name, a typo): whatever import verl raised
        return f"import verl fails ({failed}): {modules_error}"
    frames = traceback.extract_tb(error.__traceback__)
    if raw and any(frame.name == "import_external_libs" for frame in frames):
        return (
            f"import verl fails: it imports the modules named in {EXTERNAL_MODULES_ENV}={raw!r}, and one raised {failed}{_at(frames)}. "
            f"Fix: correct that module, or leave it out of {EXTERNAL_MODULES_ENV}"
        )
    installed = _installed(DEPENDENCIES) if installed is None else installed
    shaped = any(f"{os.sep}{name}{os.sep}" in frame.filename for frame in frames for name in DEPENDENCIES) or any(
        name in str(error).lower() for name in DEPENDENCIES
    )
    known = parse_version(version) if version != "?" else None
    if shaped:
        what = f"{module} cannot be imported: {failed}{_at(frames)} ({', '.join(f'{n} {v}' for n, v in installed.items())} installed)"
        if known is not None and known < (0, 9, 0):
            pins = " ".join(f"'{pin}'" for pin in OLD_VERL_PINS)
            return f"{what}. Fix: pip install {pins} (verl {version} runs with numpy 1 and transformers 4, and pyarrow 26 refuses numpy 1)"
        if "pyarrow" in installed and parse_version(installed["pyarrow"]) >= (26, 0, 0) and parse_version(installed.get("numpy", "2")) < (2, 0, 0):
            return f"{what}. Fix: pip install 'numpy>=2' (pyarrow 26 refuses numpy 1), or pip install 'pyarrow<26' to keep numpy 1"
        return f"{what}. Fix: install the numpy, pyarrow and transformers releases verl {version} requires: pip install 'verl=={version}'"
    return (
        f"{module} cannot be imported: {failed}{_at(frames)}. "
        f"Fix: python -c 'import {module}' shows the whole traceback; install or repair the package it names"
    )


def _installed(names: Sequence[str]) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in names:
        with contextlib.suppress(PackageNotFoundError):
            found[name] = version(name)
    return found


def _at(frames: traceback.StackSummary) -> str:
    """`` (at file:line)`` of the innermost frame outside importlib's bootstrap."""
    inner = [f for f in frames if "importlib" not in f.filename and not f.filename.startswith("<")]
    return f" (at {inner[-1].filename}:{inner[-1].lineno})" if inner else ""
