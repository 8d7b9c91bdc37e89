#!/usr/bin/python3
"""PyTorch eager baseline for bench/generate_throughput: GPT-2 124M decoding with a KV cache.

    /usr/bin/python3 bench/pytorch_generate.py [--batch 1,16] [--prompt 32] [--tokens 32] [--repeats 3]

The same model and procedure as generate_throughput.cpp: GPT-2 124M in fp32 (12 layers, hidden 768, 12
heads, vocab 50257, learned positions, pre-LayerNorm, GeLU-tanh, biases, tied output layer), random
weights; per batch size, a prefill of `prompt` tokens per sequence, then `tokens` greedy decode steps
of one token per sequence against a KV cache preallocated for prompt + tokens positions (written in
place, attention over the filled prefix). Prints one line per batch size with the decode tokens/s
(median over repeats, decode steps only). Threads: OMP_NUM_THREADS if set, else 2. A benchmark: it
never fails on time.
"""
import argparse
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

L, H, NH, V = 12, 768, 12, 50257
D = H // NH


class Gpt2:
    def __init__(self, max_len):
        g = torch.Generator().manual_seed(1)
        w = lambda *shape: torch.randn(*shape, generator=g) * 0.02
        self.wte, self.wpe = w(V, H), w(max_len, H)
        self.layers = [dict(ln1=(torch.ones(H), torch.zeros(H)), qkv=(w(3 * H, H), torch.zeros(3 * H)),
                            proj=(w(H, H), torch.zeros(H)), ln2=(torch.ones(H), torch.zeros(H)),
                            fc1=(w(4 * H, H), torch.zeros(4 * H)), fc2=(w(H, 4 * H), torch.zeros(H)))
                       for _ in range(L)]
        self.lnf = (torch.ones(H), torch.zeros(H))

    def forward(self, tokens, start, k_cache, v_cache):
        """tokens [b, t] at positions start..start+t-1; caches [L, b, NH, max_len, D]. Logits of the last position."""
        b, t = tokens.shape
        x = self.wte[tokens] + self.wpe[start:start + t]
        causal = torch.ones(t, start + t, dtype=torch.bool).tril(diagonal=start)
        for i, p in enumerate(self.layers):
            h = F.layer_norm(x, (H,), *p["ln1"], 1e-5)
            q, k, v = F.linear(h, *p["qkv"]).view(b, t, 3, NH, D).permute(2, 0, 3, 1, 4)
            k_cache[i, :b, :, start:start + t] = k
            v_cache[i, :b, :, start:start + t] = v
            keys, values = k_cache[i, :b, :, :start + t], v_cache[i, :b, :, :start + t]
            scores = (q @ keys.transpose(-1, -2)) / math.sqrt(D)
            att = scores.masked_fill(~causal, float("-inf")).softmax(-1) @ values
            x = x + F.linear(att.transpose(1, 2).reshape(b, t, H), *p["proj"])
            h = F.layer_norm(x, (H,), *p["ln2"], 1e-5)
            x = x + F.linear(F.gelu(F.linear(h, *p["fc1"]), approximate="tanh"), *p["fc2"])
        return F.linear(F.layer_norm(x[:, -1], (H,), *self.lnf, 1e-5), self.wte)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", default="1,16")
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    batches = [int(x) for x in a.batch.split(",")]
    max_len = a.prompt + a.tokens
    model = Gpt2(max_len)
    k_cache = torch.zeros(L, max(batches), NH, max_len, D)
    v_cache = torch.zeros_like(k_cache)
    print(f"pytorch {torch.__version__}, {torch.get_num_threads()} threads", file=sys.stderr)
    with torch.no_grad():
        for b in batches:
            prompts = (torch.arange(b * a.prompt) * 7919 % V).view(b, a.prompt)
            rates = []
            for _ in range(a.repeats):
                logits = model.forward(prompts, 0, k_cache, v_cache)
                start = time.perf_counter()
                for t in range(a.tokens):
                    logits = model.forward(logits.argmax(-1, keepdim=True), a.prompt + t, k_cache, v_cache)
                rates.append(b * a.tokens / (time.perf_counter() - start))
            rate = statistics.median(rates)
            print(f"pytorch batch {b}: decode {rate:.1f} tokens/s, {1e3 * b / rate:.1f} ms per step")


if __name__ == "__main__":
    main()
