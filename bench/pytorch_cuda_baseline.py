"""GPT training step in PyTorch on one GPU, the baseline of scripts/device-check.sh.

The model is megatron.cpp's GPT with the same shapes (LayerNorm, GeLU MLP 4h, learned positions,
tied output layer, no dropout), bf16 autocast over fp32 weights, SDPA causal attention, fused AdamW.
Prints one line per mode (eager, compile): median step time, tokens/s, TFLOP/s by Megatron's
formula (docs: reference 4.1, causal attention at half) and MFU against 989 TFLOP/s and against the
measured bf16 cuBLAS peak, which it measures first (8192^3 matmuls on random data).

usage: python3 pytorch_cuda_baseline.py LAYERS HIDDEN HEADS SEQ MICRO_BATCH VOCAB [STEPS]
"""
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, h, n):
        super().__init__()
        self.n = n
        self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.fc1, self.fc2 = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.n, h // self.n).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, h))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Gpt(nn.Module):
    def __init__(self, layers, h, n, s, vocab):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, h), nn.Embedding(s, h)
        self.blocks = nn.ModuleList(Block(h, n) for _ in range(layers))
        self.ln_f = nn.LayerNorm(h)

    def forward(self, tokens, labels):
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1], device=tokens.device))
        for blk in self.blocks:
            x = blk(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.view(-1))


def megatron_flops(batch, s, layers, h, vocab):
    # 72·B·s·L·h²·(1 + s/(12h) + V/(12·h·L)): GeLU MLP 4h, no GQA, causal attention at half.
    return 72 * batch * s * layers * h * h * (1 + s / (12 * h) + vocab / (12 * h * layers))


def timed(fn, steps):
    times = []
    for _ in range(steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def cublas_peak():
    a = [torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
    for _ in range(3):
        a[0] @ a[1]
    t = timed(lambda: a[0] @ a[1], 10)
    return 2 * 8192**3 / t


def main():
    layers, h, n, s, mb, vocab = map(int, sys.argv[1:7])
    steps = int(sys.argv[7]) if len(sys.argv) > 7 else 10
    torch.manual_seed(0)
    peak = cublas_peak()
    print(f"cuBLAS bf16 peak (8192^3, random): {peak / 1e12:.0f} TFLOP/s")
    flops = megatron_flops(mb, s, layers, h, vocab)
    for mode in ("eager", "compile"):
        model = Gpt(layers, h, n, s, vocab).cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        run = torch.compile(model) if mode == "compile" else model
        tokens = torch.randint(0, vocab, (mb, s), device="cuda")
        labels = torch.randint(0, vocab, (mb, s), device="cuda")

        def step():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = run(tokens, labels)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        for _ in range(3):
            step()
        torch.cuda.synchronize()
        t = timed(step, steps)
        tflops = flops / t / 1e12
        print(f"pytorch {mode}: layers {layers} hidden {h} seq {s} mb {mb}: {t * 1e3:.1f} ms/step, "
              f"{mb * s / t:.0f} tokens/s, {tflops:.1f} TFLOP/s, MFU {tflops / 989 * 100:.1f}% of 989, "
              f"{tflops * 1e12 / peak * 100:.1f}% of measured peak; peak memory "
              f"{torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")
        del model, opt, run
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


if __name__ == "__main__":
    main()
