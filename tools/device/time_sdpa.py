#!/usr/bin/env python3
"""tools/device/time_sdpa.py: torch's scaled_dot_product_attention forward +
backward time in ms, bf16, causal, on this GPU, at the shape of `prism bench
fused`'s attention rows: B=8 T=2048 H=16 D=128, or D=96 with --head-dim 96
(q, k, v laid out [B,T,H,D] as prism's, handed to torch as [B,H,T,D] views).

    python3 tools/device/time_sdpa.py [--reps 20] [--head-dim 128|96]

Prints the time, then a last line with the median alone, which `prism bench
fused --sdpa-ms MS` (D=128) or `--sdpa96-ms MS` (D=96) takes to print
prism's bf16 f+b over it (issue 44's target: at most 2x);
tools/device/bench_attention.sh does both.
"""
import argparse
import statistics

import torch
import torch.nn.functional as F


def time_sdpa(B, T, H, D, reps, warmup):
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(0)

    def leaf():
        x = torch.rand(B, T, H, D, device=dev, generator=gen) * 2 - 1
        return x.bfloat16().requires_grad_()

    q, k, v = leaf(), leaf(), leaf()
    do = (torch.rand(B, H, T, D, device=dev, generator=gen) * 2 - 1).bfloat16()

    def step():
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        o.backward(do)
        for t in (q, k, v):
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
    ap.add_argument("--head-dim", type=int, choices=(128, 96), default=128)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("time_sdpa.py: no CUDA device visible to torch")
    D = args.head_dim
    ms = time_sdpa(8, 2048, 16, D, args.reps, args.warmup)
    print(f"torch {torch.__version__} SDPA bf16 causal B=8 T=2048 H=16 D={D} fwd+bwd: {ms:.3f} ms "
          f"(median of {args.reps}, {torch.cuda.get_device_name()})")
    print(f"{ms:.4f}")


if __name__ == "__main__":
    main()
