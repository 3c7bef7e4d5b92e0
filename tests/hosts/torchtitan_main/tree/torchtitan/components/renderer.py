"""Stand-in: torchtitan main's ``torchtitan.components.renderer``, the two names the stored
rollouter checks (``isinstance(renderer_config, RenderersConfigAdapter)``) and reads
(``renderer_config.renderers_config``, a ``renderers`` config), plus ``from_renderers``, main's
way to make one. 0.3.0 has no such module (its ``RendererConfig`` names a renderer instead)."""

from dataclasses import dataclass
from typing import Any


class RendererConfig:
    pass


@dataclass
class RenderersConfigAdapter(RendererConfig):
    renderers_config: Any


def from_renderers(renderers_config: Any) -> RenderersConfigAdapter:
    return RenderersConfigAdapter(renderers_config)
