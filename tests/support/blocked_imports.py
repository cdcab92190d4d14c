"""Packages refused to every Python process a test starts, as a machine without them would: a
sitecustomize.py import hook in a folder put first on PYTHONPATH."""
from __future__ import annotations

import textwrap
from pathlib import Path


def blocker(absent: tuple[str, ...]) -> str:
    """An import hook refusing `absent`, as a sitecustomize.py: every interpreter started with it
    on PYTHONPATH (the trainer, and any process it starts) is refused them."""
    return textwrap.dedent(f"""
        import importlib.abc, sys
        class _Absent(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name.split(".")[0] in {absent!r}:
                    raise ModuleNotFoundError(f"No module named {{name!r}}", name=name.split(".")[0])
        sys.meta_path.insert(0, _Absent())
        for _name in {absent!r}:
            sys.modules.pop(_name, None)
    """)


def blocking_folder(folder: Path, absent: tuple[str, ...]) -> Path:
    """`folder` holding the sitecustomize.py that refuses `absent` (made if missing)."""
    folder.mkdir(exist_ok=True)
    (folder / "sitecustomize.py").write_text(blocker(absent))
    return folder
