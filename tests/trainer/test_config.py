"""trainer/config.py: the training configuration. Layered as preset, then TOML file (flat or a
[trainer] table), then flags; values checked by type (an int where a float is wanted is taken)
and by `validate` (one-line ConfigErrors). (`inject` made canonical: test_antipatterns.py.)"""
from __future__ import annotations

import pytest

from tests.support.helpers import write_tiny_config
from trainer.config import Config, ConfigError, build_config, load_toml, to_dict


def test_config_layers_preset_file_flags(tmp_path):
    cfg_file = write_tiny_config(tmp_path)
    cfg = build_config(cfg_file, device="cpu", seed=9)
    assert (cfg.n_envs, cfg.rollout_steps, cfg.seed, cfg.device) == (16, 8, 9, "cpu")
    assert build_config(None, device="cpu").n_envs == 128  # CPU preset
    with pytest.raises(ConfigError):
        build_config(None, device="cpu", minibatches=3)  # 128 * 32 not divisible by 3


def test_seed_in_a_config_file_out_of_range(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("seed = 1180591620717411303424\n")
    with pytest.raises(ConfigError, match=r"seed must be 0 to 2\*\*63-1 \(9223372036854775807\), "
                                          r"not 1180591620717411303424"):
        build_config(path, device="cpu")
    path.write_text("n_envs = 100000000000000000000\n")
    with pytest.raises(ConfigError, match="n_envs must be at most 2,147,483,647"):
        build_config(path, device="cpu")


def test_a_trainer_table_and_an_int_for_a_float(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[trainer]\nlr = 1\nn_envs = 8\nrollout_steps = 4\nminibatches = 2\n")
    assert load_toml(path) == {"lr": 1, "n_envs": 8, "rollout_steps": 4, "minibatches": 2}
    cfg = build_config(path, device="cpu")
    assert cfg.lr == 1.0 and isinstance(cfg.lr, float) and (cfg.n_envs, cfg.minibatches) == (8, 2)
    assert to_dict(cfg)["lr"] == 1.0 and to_dict(cfg)["device"] == "cpu"


@pytest.mark.parametrize("text, message", [
    ("lr = true\n", "config key lr must be float, not bool (True)"),
    ("n_envs = 2.5\n", "config key n_envs must be int, not float (2.5)"),
    ("device = 'tpu'\n", "device must be auto, cpu or cuda, not 'tpu'"),
    ("n_envz = 3\n", "{path}: unknown config keys: n_envz"),
    ("x = [\n", "{path}: not valid TOML: Invalid value (at end of document)"),
])
def test_a_bad_config_file_is_one_line(tmp_path, text, message):
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        build_config(path)
    assert str(info.value) == message.format(path=path)
    with pytest.raises(ConfigError, match=r"gone\.toml: no such config file$"):
        build_config(tmp_path / "gone.toml")


@pytest.mark.parametrize("change, message", [
    ({"view_size": 4}, "view_size must be odd and >= 3, not 4"),
    ({"grid_size": 3}, "grid_size must be >= 4, not 3"),
    ({"n_food": 40}, "n_food + n_decoy = 44 do not fit a 11x11 grid"),
    ({"value_head": "x"}, "value_head must be plain or popart, not 'x'"),
    ({"popart_beta": 0.0}, "popart_beta must be in (0, 1], not 0.0"),
    ({"amp": "yes"}, "amp must be auto, on or off, not 'yes'"),
    ({"epochs": 0}, "epochs must be >= 1, not 0"),
    ({"total_iterations": -1}, "total_iterations and checkpoint_every must be >= 0"),
    ({"inject": "fast"}, "inject: unknown anti-pattern 'fast'; valid: "),
])
def test_validate_says_what_is_wrong(change, message):
    with pytest.raises(ConfigError) as info:
        Config(**change).validate()
    assert str(info.value).startswith(message)
    assert Config().validate() == Config()  # the defaults are valid


def test_a_boolean_for_an_int_key_is_refused(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("epochs = true\n")
    with pytest.raises(ConfigError, match="config key epochs must be int, not bool"):
        build_config(path, device="cpu")
