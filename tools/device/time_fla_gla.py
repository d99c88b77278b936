#!/usr/bin/env python3
"""tools/device/time_fla_gla.py: flash-linear-attention's chunk_gla forward +
backward time in ms, bf16 data (g, h0 and the final state f32), on this GPU,
at the sizes of `prism bench recurrence`: size 1 = B=8 T=2048 H=16 K=V=128,
size 2 = B=2 T=8192 H=16 K=V=128. Log-decays logsigmoid(N(0,1)) / 16 as
fla's GLA layer makes them, an initial state and the final state's gradient
as the prism bench gives its rule.

    PYTHONPATH=/path/to/flash-linear-attention python3 tools/device/time_fla_gla.py [--reps 20]

Prints one line per size, then a last line "MS1,MS2" (the medians) that
`prism bench recurrence --fla-gla MS1,MS2` takes, so that prism's gla rows
show "x fla" against a figure measured on the same machine in the same run
(tools/device/bench_gla.sh does both).
"""
import argparse
import statistics

import torch
import torch.nn.functional as F

from fla.ops.gla import chunk_gla


def one_size(B, T, H, K, V, reps, warmup):
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(0)

    def randn(*shape, dtype=torch.bfloat16):
        return torch.randn(*shape, device=dev, generator=gen, dtype=torch.float32).to(dtype)

    q = F.normalize(randn(B, T, H, K, dtype=torch.float32), dim=-1).bfloat16().requires_grad_()
    k = F.normalize(randn(B, T, H, K, dtype=torch.float32), dim=-1).bfloat16().requires_grad_()
    v = randn(B, T, H, V).requires_grad_()
    g = (F.logsigmoid(randn(B, T, H, K, dtype=torch.float32)) / 16).requires_grad_()
    h0 = (0.5 * randn(B, H, K, V, dtype=torch.float32)).requires_grad_()
    do = randn(B, T, H, V)
    dht = randn(B, H, K, V, dtype=torch.float32)

    def step():
        o, ht = chunk_gla(q, k, v, g, initial_state=h0, output_final_state=True)
        torch.autograd.backward((o, ht), (do, dht))
        for t in (q, k, v, g, h0):
            t.grad = None

    for _ in range(warmup):
        step()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    a = ap.parse_args()
    ms = []
    for si, (B, T) in enumerate(((8, 2048), (2, 8192))):
        m = one_size(B, T, 16, 128, 128, a.reps, a.warmup)
        print(f"fla chunk_gla bf16 size {si + 1} (B={B} T={T} H=16 K=V=128): fwd+bwd {m:.3f} ms")
        ms.append(m)
    print(",".join(f"{m:.3f}" for m in ms))


if __name__ == "__main__":
    main()
