#!/usr/bin/env python3
"""tools/device/lm_baselines.py: training tokens/s of the two Python-stack LMs
that issue 44's targets are set against, timed on this GPU so that `prism
bench throughput` can be read beside them in the same sitting:

  fla-gdn   an LM of flash-linear-attention's GatedDeltaNet layers
  sdpa-attn a Transformer on torch's scaled_dot_product_attention (flash)

Both have the shape of prism's `lm-130m` preset (D 768, 8 blocks, 8 heads,
vocab 32000, RMSNorm pre-norm, SwiGLU MLP, tied embeddings; the GDN MLP is
1783 wide, as prism's size matching gives, the Transformer's 2048), bf16
autocast with f32 weights and a fused AdamW, 16,384 tokens a step.

  PYTHONPATH=/path/to/flash-linear-attention python3 tools/device/lm_baselines.py \
      [--models fla-gdn,sdpa-attn] [--seq-lens 1024,16384] [--steps 5] [--compile] \
      [--lift-triton-guard]

fla refuses its gated backward on Hopper under Triton 3.4-3.7.0 (a known
miscompile); --lift-triton-guard times it anyway, for speed only.

One line per model and length: tokens/s (median step), parameters, peak MiB.
Not part of the library: a measuring aid for the GPU machine.
"""
import argparse
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from fla_guard import lift_triton_guard


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.w = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return F.rms_norm(x, (x.shape[-1],), self.w, self.eps)


class SwiGLU(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.gate = nn.Linear(d, hidden, bias=False)
        self.up = nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


def rotate(x, cos, sin):
    # x [B, H, T, Dh]: pairs (first half, second half) turned by the position's angle
    a, b = x.chunk(2, dim=-1)
    return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)


class Attention(nn.Module):
    def __init__(self, d, heads, theta=10000.0):
        super().__init__()
        self.h, self.dh = heads, d // heads
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.theta = theta

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.h, self.dh).permute(2, 0, 3, 1, 4)
        half = self.dh // 2
        freq = self.theta ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)
        ang = torch.arange(T, device=x.device, dtype=torch.float32)[:, None] * freq[None]
        cos, sin = ang.cos().to(q.dtype), ang.sin().to(q.dtype)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(B, T, D))


class GDNMixer(nn.Module):
    def __init__(self, d, heads, idx):
        super().__init__()
        from fla.layers import GatedDeltaNet   # imported here: sdpa-attn runs without fla
        self.layer = GatedDeltaNet(hidden_size=d, expand_v=1, head_dim=d // heads, num_heads=heads,
                                   mode='chunk', use_gate=True, use_short_conv=True, conv_size=4, layer_idx=idx)

    def forward(self, x):
        return self.layer(x)[0]


class Block(nn.Module):
    def __init__(self, mixer, d, hidden):
        super().__init__()
        self.n1, self.mixer, self.n2, self.mlp = RMSNorm(d), mixer, RMSNorm(d), SwiGLU(d, hidden)

    def forward(self, x):
        x = x + self.mixer(self.n1(x))
        return x + self.mlp(self.n2(x))


class LM(nn.Module):
    def __init__(self, kind, d=768, layers=8, heads=8, vocab=32000):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        hidden = 1783 if kind == 'fla-gdn' else 2048
        mixers = [GDNMixer(d, heads, i) if kind == 'fla-gdn' else Attention(d, heads) for i in range(layers)]
        self.blocks = nn.ModuleList(Block(m, d, hidden) for m in mixers)
        self.norm = RMSNorm(d)
        nn.init.normal_(self.embed.weight, std=0.02)

    def forward(self, ids, targets):
        x = self.embed(ids)
        for b in self.blocks:
            x = b(x)
        logits = F.linear(self.norm(x), self.embed.weight)   # tied head
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))


def time_model(kind, T, tokens, steps, warmup, compile_it):
    torch.manual_seed(1)
    model = LM(kind).cuda()
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
    fwd = torch.compile(model) if compile_it else model
    B = max(1, tokens // T)
    ids = torch.randint(0, 32000, (B, T + 1), device='cuda')
    torch.cuda.reset_peak_memory_stats()
    times = []
    for i in range(warmup + steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast('cuda', dtype=torch.bfloat16):
            loss = fwd(ids[:, :-1], ids[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    if not math.isfinite(loss.item()):
        raise SystemExit(f"{kind} T={T}: the loss is {loss.item()}")
    peak = torch.cuda.max_memory_allocated() / 2**20
    return B * T / statistics.median(times), params, peak


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--models', default='fla-gdn,sdpa-attn')
    ap.add_argument('--seq-lens', default='1024,16384')
    ap.add_argument('--tokens-per-batch', type=int, default=16384)
    ap.add_argument('--steps', type=int, default=5)
    ap.add_argument('--warmup', type=int, default=2)
    ap.add_argument('--compile', action='store_true', help='torch.compile the model (slower to start)')
    ap.add_argument('--lift-triton-guard', action='store_true',
                    help="time fla's gated backward where its Triton check refuses it (values unused)")
    a = ap.parse_args()
    if a.lift_triton_guard and 'fla-gdn' in a.models:
        lift_triton_guard()
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, bf16 autocast, "
          f"{a.tokens_per_batch} tokens a step, median of {a.steps} steps after {a.warmup}")
    for kind in a.models.split(','):
        if kind not in ('fla-gdn', 'sdpa-attn'):
            raise SystemExit(f"lm_baselines.py: unknown model '{kind}' (fla-gdn, sdpa-attn)")
        for T in (int(s) for s in a.seq_lens.split(',')):
            tps, params, peak = time_model(kind, T, a.tokens_per_batch, a.steps, a.warmup, a.compile)
            print(f"{kind:10s} T={T:6d}  {tps:12,.0f} tokens/s  {params/1e6:6.2f}M params  {peak:8.0f} MiB peak",
                  flush=True)
            torch.cuda.empty_cache()


if __name__ == '__main__':
    main()
