"""Which Python frames are the user's code: a frame name as Kineto writes it (`file.py(12): fn`),
the paths that are library code (installed packages, the standard library, torch, and the files
torch.compile's inductor generates in its cache: analysis/gpu/compiled.py), and the first
user-code frame walking out from a frame of a FrameForest."""
from __future__ import annotations

import re
import sys

from ..tree import FrameForest

# A Kineto Python frame's name: `file(line): function`.
FRAME = re.compile(r"^(?P<file>.+)\((?P<line>\d+)\): (?P<fn>.*)$")
# inductor's cache layout: <cache dir>/<h[1:3]>/<h>.py with h = "c" + a base32 hash
INDUCTOR_FILE = re.compile(r"(?:^|[/\\])(?P<dir>[a-z0-9]{2})[/\\](?P<base>c(?P=dir)[a-z0-9]{20,})\.py$")
# The profiler strips sys.path prefixes, so installed packages look like relative paths: these
# top-level names are library code, never the user's line.
LIBRARY_TOPS = frozenset({
    "torch", "torchvision", "torchaudio", "torchrl", "tensordict", "functorch", "triton",
    "numpy", "pandas", "typing_extensions", "einops", "transformers", "accelerate", "apex",
    "deepspeed", "lightning", "pytorch_lightning", "gym", "gymnasium", "stable_baselines3",
    "_pytest", "pytest", "pluggy", "tqdm", "click", "rich", "msgspec",
})
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) - {"test"}


def is_inductor_file(path: str) -> bool:
    """Whether a file path is one inductor generated (its cache layout)."""
    return bool(INDUCTOR_FILE.search(str(path)))


def user_site(frame_name: str) -> str | None:
    """`file.py:line fn` for a Kineto Python frame name of user code, else None."""
    m = FRAME.match(frame_name) if isinstance(frame_name, str) else None
    if m is None:
        return None
    path = m["file"]
    if path.startswith("<"):
        if not (path == "<stdin>" or path.startswith("<ipython-input")):
            return None
    elif not is_user_path(path):
        return None
    return f"{path}:{m['line']} {m['fn']}"


def is_user_path(path: str) -> bool:
    p = path.replace("\\", "/")
    if "site-packages/" in p or "dist-packages/" in p or re.search(r"/lib/python\d", p):
        return False
    if "/torch/" in p or is_inductor_file(p):  # torch's, or code inductor generated
        return False
    if p.startswith("/"):
        return True
    top = p.split("/", 1)[0]
    top = top[:-3] if top.endswith(".py") else top
    return top not in LIBRARY_TOPS and top not in _STDLIB


def nearest_user_frame(nest: FrameForest, pos: int, key: str, answer) -> str | None:
    """`answer(name)` of the first frame walking out from frame pos whose name is user code
    (`user_site`), None where none is; the answers are cached on the nest under `key`, for every
    frame the walk passed."""
    cache = nest.__dict__.setdefault(key, {})
    todo, found = [], None
    while pos >= 0:
        if pos in cache:
            found = cache[pos]
            break
        todo.append(pos)
        name = nest.name[pos]
        if user_site(name) is not None:
            found = answer(name)
            break
        pos = int(nest.parent[pos])
    for p in todo:
        cache[p] = found
    return found
