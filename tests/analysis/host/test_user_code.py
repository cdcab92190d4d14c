"""Which Python frames are the user's code (analysis/host/user_code.py): library paths, the
standard library, files inductor generated, and the walk out to the first user-code frame."""
from __future__ import annotations

import numpy as np

from goodhart_prof.analysis.host.user_code import is_inductor_file, is_user_path, nearest_user_frame, user_site
from goodhart_prof.analysis.tree import FrameForest

CACHE_FRAME = ("/tmp/goodhart-acceptance/cache/inductor/ed/"
               "cedsdeukyofswthbmjbu2dsr4jth2jopbyxv35etppx26fgj4dbg.py(1124): call")


def test_inductor_files():
    assert is_inductor_file(CACHE_FRAME.partition("(")[0])
    assert is_inductor_file("/tmp/torchinductor_me/r7/cr7jqfoicqvkuvpgw6m2hmgu4sqhlyesd7hjrtqmow2fy64bt3ch.py")
    # the folder must be the two characters after the file's `c`
    assert not is_inductor_file("/tmp/cache/xx/cr7jqfoicqvkuvpgw6m2hmgu4sqhlyesd7hjrtqmow2fy64bt3ch.py")
    assert not is_inductor_file("trainer/env.py")


def test_user_site():
    assert user_site("trainer/ppo.py(123): ppo_update") == "trainer/ppo.py:123 ppo_update"
    assert user_site("/abs/path/x.py(45): f") == "/abs/path/x.py:45 f"
    assert user_site("<stdin>(5): f") == "<stdin>:5 f"
    for lib in ("torch/nn/modules/module.py(1736): _call_impl", "typing.py(359): inner",
                "threading.py(1012): run", "<frozen importlib._bootstrap>(1): _load",
                "<built-in method item of Tensor object at 0x7f62>", "nn.Module: Linear_0",
                "/usr/lib/python3.11/threading.py(10): run",
                "/venv/lib/python3.11/site-packages/numpy/x.py(3): f",
                "/usr/lib/python3/dist-packages/foo/x.py(3): f"):
        assert user_site(lib) is None, lib


def test_generated_code_is_not_the_users():
    assert user_site(CACHE_FRAME) is None  # an absolute path, but no code the user wrote
    assert user_site("/home/me/train.py(3): main") == "/home/me/train.py:3 main"
    assert not is_user_path("/home/me/venv/torch/nn/functional.py")
    assert is_user_path("mylib/model.py") and not is_user_path("einops/einops.py")


def test_nearest_user_frame_walks_out_of_torch_and_generated_code():
    """One thread: the user's `main` [0, 100] holds torch's `_call_impl` [10, 90], which holds a
    generated `call` [20, 80]; a second user frame [120, 130] stands alone."""
    from goodhart_prof.trace.model import Frames
    names = ["/home/me/train.py(3): main", "torch/nn/modules/module.py(1736): _call_impl", CACHE_FRAME,
             "/home/me/train.py(9): main"]
    ts, end = np.array([0.0, 10, 20, 120]), np.array([100.0, 90, 80, 130])
    n = len(names)
    frames = Frames({"rank": np.zeros(n, np.int32), "pid": np.ones(n, np.int64), "tid": np.ones(n, np.int64),
                     "ts": ts, "dur": end - ts, "end": end, "name": np.array(names, dtype=object),
                     "python_id": np.full(n, -1), "python_parent_id": np.full(n, -1)})
    forest = FrameForest(frames, {(0, 1, 1): np.arange(n)})
    assert [nearest_user_frame(forest, pos, "test", user_site) for pos in range(n)] == [
        "/home/me/train.py:3 main", "/home/me/train.py:3 main", "/home/me/train.py:3 main",
        "/home/me/train.py:9 main"]
    assert nearest_user_frame(forest, -1, "test", user_site) is None
    assert forest.__dict__["test"][2] == "/home/me/train.py:3 main"  # cached for every frame walked
