#!/usr/bin/env python3
"""tools/device/compare_fla.py: prism's logits against flash-linear-attention's
own Python models for the same weights.

Run on a GPU machine with PyTorch, transformers, einops and triton, and the
fla source on PYTHONPATH (the `fla` package):

    PYTHONPATH=/path/to/flash-linear-attention python3 tools/device/compare_fla.py \
        --prism build/prism [--out /tmp/fla_compare] [--layers 2] [--width 128]

For each of GatedDeltaNet and Transformer (--archs adds DeltaNet, linear
attention, Mamba-2, GLA, GSA, MoM) it builds a tiny fla model (seeded; weight
matrices redrawn with std --std, norm weights and biases moved off their
initial values), saves it with
save_pretrained (config.json + model.safetensors), converts it with
`prism convert --from-fla`, runs `prism model --logits` (float64 on the CPU)
and fla's forward (float32 on the GPU) on one fixed token sequence, and
prints the max abs difference of the logits. The last line is one JSON
object {arch: {"max_abs_diff": ..., "max_abs_logit": ...}}. Exit status 1 if
any difference is above --tol.

GLA, GSA and MoM (issue 43):

    PYTHONPATH=... python3 tools/device/compare_fla.py --prism build/prism --archs gla,gsa,mom

fla runs these layers in their fused-recurrent form up to 64 tokens and in the
chunked form beyond; --tokens 48 checks the first, --tokens 200 the second.
Triton rounds a float32 dot's inputs to TF32 by default; this script asks for
IEEE float32 (TRITON_F32_DEFAULT=ieee) unless --tf32 is given. Under TF32 the
chunked forms of a 2-layer model differed from prism's float64 logits (~4)
by 6.0e-3 (gla), 1.0e-2 (gsa) and 8.5e-3 (mom) on the H200 (2026-12-05):
the size TF32 rounding would give, far below what a wrong mapping gives;
an IEEE run is what tells the two apart. In IEEE at 48 tokens (the
fused-recurrent forms, 2026-12-05) gla and mom agreed to 5e-6 (H200) and gsa
to 1.8e-6 (H100), once prism's gsa normalised its output with the eps of
fla's fused rms_norm_linear (1e-5, not norm_eps; before, 1.06e-2).
MoM routes each token to its top-k memories, picked from float32 router
probabilities on the GPU and float64 ones in prism: a near-tie picked
differently shows as one position with a large difference while the others
agree (then rerun with another --seed to tell that from a mapping error).
"""
import argparse
import json
import os
import subprocess
import sys

import torch
import torch.nn.functional as F


def sdpa_flash_attn(q, k, v, causal=True, window_size=(-1, -1), **_):
    """Stands in for flash_attn_func ([B,T,H,D] layout, GQA) when flash-attn
    is not installed: PyTorch's scaled_dot_product_attention, in float32."""
    if window_size != (-1, -1):
        raise SystemExit("compare_fla: the stand-in attention has no sliding window")
    groups = q.shape[2] // k.shape[2]
    k = k.repeat_interleave(groups, dim=2)
    v = v.repeat_interleave(groups, dim=2)
    o = F.scaled_dot_product_attention(q.transpose(1, 2).float(), k.transpose(1, 2).float(),
                                       v.transpose(1, 2).float(), is_causal=causal)
    return o.transpose(1, 2).to(q.dtype)


def build_models(width, layers, vocab, archs):
    import fla.layers.attn as fla_attn
    import fla.models as fm
    if getattr(fla_attn, "flash_attn_func", None) is None:
        print("compare_fla: flash-attn is not installed; fla's attention runs on PyTorch's SDPA")
        fla_attn.flash_attn_func = sdpa_flash_attn
    common = dict(hidden_size=width, num_hidden_layers=layers, vocab_size=vocab, norm_eps=1e-6,
                  tie_word_embeddings=False, fuse_cross_entropy=False)
    heads = max(1, width // 64)
    makers = {
        "gated_deltanet": lambda: (fm.GatedDeltaNetForCausalLM, fm.GatedDeltaNetConfig(
            num_heads=heads, head_dim=64, expand_v=2, use_gate=True, conv_size=4, **common)),
        "transformer": lambda: (fm.TransformerForCausalLM, fm.TransformerConfig(
            num_heads=2 * heads, num_kv_heads=heads, rope_theta=10000.0, **common)),
        "delta_net": lambda: (fm.DeltaNetForCausalLM, fm.DeltaNetConfig(num_heads=heads, conv_size=4, **common)),
        "linear_attn": lambda: (fm.LinearAttentionForCausalLM, fm.LinearAttentionConfig(num_heads=heads, **common)),
        "mamba2": lambda: (fm.Mamba2ForCausalLM, fm.Mamba2Config(head_dim=32, state_size=32, expand=2, n_groups=1,
                                                                  **common)),
        # GLA: fla's model fixes the decay gate's rank (16) and normaliser (16), as prism's import assumes
        "gla": lambda: (fm.GLAForCausalLM, fm.GLAConfig(
            num_heads=heads, expand_k=0.5, expand_v=1, use_output_gate=True, fuse_norm=True, **common)),
        # GSA: expand_k = expand_v = 1 (fla's defaults; its output norm spans hidden_size)
        "gsa": lambda: (fm.GSAForCausalLM, fm.GSAConfig(
            num_heads=heads, num_slots=16, gate_logit_normalizer=8, feature_map="swish", **common)),
        "mom": lambda: (fm.MomForCausalLM, fm.MomConfig(
            num_heads=heads, head_dim=32, expand_v=1, conv_size=4, use_output_gate=True, num_memories=4, topk=2,
            shared_mem=True, mom_backend="gated_deltanet", **common)),
    }
    for arch in archs:
        if arch not in makers:
            sys.exit(f"compare_fla: unknown arch '{arch}' (allowed: {', '.join(makers)})")
        yield arch, makers[arch]


def perturb(model, std, seed):
    """Weights of std `std` (fla's 0.02 leaves the mixers' share of the logits
    tiny), norm weights away from 1 and biases away from their initial values
    (GLA's gk_proj.1.bias starts at zero), so every tensor's layout shows.
    A_log, dt_bias and D keep fla's initial values (their ranges matter)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, std, generator=gen)
            elif "norm" in name and name.endswith(".weight"):   # attn_norm, g_norm_swish_gate, o_norm, ...
                p.add_(0.1 * torch.randn(p.shape, generator=gen, device=p.device))
            elif name.endswith(".bias") and not name.endswith("dt_bias"):
                p.add_(0.5 * torch.randn(p.shape, generator=gen, device=p.device))


def fla_logits(model, tokens):
    ids = torch.tensor([tokens], dtype=torch.long, device="cuda")
    with torch.no_grad():
        return model(input_ids=ids).logits[0].double().cpu()


def prism_logits(prism, folder, tokens):
    ckpt, cfg = os.path.join(folder, "prism.safetensors"), os.path.join(folder, "prism.json")
    subprocess.run([prism, "convert", "--from-fla", folder, "--checkpoint", ckpt, "--config", cfg], check=True)
    out = subprocess.run([prism, "model", "--config", cfg, "--checkpoint", ckpt, "--logits",
                          ",".join(str(t) for t in tokens)], check=True, capture_output=True, text=True).stdout
    rows = [[float(x) for x in line.split()] for line in out.strip().splitlines()[:-1]]
    return torch.tensor(rows, dtype=torch.float64)


def save_hf(model, folder):
    """config.json + model.safetensors, the layout save_pretrained writes. Written
    directly: some transformers releases reject fla's list-valued tied-weight
    declaration inside save_pretrained."""
    from safetensors.torch import save_file
    model.config.to_json_file(os.path.join(folder, "config.json"))
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(state, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prism", default="build/prism", help="the prism binary")
    ap.add_argument("--out", default="/tmp/fla_compare", help="folder for the checkpoints")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--tokens", type=int, default=48, help="length of the token sequence")
    ap.add_argument("--std", type=float, default=0.08, help="std of every weight matrix")
    ap.add_argument("--tol", type=float, default=1e-3, help="max abs difference allowed")
    ap.add_argument("--archs", default="gated_deltanet,transformer",
                    help="comma-separated: gated_deltanet, transformer, delta_net, linear_attn, mamba2, gla, gsa, mom")
    ap.add_argument("--seed", type=int, default=1, help="seed of the redrawn weights")
    ap.add_argument("--tf32", action="store_true",
                    help="let Triton's float32 dots round to TF32 (its default); without it they run in IEEE "
                         "float32, so the chunked forms compare at --tol like the recurrent ones")
    a = ap.parse_args()
    if not a.tf32:
        # read when Triton compiles a kernel: set before fla builds any
        os.environ["TRITON_F32_DEFAULT"] = "ieee"
        torch.backends.cuda.matmul.allow_tf32 = False
    if not torch.cuda.is_available():
        sys.exit("compare_fla: fla's kernels need a CUDA GPU")
    gen = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, a.vocab, (a.tokens,), generator=gen).tolist()
    results, bad = {}, False
    for arch, make in build_models(a.width, a.layers, a.vocab, a.archs.split(",")):
        cls, config = make()
        torch.manual_seed(0)
        model = cls(config).float().cuda().eval()
        perturb(model, a.std, a.seed)
        folder = os.path.join(a.out, arch)
        os.makedirs(folder, exist_ok=True)
        save_hf(model, folder)
        ref = fla_logits(model, tokens)
        got = prism_logits(a.prism, folder, tokens)
        per_pos = (ref - got).abs().amax(-1)
        diff = per_pos.max().item()
        results[arch] = {"max_abs_diff": diff, "max_abs_logit": ref.abs().max().item()}
        print(f"{arch:16s} max |fla - prism| = {diff:.3e}  (max |logit| {ref.abs().max().item():.3f}; "
              f"at token 0 {per_pos[0].item():.1e}, largest at token {int(per_pos.argmax())})")
        bad |= not diff <= a.tol
    print(json.dumps(results))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
