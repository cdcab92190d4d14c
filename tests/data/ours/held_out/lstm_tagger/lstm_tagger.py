"""A sequence tagger trained the way many tutorials write it: a fresh LSTM state per batch made on
the host and moved (`torch.zeros(...).to(device)`, twice: h0 and c0), the batch's logits and
labels kept in lists for an epoch-end accuracy (the logits still attached to their graph), and
the loss logged once per batch with `.item()`. torch's default threads. Instrumented with
goodhart_prof.capture.hooks in full mode:

    PROF_ENABLED=1 PROF_MODE=full PROF_ITERATIONS=2-5 PROF_OUTPUT_DIR=OUT python lstm_tagger.py
"""
import torch
import torch.nn as nn

from goodhart_prof.capture.hooks import ProfSettings, make_hooks

device = "cpu"
torch.manual_seed(0)
B, T, V, H, TAGS = 32, 20, 200, 32, 32


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, H)
        self.lstm = nn.LSTM(H, H, batch_first=True)
        self.out = nn.Linear(H, TAGS)

    def forward(self, tokens):
        h0 = torch.zeros(1, tokens.shape[0], H).to(device)
        c0 = torch.zeros(1, tokens.shape[0], H).to(device)
        out, _ = self.lstm(self.emb(tokens), (h0, c0))
        return self.out(out)


model = Tagger().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
batches = [(torch.randint(0, V, (B, T)), torch.randint(0, TAGS, (B, T))) for _ in range(7)]
all_logits, all_tags = [], []

hooks = make_hooks(ProfSettings.from_env(), rank=0, device_type=device)
for step, (tokens, tags) in enumerate(batches):
    with hooks.iteration(step):
        logits = model(tokens)
        loss = nn.functional.cross_entropy(logits.reshape(-1, TAGS), tags.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        all_logits.append(logits)
        all_tags.append(tags)
        print(f"step {step} loss {loss.item():.4f}")
hooks.close()
acc = (torch.cat(all_logits).argmax(-1) == torch.cat(all_tags)).float().mean()
print(f"epoch accuracy {acc:.3f}")
