"""The plugin directory (docs/directory.toml -> docs/directory.md) keeps in step with the registry and the stored checks."""

from __future__ import annotations

import importlib.util
import json
import logging
import re
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from rllm_plugins.registry import available_estimators, get_estimator
from rllm_plugins.transforms.registry import all_transforms

ROOT = Path(__file__).resolve().parents[2]


def load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


directory = load("rllm_plugins_directory", ROOT / "tools" / "directory.py")
REFRESH = "run make directory"


@pytest.fixture(scope="module")
def entries():
    return directory.load_entries()


def test_every_built_in_estimator_and_transform_has_an_entry(entries):
    listed = {(e.kind, e.name) for e in entries}
    estimators = {n for n in available_estimators() if get_estimator(n).provider.kind == "builtin" and get_estimator(n).spec.name == n}
    transforms = {n for n, t in all_transforms().items() if t.provider.kind == "builtin"}
    assert estimators and transforms
    missing = sorted(({("estimator", n) for n in estimators} | {("transform", n) for n in transforms}) - listed)
    assert not missing, f"no entry in docs/directory.toml for {missing}: add one, then {REFRESH}"


def test_every_entry_names_something_real(entries):
    assert directory.problems(entries) == []
    for entry in entries:  # every entry of this repository's file is installed here (make install installs the example plugin)
        facts = directory.registered(entry)
        assert facts is not None and facts["distribution"] == entry.distribution, entry.name
        if entry.distribution == directory.PROJECT:
            assert entry.source == directory.PROJECT, entry.name
        else:
            assert entry.source.startswith("https://") or (ROOT / entry.source / "pyproject.toml").is_file(), entry.name
    names = {e.name for e in entries}
    assert "median_baseline" in names and not [n for n in names if "fixture" in n or n.startswith(("broken", "mistake"))]


def test_the_stored_results_hold_a_passing_check_of_every_entry(entries):
    stored = json.loads((ROOT / "docs" / "directory_results.json").read_text())
    assert stored["produced_by"] == "make directory"
    results = stored["results"]
    assert set(results) == {f"{e.kind}:{e.name}" for e in entries}, REFRESH
    for entry in entries:
        result = results[f"{entry.kind}:{entry.name}"]
        assert result["command"].split()[:3] == ["rllm-plugins", "check", entry.name], REFRESH
        assert result["ok"] and result["exit"] == 0 and result["passed"] > 0, result


@pytest.mark.parametrize("key", ["estimator:grpo", "estimator:composite", "transform:clip", "estimator:median_baseline"])
def test_a_check_run_now_gives_the_stored_result(entries, key):
    kind, name = key.split(":")
    (entry,) = [e for e in entries if (e.kind, e.name) == (kind, name)]
    assert directory.run_check(entry) == directory.load_results()[key], REFRESH


def test_the_page_is_what_the_generator_renders_now():
    page = (ROOT / "docs" / "directory.md").read_text()
    assert page == directory.rendered_now(), f"docs/directory.md is stale: {REFRESH}"
    assert "| `grpo` | outcome | `epsilon=1e-06` |" in page
    assert "| `clip` | sequence | `min=None`, `max=None` |" in page and "pass (" in page


def test_the_check_flag_and_the_docs_hook_refuse_a_stale_page(tmp_path, caplog, capsys):
    for name in ("tools/directory.py", "docs/directory.toml", "docs/directory_results.json", "docs/directory.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "examples" / "rllm-median-baseline").mkdir(parents=True)  # an entry's source, a folder of this repository
    copy = load("directory_copy", tmp_path / "tools" / "directory.py")
    assert copy.main(["--check"]) == 0
    hooks = load("docs_hooks_copy", ROOT / "docs_hooks.py")
    config = SimpleNamespace(config_file_path=str(tmp_path / "mkdocs.yml"))
    with caplog.at_level(logging.WARNING, logger="mkdocs.hooks"):
        hooks.on_pre_build(config)
    assert not caplog.records
    with (tmp_path / "docs" / "directory.toml").open("a") as f:
        f.write('\n[[entry]]\nname = "someone_elses"\nkind = "transform"\ndistribution = "rllm-someone"\nsource = "https://example.org/x"\ndescription = "x"\n')
    assert copy.main(["--check"]) == 1
    assert capsys.readouterr().err == "docs/directory.md is not what python tools/directory.py renders now: run make directory\n"
    with caplog.at_level(logging.WARNING, logger="mkdocs.hooks"):
        hooks.on_pre_build(config)
    assert [r.getMessage() for r in caplog.records] == ["docs/directory.md is not what python tools/directory.py renders now: run make directory"]
    assert copy.main([]) == 0 and copy.main(["--check"]) == 0  # a plugin not installed here is listed as such
    row = next(line for line in (tmp_path / "docs" / "directory.md").read_text().splitlines() if "someone_elses" in line)
    assert row == ("| `someone_elses` | not installed here | not installed here | x | plugin, `rllm-someone` | <https://example.org/x> | not run |")


def test_the_files_example_entry_is_a_valid_entry_and_bad_entries_are_refused(tmp_path):
    text = (ROOT / "docs" / "directory.toml").read_text()
    block = text.split("add one [[entry]] per name it registers, at the end of the file:\n#\n", 1)[1].split("\n#\n", 1)[0]
    example = "\n".join(re.sub(r"^#   ?", "", line) for line in block.splitlines())
    (tmp_path / "ok.toml").write_text(example)
    (entry,) = directory.load_entries(tmp_path / "ok.toml")
    assert (entry.name, entry.kind, entry.distribution, entry.source) == (
        "my_estimator",
        "estimator",
        "rllm-my-estimator",
        "https://github.com/you/rllm-my-estimator",
    )
    for change, message in [
        (('kind = "estimator"', 'kind = "estimators"'), "kind must be one of estimator, transform"),
        (("source = ", "sorce = "), "needs source; unknown field(s) sorce"),
        (('name = "my_estimator"', 'name = "My-Estimator"'), "name must be lower case"),
    ]:
        (tmp_path / "bad.toml").write_text(example.replace(*change))
        with pytest.raises(directory.DirectoryError, match=re.escape(message)):
            directory.load_entries(tmp_path / "bad.toml")
    (tmp_path / "twice.toml").write_text(example + "\n" + example)
    with pytest.raises(directory.DirectoryError, match="listed twice"):
        directory.load_entries(tmp_path / "twice.toml")
