#!/usr/bin/env python3
"""PyTorch CPU timing of one transformer block's forward+backward, the same
block as bsipipe's kernels (GPT: LayerNorm, bias-free linears, tanh-GeLU MLP;
LLaMA: RMSNorm, RoPE, SwiGLU), whole sequence, fp32. Invoked by
bsipipe-kbench; prints "torch_version V", "torch_attention PATH" and, best
and median seconds, "torch_attn_seconds" (attention alone, forward +
backward), "torch_gemm_seconds" (the block's matrix products alone, forward
+ backward) and "torch_seconds" (the block), or "torch_skipped memory".
Attention is F.scaled_dot_product_attention(is_causal=True) when torch has
it (2.x: the fused flash-attention CPU kernel); on 1.x the masked-softmax
form, which materialises [H, S, S] scores: sizes whose scores would not fit
in --mem-kb are skipped."""
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
    ap.add_argument("--mem-kb", type=float, default=0, help="available memory (masked path's check)")
    a = ap.parse_args()
    sdpa = hasattr(F, "scaled_dot_product_attention")
    print("torch_version %s" % torch.__version__)
    print("torch_attention %s" % ("sdpa" if sdpa else "masked-softmax"))
    if not sdpa and a.mem_kb > 0 and 5.0 * a.heads * a.seq * a.seq * 4 / 1024 > 0.7 * a.mem_kb:
        print("torch_skipped memory")
        return
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
    mask = None if sdpa else torch.ones(S, S, dtype=torch.bool).tril()
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

    def attention(q, k, v):
        if sdpa:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        sc = (q @ k.transpose(1, 2)) * (1.0 / math.sqrt(hd))
        sc = sc.masked_fill(~mask, float("-inf"))
        return torch.softmax(sc, -1) @ v

    def block():
        h = norm(x, n1w, n1b)
        qkv = h @ wqkv.t()
        q, k, v = qkv[:, :d], qkv[:, d:2 * d], qkv[:, 2 * d:]
        if llama:
            q, k = rope(q), rope(k)
        q, k, v = (t.reshape(S, H, hd).transpose(0, 1) for t in (q, k, v))
        att = attention(q, k, v).transpose(0, 1).reshape(S, d)
        x2 = x + att @ wo.t()
        h2 = norm(x2, n2w, n2b)
        if llama:
            gu = h2 @ w1.t()
            m = F.silu(gu[:, :Fh]) * gu[:, Fh:]
        else:
            m = F.gelu(h2 @ w1.t(), approximate="tanh")
        return x2 + m @ w2.t()

    def timed(step, reset=lambda: None):
        times = []
        for r in range(a.reps + 1):
            t0 = time.perf_counter()
            step()
            t1 = time.perf_counter()
            if r:
                times.append(t1 - t0)  # first run is a warm-up
            reset()
        times.sort()
        return times[0], times[len(times) // 2]

    # attention alone, forward + backward, on [H, S, hd]
    qa, ka, va = (torch.randn(H, S, hd, requires_grad=True) for _ in range(3))
    doa = torch.randn(H, S, hd)

    def attn_step():
        attention(qa, ka, va).backward(doa)

    def attn_reset():
        for p in (qa, ka, va):
            p.grad = None

    # the block's matrix products alone: each linear's Y = X W^T, dX = dY W,
    # dW = dY^T X, as plain torch.mm
    lin = [(3 * d, d), (d, d), ((2 if llama else 1) * Fh, d), (d, Fh)]
    mats = [(torch.randn(S, i), torch.randn(o, i), torch.randn(S, o)) for o, i in lin]

    def gemm_step():
        with torch.no_grad():
            for X, W, dY in mats:
                torch.mm(X, W.t())
                torch.mm(dY, W)
                torch.mm(dY.t(), X)

    def block_step():
        block().backward(dy)

    def block_reset():
        for p in (x, n1w, n2w, n1b, n2b, wqkv, wo, w1, w2):
            p.grad = None

    print("torch_attn_seconds %.6f %.6f" % timed(attn_step, attn_reset))
    print("torch_gemm_seconds %.6f %.6f" % timed(gemm_step))
    print("torch_seconds %.6f %.6f" % timed(block_step, block_reset))


if __name__ == "__main__":
    main()
