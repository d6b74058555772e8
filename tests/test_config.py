from __future__ import annotations

import re
from pathlib import Path

import pytest

from kohakutt import config
from kohakutt.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def test_defaults_and_parsing(knobs):
    assert config.get("KTT_BACKEND") == "sim"
    assert config.get("KTT_L1_BUDGET") is None
    knobs(KTT_L1_BUDGET="1.5M", KTT_CUSTOM_KERNELS="0", KTT_BACKEND="AUTO")
    assert config.get("KTT_L1_BUDGET") == 1536 * 1024
    assert config.get("KTT_CUSTOM_KERNELS") is False
    assert config.get("KTT_BACKEND") == "auto"


def test_bad_values_say_what_is_allowed(knobs):
    knobs(KTT_BACKEND="cuda")
    with pytest.raises(ConfigError, match=r"KTT_BACKEND='cuda' is not valid: expected one of sim, ttnn, auto"):
        config.get("KTT_BACKEND")
    knobs(KTT_L1_BUDGET="-4")
    with pytest.raises(ConfigError, match="KTT_L1_BUDGET"):
        config.get("KTT_L1_BUDGET")
    with pytest.raises(KeyError, match="unknown knob"):
        config.get("KTT_NOPE")


def test_every_knob_is_documented_and_every_documented_knob_exists():
    doc = (ROOT / "docs/reference/knobs.md").read_text()
    documented = set(re.findall(r"`(KTT_[A-Z0-9_]+)`", doc))
    assert set(config.KNOBS) <= documented, f"undocumented knobs: {set(config.KNOBS) - documented}"
    assert documented <= set(config.KNOBS), f"documented knobs that do not exist: {documented - set(config.KNOBS)}"


def test_knobs_are_read_only_in_config():
    offenders = []
    for path in (ROOT / "kohakutt").rglob("*.py"):
        if path.name == "config.py":
            continue
        text = path.read_text()
        if re.search(r"environ(\.get)?[\[(]\s*['\"]KTT_", text) or re.search(r"getenv\(\s*['\"]KTT_", text):
            offenders.append(str(path.relative_to(ROOT)))
    assert not offenders, f"these read KTT_ knobs outside kohakutt/config.py: {offenders}"
