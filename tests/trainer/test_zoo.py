"""The zoo's catalogue (trainer/zoo.py): `--inject` names parsed into zoo order, an unknown name
refused in one line, and the config changes a planted pattern makes."""
from __future__ import annotations

import pytest

from trainer import zoo


def test_parse_keeps_zoo_order_and_each_name_once():
    assert zoo.parse("no_amp, item_logging,no_amp") == ("item_logging", "no_amp")
    assert zoo.parse("") == () and zoo.parse(None) == ()
    with pytest.raises(ValueError, match=r"unknown anti-pattern 'nope'; valid: item_logging, "):
        zoo.parse("item_logging,nope")


def test_config_overrides_and_the_catalogue():
    assert zoo.config_overrides(("tiny_batch", "no_amp")) == {"n_envs": zoo.TINY_BATCH_ENVS, "amp": "off"}
    assert zoo.config_overrides(("item_logging",)) == {}
    assert zoo.config_overrides(("graph_break",)) == {"compile": "on"}
    assert zoo.NAMES[0] == "item_logging" and len(zoo.NAMES) == len(zoo.BY_NAME) == 12
    assert zoo.CUDA_ONLY == {"unfused_adam", "no_amp", "eager_update"}
    assert "tiny_batch" not in zoo.CPU_DETECTABLE and "memory_growth" in zoo.CPU_DETECTABLE
