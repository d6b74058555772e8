from __future__ import annotations

from kohakutt.frontends.torch import install

install()  # the tt device exists from collection on; its chip opens on first use
