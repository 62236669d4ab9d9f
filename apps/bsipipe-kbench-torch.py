#!/usr/bin/env python3
"""PyTorch CPU timing of one transformer block's forward+backward, the same
block as bsipipe's kernels (GPT: LayerNorm, bias-free linears, tanh-GeLU MLP;
LLaMA: RMSNorm, RoPE, SwiGLU), whole sequence, fp32. Invoked by
bsipipe-kbench; prints one line "torch_seconds <best> <median>".
Attention is the plain masked-softmax form (PyTorch 1.13 has no fused CPU
attention), so it materialises [H, S, S] scores; the caller skips sizes whose
scores would not fit in memory."""
import argparse
import math
import time

import torch
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--hidden", type=int, default=1280)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--ffn", type=int, default=5120)
    ap.add_argument("--family", default="gpt")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    S, d, H, Fh = a.seq, a.hidden, a.heads, a.ffn
    hd = d // H
    llama = a.family == "llama"

    def w(*shape, std=0.02):
        return (torch.randn(*shape) * std).requires_grad_(True)

    n1w, n2w = torch.ones(d, requires_grad=True), torch.ones(d, requires_grad=True)
    n1b, n2b = torch.zeros(d, requires_grad=True), torch.zeros(d, requires_grad=True)
    wqkv, wo = w(3 * d, d), w(d, d)
    w1, w2 = w((2 if llama else 1) * Fh, d), w(d, Fh)
    x = torch.randn(S, d, requires_grad=True)
    dy = torch.randn(S, d)
    mask = torch.ones(S, S, dtype=torch.bool).tril()
    if llama:
        pos = torch.arange(S, dtype=torch.float64)[:, None]
        inv = torch.tensor([10000.0 ** (-2.0 * i / hd) for i in range(hd // 2)],
                           dtype=torch.float64)[None, :]
        cos, sin = torch.cos(pos * inv).float()[:, None, :], torch.sin(pos * inv).float()[:, None, :]

    def norm(t, wt, b):
        if not llama:
            return F.layer_norm(t, (d,), wt, b, eps=1e-5)
        return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-5) * wt

    def rope(t):
        tr = t.view(S, H, hd // 2, 2)
        p, q = tr[..., 0], tr[..., 1]
        return torch.stack([p * cos - q * sin, p * sin + q * cos], -1).view(S, d)

    def block():
        h = norm(x, n1w, n1b)
        qkv = h @ wqkv.t()
        q, k, v = qkv[:, :d], qkv[:, d:2 * d], qkv[:, 2 * d:]
        if llama:
            q, k = rope(q), rope(k)
        q, k, v = (t.reshape(S, H, hd).transpose(0, 1) for t in (q, k, v))
        sc = (q @ k.transpose(1, 2)) * (1.0 / math.sqrt(hd))
        sc = sc.masked_fill(~mask, float("-inf"))
        att = (torch.softmax(sc, -1) @ v).transpose(0, 1).reshape(S, d)
        x2 = x + att @ wo.t()
        h2 = norm(x2, n2w, n2b)
        if llama:
            gu = h2 @ w1.t()
            m = F.silu(gu[:, :Fh]) * gu[:, Fh:]
        else:
            m = F.gelu(h2 @ w1.t(), approximate="tanh")
        return x2 + m @ w2.t()

    times = []
    for r in range(a.reps + 1):
        t0 = time.perf_counter()
        y = block()
        y.backward(dy)
        t1 = time.perf_counter()
        if r:
            times.append(t1 - t0)  # first run is a warm-up
        for p in (x, n1w, n2w, n1b, n2b, wqkv, wo, w1, w2):
            p.grad = None
        del y
    times.sort()
    print("torch_seconds %.6f %.6f" % (times[0], times[len(times) // 2]))


if __name__ == "__main__":
    main()
