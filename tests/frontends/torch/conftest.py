from __future__ import annotations

import threading

import pytest
import torch

from kohakutt.frontends.torch import install, runtime
from kohakutt.hal import Command

install()  # the tt device exists from collection on; its chip opens on first use


@pytest.fixture
def gate():
    """Hold the default stream of tt:0 behind a closed gate: queued work waits until ``gate.set()``."""
    g = threading.Event()
    runtime.device(0).default_stream.enqueue(Command("gate", g.wait))
    yield g
    g.set()
    torch.tt.synchronize()
