"""Text generation as users write it: a small GRU language model decodes token by token, each
token read back with .item() to append it to a Python list and to stop at the end-of-sequence
token; recorded with torch.profiler (record_shapes, with_stack), one ProfilerStep per sequence.

    python greedy_decode.py OUT.json
"""
import sys

import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile, schedule

torch.manual_seed(0)
VOCAB, EOS = 50, 0


class CharModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 32)
        self.gru = nn.GRU(32, 64, batch_first=True)
        self.out = nn.Linear(64, VOCAB)

    def step(self, token, h):
        y, h = self.gru(self.emb(token).view(1, 1, -1), h)
        return self.out(y[:, -1]), h


@torch.no_grad()
def generate(model, prompt, max_new=24):
    out, h = list(prompt), None
    for t in prompt:
        logits, h = model.step(torch.tensor([t]), h)
    for _ in range(max_new):
        probs = logits.softmax(-1)
        probs[:, EOS] = 0.0  # keep going: the test model's EOS is likely
        next_id = torch.multinomial(probs, 1)
        out.append(next_id.item())
        if out[-1] == EOS:
            break
        logits, h = model.step(next_id.view(1), h)
    return out


model = CharModel().eval()
with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
             on_trace_ready=lambda p: p.export_chrome_trace(sys.argv[1]),
             record_shapes=True, with_stack=True) as prof:
    for i in range(5):
        text = generate(model, [3, 1, 4, 1, 5])
        prof.step()
print(len(text))
