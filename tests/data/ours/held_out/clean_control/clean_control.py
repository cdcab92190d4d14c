"""The control: a small autoencoder loop written the way the profiling guides say, with nothing
to find. One intra-op thread (torch.set_num_threads(1)), data made once before the loop, no
per-step read-back (the loss is summed on the device and read only on logging iterations:
every 4th, none of them traced), no clipping, no masks, no branches on
tensors, Adam(foreach) and zero_grad(set_to_none). Instrumented with goodhart_prof.capture.hooks in full
mode:

    PROF_ENABLED=1 PROF_MODE=full PROF_ITERATIONS=1-3 PROF_OUTPUT_DIR=OUT python clean_control.py
"""
import torch
import torch.nn as nn

from goodhart_prof.capture.hooks import ProfSettings, make_hooks

torch.set_num_threads(1)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 16), nn.GELU(),
                      nn.Linear(16, 256), nn.GELU(), nn.Linear(256, 64))
opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)
data = torch.randn(4, 256, 64)  # 4 batches of 256, made once
running = torch.zeros(())

hooks = make_hooks(ProfSettings.from_env(), rank=0, device_type="cpu")
for it in range(8):
    with hooks.iteration(it):
        for b in range(len(data)):
            x = data[b]
            loss = nn.functional.mse_loss(model(x), x)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            running += loss.detach()
    if it % 4 == 0:
        print(f"iteration {it} mean loss {running.item() / (len(data) * (it + 1)):.4f}")
hooks.close()
