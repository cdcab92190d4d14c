"""A sequence-model training step with padding, as users write it: the loss is taken over the
real tokens by boolean-mask indexing (`logits[mask]`, a nonzero with a data-dependent shape)
and a NaN guard skips bad batches (`if torch.isnan(loss): continue`); recorded with
torch.profiler (schedule, record_shapes, with_stack), one ProfilerStep per batch.

    python masked_loss.py OUT.json
"""
import sys

import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile, schedule

torch.manual_seed(0)
emb, rnn, head = nn.Embedding(100, 32), nn.GRU(32, 32, batch_first=True), nn.Linear(32, 100)
params = [*emb.parameters(), *rnn.parameters(), *head.parameters()]
opt = torch.optim.AdamW(params, lr=1e-3)


def train_step(tokens, lengths):
    mask = torch.arange(tokens.shape[1])[None, :] < lengths[:, None]
    out, _ = rnn(emb(tokens[:, :-1]))
    logits = head(out)
    loss = nn.functional.cross_entropy(logits[mask[:, 1:]], tokens[:, 1:][mask[:, 1:]])
    if torch.isnan(loss):
        return None
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss


with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
             on_trace_ready=lambda p: p.export_chrome_trace(sys.argv[1]),
             record_shapes=True, with_stack=True) as prof:
    for step in range(5):
        tokens = torch.randint(0, 100, (16, 24))
        lengths = torch.randint(8, 25, (16,))
        train_step(tokens, lengths)
        prof.step()
