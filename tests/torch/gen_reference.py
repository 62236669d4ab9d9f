#!/usr/bin/env python3
"""Writes the PyTorch reference states used by tests/test_kernel_torch.

Builds the same tiny GPT and LLaMA-style models as kernels/ (see
kernels/bsipipe_model.h for the layout and the math), with weights drawn here
(torch.manual_seed), and writes for each family one small binary file:

  ref_gpt.bin, ref_llama.bin   (regenerate: python3 tests/torch/gen_reference.py)

Format (little-endian): magic b"BSIPREF1", then records until EOF:
  u32 name_len, name (ascii), u32 dtype (0 f32, 1 i32, 2 f64), u64 count, data
Records: config i32[family, L, d, H, F, V, S, m, steps], adamw f64[lr, beta1,
beta2, eps, weight_decay, grad_clip], tokens i32[m*S], targets i32[m*S],
params f32[n] (flat kernels/ layout), logits f32[m*S*V], loss f64[1]
(mean CE over the m*S tokens), grads f32[n] (of that mean), gnorms f64[steps],
losses f64[steps] (loss before each step), params_after f32[n] (after `steps`
AdamW steps on the same batch, torch.optim.AdamW + clip_grad_norm_, weight
decay on matrices only).
Needs PyTorch (Debian python3-torch or the CPU wheel); fp32 throughout.
"""
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

EPS = 1e-5
ROPE_BASE = 10000.0
GPT, LLAMA = 0, 1


def layout(fam, L, d, F_, V, S):
    """(name, shape, decay) in the flat order of kernels/bsipipe_model.h."""
    t = [("wte", (V, d), 1)]
    if fam == GPT:
        t.append(("wpe", (S, d), 1))
    for l in range(L):
        p = "layer%d." % l
        t.append((p + "n1w", (d,), 0))
        if fam == GPT:
            t.append((p + "n1b", (d,), 0))
        t += [(p + "wqkv", (3 * d, d), 1), (p + "wo", (d, d), 1), (p + "n2w", (d,), 0)]
        if fam == GPT:
            t += [(p + "n2b", (d,), 0), (p + "wfc", (F_, d), 1), (p + "wproj", (d, F_), 1)]
        else:
            t += [(p + "wgu", (2 * F_, d), 1), (p + "wdown", (d, F_), 1)]
    t.append(("nfw", (d,), 0))
    if fam == GPT:
        t.append(("nfb", (d,), 0))
    t.append(("wlm", (V, d), 1))
    return t


def init_params(fam, L, d, F_, V, S, gen):
    P = {}
    for name, shape, decay in layout(fam, L, d, F_, V, S):
        base = name.split(".")[-1]
        if not decay:
            # random-ish norms so that the weight/bias gradients are not trivial
            if base.endswith("w"):
                P[name] = 1.0 + 0.1 * torch.randn(shape, generator=gen)
            else:
                P[name] = 0.1 * torch.randn(shape, generator=gen)
        else:
            std = 0.02 if base not in ("wo", "wproj", "wdown") else 0.02 / math.sqrt(2 * L)
            # 5x the usual scale: the tiny model's activations then are not
            # all near zero, so every nonlinearity matters in the comparison
            P[name] = 5 * std * torch.randn(shape, generator=gen)
    return {k: v.float().requires_grad_(True) for k, v in P.items()}


def norm(x, w, b):
    if b is not None:
        return F.layer_norm(x, (x.shape[-1],), w, b, eps=EPS)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def rope(x, H, hd):
    """Interleaved pairs (2i, 2i+1) per head; angles in fp64, cos/sin to fp32."""
    S = x.shape[0]
    pos = torch.arange(S, dtype=torch.float64)[:, None]
    inv = torch.tensor([ROPE_BASE ** (-2.0 * i / hd) for i in range(hd // 2)],
                       dtype=torch.float64)[None, :]
    ang = pos * inv
    c, s = torch.cos(ang).float(), torch.sin(ang).float()  # [S, hd/2]
    xr = x.view(S, H, hd // 2, 2)
    a, b = xr[..., 0], xr[..., 1]
    c, s = c[:, None, :], s[:, None, :]
    return torch.stack([a * c - b * s, a * s + b * c], dim=-1).view(S, H * hd)


def forward(fam, dims, P, tok):
    L, d, H, F_, V, S = dims
    hd = d // H
    x = P["wte"][tok]
    if fam == GPT:
        x = x + P["wpe"][:S]
    mask = torch.ones(S, S, dtype=torch.bool).tril()
    for l in range(L):
        p = "layer%d." % l
        n1 = norm(x, P[p + "n1w"], P.get(p + "n1b"))
        qkv = n1 @ P[p + "wqkv"].t()
        q, k, v = qkv[:, :d], qkv[:, d:2 * d], qkv[:, 2 * d:]
        if fam == LLAMA:
            q, k = rope(q, H, hd), rope(k, H, hd)
        q, k, v = (t.reshape(S, H, hd).transpose(0, 1) for t in (q, k, v))
        sc = (q @ k.transpose(1, 2)) / math.sqrt(hd)
        sc = sc.masked_fill(~mask, float("-inf"))
        att = (torch.softmax(sc, dim=-1) @ v).transpose(0, 1).reshape(S, d)
        x2 = x + att @ P[p + "wo"].t()
        n2 = norm(x2, P[p + "n2w"], P.get(p + "n2b"))
        if fam == GPT:
            h = F.gelu(n2 @ P[p + "wfc"].t(), approximate="tanh")
            x = x2 + h @ P[p + "wproj"].t()
        else:
            gu = n2 @ P[p + "wgu"].t()
            h = F.silu(gu[:, :F_]) * gu[:, F_:]
            x = x2 + h @ P[p + "wdown"].t()
    xf = norm(x, P["nfw"], P.get("nfb"))
    return xf @ P["wlm"].t()


def flat(P, names):
    return torch.cat([P[n].detach().reshape(-1) for n in names])


def rec(f, name, dtype, arr):
    code = {"f32": 0, "i32": 1, "f64": 2}[dtype]
    fmt = {"f32": "f", "i32": "i", "f64": "d"}[dtype]
    arr = list(arr)
    nb = name.encode()
    f.write(struct.pack("<I", len(nb)) + nb + struct.pack("<IQ", code, len(arr)))
    f.write(struct.pack("<%d%s" % (len(arr), fmt), *arr))


def make(fam, path, seed):
    L, d, H, V, S, m, steps = 2, 16, 2, 37, 24, 2, 3
    F_ = 4 * d if fam == GPT else 40
    hp = dict(lr=3e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, grad_clip=0.5)
    gen = torch.Generator().manual_seed(seed)
    P = init_params(fam, L, d, F_, V, S, gen)
    lay = layout(fam, L, d, F_, V, S)
    names = [n for n, _, _ in lay]
    tokens = torch.randint(0, V, (m, S), generator=gen)
    # a few vocabulary ids never appear: their embedding rows get an exactly
    # zero gradient, and AdamW must leave them to weight decay alone
    tokens[tokens >= V - 3] = 0
    targets = torch.randint(0, V, (m, S), generator=gen)
    dims = (L, d, H, F_, V, S)
    params0 = flat(P, names)

    def loss_fn():
        logits = torch.stack([forward(fam, dims, P, tokens[b]) for b in range(m)])
        return logits, F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))

    logits, loss = loss_fn()
    loss.backward()
    grads = torch.cat([P[n].grad.reshape(-1) for n in names])
    for n in names:
        P[n].grad = None
    groups = [
        {"params": [P[n] for n, _, dc in lay if dc], "weight_decay": hp["weight_decay"]},
        {"params": [P[n] for n, _, dc in lay if not dc], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=hp["lr"], betas=(hp["beta1"], hp["beta2"]),
                            eps=hp["eps"], foreach=False)
    gnorms, losses = [], []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        _, l = loss_fn()
        l.backward()
        losses.append(l.item())
        gn = torch.nn.utils.clip_grad_norm_([P[n] for n in names], hp["grad_clip"])
        gnorms.append(gn.item())
        opt.step()
    with open(path, "wb") as f:
        f.write(b"BSIPREF1")
        rec(f, "config", "i32", [fam, L, d, H, F_, V, S, m, steps])
        rec(f, "adamw", "f64", [hp[k] for k in
                                ("lr", "beta1", "beta2", "eps", "weight_decay", "grad_clip")])
        rec(f, "tokens", "i32", tokens.reshape(-1).tolist())
        rec(f, "targets", "i32", targets.reshape(-1).tolist())
        rec(f, "params", "f32", params0.tolist())
        rec(f, "logits", "f32", logits.detach().reshape(-1).tolist())
        rec(f, "loss", "f64", [loss.item()])
        rec(f, "grads", "f32", grads.tolist())
        rec(f, "gnorms", "f64", gnorms)
        rec(f, "losses", "f64", losses)
        rec(f, "params_after", "f32", flat(P, names).tolist())
    print("%s: loss %.6f, grad norms %s, %d params, %d bytes"
          % (path, loss.item(), " ".join("%.4f" % g for g in gnorms), params0.numel(),
             os.path.getsize(path)))


def main():
    torch.set_num_threads(1)
    out = os.path.dirname(os.path.abspath(__file__))
    if len(sys.argv) > 1:
        out = sys.argv[1]
    make(GPT, os.path.join(out, "ref_gpt.bin"), 1234)
    make(LLAMA, os.path.join(out, "ref_llama.bin"), 4321)


if __name__ == "__main__":
    main()
