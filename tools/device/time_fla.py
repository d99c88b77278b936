#!/usr/bin/env python3
"""tools/device/time_fla.py: flash-linear-attention's chunked kernels, forward +
backward time in ms on this GPU, bf16 q/k/v (decays, h0 and the final state
f32), at the sizes of `prism bench recurrence`: size 1 = B=8 T=2048 H=16
K=V=128, size 2 = B=2 T=8192 H=16 K=V=128, with an initial state and the
final state's gradient as the prism bench gives its rules.

    PYTHONPATH=/path/to/flash-linear-attention python3 tools/device/time_fla.py \
        [--rule gla|gdn|delta|ssd|all] [--sizes 1,2] [--reps 20] [--lift-triton-guard]

  gla    chunk_gla, per-key log-decays logsigmoid(N(0,1)) / 16 (fla's GLA layer)
  gdn    chunk_gated_delta_rule, per-head log-decays, beta = sigmoid(N(0,1))
  delta  chunk_delta_rule, beta = sigmoid(N(0,1))
  ssd    chunk_simple_gla, per-head log-decays (Mamba-2's SSD)
q and k are L2-normalised rows, as the delta rules need.

Prints one line per rule and size timed; for one rule, then a last line
"MS1,MS2" (the medians of the sizes timed) that `prism bench recurrence
--fla-gla MS1,MS2` takes for gla (tools/device/bench_gla.sh does both), so
prism's rows read against a figure measured on the same machine in the same
run.
"""
import argparse
import statistics

import torch
import torch.nn.functional as F

from fla_guard import lift_triton_guard

RULES = ("gla", "gdn", "delta", "ssd")


def make_step(rule, B, T, H, K, V, gen):
    dev = torch.device("cuda")

    def randn(*shape, dtype=torch.bfloat16):
        return torch.randn(*shape, device=dev, generator=gen, dtype=torch.float32).to(dtype)

    q = F.normalize(randn(B, T, H, K, dtype=torch.float32), dim=-1).bfloat16().requires_grad_()
    k = F.normalize(randn(B, T, H, K, dtype=torch.float32), dim=-1).bfloat16().requires_grad_()
    v = randn(B, T, H, V).requires_grad_()
    h0 = (0.5 * randn(B, H, K, V, dtype=torch.float32)).requires_grad_()
    do, dht = randn(B, T, H, V), randn(B, H, K, V, dtype=torch.float32)
    leaves = [q, k, v, h0]
    if rule == "gla":
        from fla.ops.gla import chunk_gla
        g = (F.logsigmoid(randn(B, T, H, K, dtype=torch.float32)) / 16).requires_grad_()
        leaves.append(g)
        run = lambda: chunk_gla(q, k, v, g, initial_state=h0, output_final_state=True)
    elif rule == "gdn":
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
        g = F.logsigmoid(randn(B, T, H, dtype=torch.float32)).requires_grad_()
        beta = torch.sigmoid(randn(B, T, H, dtype=torch.float32)).bfloat16().requires_grad_()
        leaves += [g, beta]
        run = lambda: chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True)
    elif rule == "delta":
        from fla.ops.delta_rule import chunk_delta_rule
        beta = torch.sigmoid(randn(B, T, H, dtype=torch.float32)).bfloat16().requires_grad_()
        leaves.append(beta)
        run = lambda: chunk_delta_rule(q, k, v, beta, initial_state=h0, output_final_state=True)
    else:
        from fla.ops.simple_gla import chunk_simple_gla
        g = F.logsigmoid(randn(B, T, H, dtype=torch.float32)).requires_grad_()
        leaves.append(g)
        run = lambda: chunk_simple_gla(q, k, v, g, initial_state=h0, output_final_state=True)

    def step():
        o, ht = run()
        torch.autograd.backward((o, ht), (do, dht))
        for t in leaves:
            t.grad = None

    return step


def time_ms(step, reps, warmup):
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
    ap.add_argument("--rule", default="gla", help="gla, gdn, delta, ssd or all (default gla)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--sizes", default="1,2",
                    help="which sizes to time, 1 and/or 2 (default both; each new shape costs Triton's "
                         "compile and autotuning, minutes on a fresh machine)")
    ap.add_argument("--lift-triton-guard", action="store_true",
                    help="time fla's gated backward where its Triton check refuses it (values unused)")
    a = ap.parse_args()
    if a.lift_triton_guard:
        lift_triton_guard()
    rules = RULES if a.rule == "all" else (a.rule,)
    for r in rules:
        if r not in RULES:
            raise SystemExit(f"time_fla.py: unknown rule '{r}' (gla, gdn, delta, ssd, all)")
    sizes = sorted({int(x) for x in a.sizes.split(",") if x.strip()})
    if not sizes or any(x not in (1, 2) for x in sizes):
        raise SystemExit(f"time_fla.py: --sizes takes 1, 2 or 1,2, not '{a.sizes}'")
    gen = torch.Generator(device="cuda").manual_seed(0)
    for r in rules:
        ms = []
        for si, (B, T) in enumerate(((8, 2048), (2, 8192))):
            if si + 1 not in sizes:
                continue
            m = time_ms(make_step(r, B, T, 16, 128, 128, gen), a.reps, a.warmup)
            print(f"fla {r} bf16 size {si + 1} (B={B} T={T} H=16 K=V=128): fwd+bwd {m:.3f} ms", flush=True)
            ms.append(m)
            torch.cuda.empty_cache()
    if len(rules) == 1:
        print(",".join(f"{m:.3f}" for m in ms))


if __name__ == "__main__":
    main()
