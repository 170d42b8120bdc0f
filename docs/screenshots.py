"""Regenerates the README's pictures: python docs/screenshots.py"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import make_app, no_gpu_app  # noqa: E402


async def shoot(app, name: str, size: tuple[int, int], keys: tuple[str, ...] = ()) -> None:
    async with app.run_test(size=size) as pilot:
        await pilot.press(*keys)
        await pilot.pause()
        app.save_screenshot(str(ROOT / "docs" / name))


async def main() -> None:
    await shoot(make_app(gpus=4, ticks=120), "screenshot-main.svg", (120, 40), ("a",))
    await shoot(make_app(gpus=2, ticks=120), "screenshot-80x24.svg", (80, 24))
    await shoot(no_gpu_app(), "screenshot-no-gpu.svg", (80, 24))


if __name__ == "__main__":
    asyncio.run(main())
