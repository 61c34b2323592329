"""docs/axolotl.md: every YAML block passes axolotl's validation and selects what the page says; the layout, the architecture and
the site name every module of ``rllm_axolotl``. The page's checks need axolotl (they skip without it); the others run anywhere."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "axolotl.md"
TEXT = PAGE.read_text()
ADAPTER = ROOT / "adapters" / "rllm_axolotl"
MODULES = sorted(p.stem for p in ADAPTER.glob("*.py") if p.name != "__init__.py")


def yaml_blocks() -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", TEXT, re.S)


def test_the_layout_names_every_module_of_the_adapter_and_no_other():
    layout = re.search(r"```\n(.*?)```", (ROOT / "docs" / "layout.md").read_text(), re.S).group(1).splitlines()
    (line,) = [line for line in layout if line.startswith("adapters/rllm_axolotl/")]
    assert sorted(name.strip() for name in line.split("): ", 1)[1].split(",")) == MODULES


def test_the_architecture_names_every_module_of_the_adapter():
    text = (ROOT / "docs" / "architecture.md").read_text()
    for module in MODULES:
        assert f"`rllm_axolotl/{module}.py`" in text, module


def test_the_site_and_the_package_list_have_the_adapter():
    assert "      - axolotl: axolotl.md\n" in (ROOT / "mkdocs.yml").read_text()
    assert '"rllm_axolotl*"' in (ROOT / "pyproject.toml").read_text()


def test_the_page_has_its_yaml():
    assert len(yaml_blocks()) == 2 and all("rllm_axolotl.RLLMAdvantagePlugin" in block for block in yaml_blocks())


@pytest.mark.parametrize("index", range(2))
def test_every_yaml_block_passes_axolotls_validation_with_what_the_page_says(index, tmp_path):
    pytest.importorskip("axolotl")
    os.environ.setdefault("AXOLOTL_DO_NOT_TRACK", "1")
    import yaml
    from axolotl.utils.config import prepare_plugins, validate_config
    from axolotl.utils.dict import DictDefault
    from rllm_axolotl.args import resolve

    page = yaml.safe_load(yaml_blocks()[index])
    rest = {  # what any axolotl config needs besides the page's lines
        "base_model": "tiny/never-loaded",
        "datasets": [{"path": "data.jsonl", "ds_type": "json", "split": "train"}],
        "micro_batch_size": 8,
        "gradient_accumulation_steps": 1,
        "learning_rate": 1e-3,
        "sequence_len": 64,
        "output_dir": str(tmp_path),
    }
    trl = {"num_generations": 4, "reward_funcs": ["m.r"], **page.pop("trl", {})}
    cfg = DictDefault({**rest, **page, "trl": trl})
    prepare_plugins(cfg)
    validated = validate_config(cfg)
    settings = resolve(validated, validated.rllm)
    assert settings.estimator == page["rllm"]["adv_estimator"]
    assert [c.name for c in settings.transforms] == [t["name"] for t in page["rllm"].get("advantage_transforms", [])]
    assert [c.name for c in settings.shapers] == [s["name"] for s in page["rllm"].get("reward_shapers", [])]


def test_the_refusals_the_page_shows_are_the_programs():
    pytest.importorskip("axolotl")
    from rllm_axolotl.versions import REFUSED

    for refused in REFUSED:
        assert f"| `{refused.trainer}` |" in TEXT
    shown = re.search(r"```text\n(rllm: axolotl picks .*?): \.\.\.\n(.*?)\n```", TEXT, re.S)
    first = REFUSED[0]
    assert shown.group(1) == f"rllm: axolotl picks {first.trainer} for {first.when}, and rllm-plugins does not support it"
    assert shown.group(2) == f"Train with AxolotlGRPOTrainer (leave {first.when} unset) to select the advantages, or drop the rllm block"
