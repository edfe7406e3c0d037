"""Build hook: the wheel carries the repository's ``configs/`` as ``deepflow/configs/``.

The presets, spaces, studies and calibration files stay where they are in the repository
(``configs/``); ``build_py`` copies them into the package it builds, so an installed wheel
finds them through ``importlib.resources`` (``deepflow.config.loader.builtin_config_dir``).
An editable install copies nothing: it reads the checkout's ``configs/`` directly.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildPyWithConfigs(build_py):
    """``build_py`` that also copies ``configs/**/*.yaml`` into ``deepflow/configs/``."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "deepflow" / "configs"
        if target.exists():
            shutil.rmtree(target)
        for src in sorted((ROOT / "configs").rglob("*.yaml")):
            dst = target / src.relative_to(ROOT / "configs")
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)


setup(cmdclass={"build_py": BuildPyWithConfigs})
