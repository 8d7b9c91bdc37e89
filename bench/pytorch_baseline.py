#!/usr/bin/python3
"""PyTorch eager baseline for bench/train_throughput: the same GPT-2-style training step, in plain torch.nn.

    /usr/bin/python3 bench/pytorch_baseline.py tiny|small|gpt2-124m [--iters N] [--warmup N]

Prints one line on stdout in train_throughput's format (median ms/iter over the measured iterations after
warm-up, tokens/s, peak RSS of this process); a header with the torch version, threads and BLAS kernels
goes to stderr. Run one config per process so that the peak RSS is per config (bench/compare_pytorch.sh
does). A benchmark, not a test: it never fails on time.

Model, as in train_throughput.cpp: untied GPT-2 (learned positions, pre-LayerNorm eps 1e-5, fused qkv,
explicit causal softmax attention, GeLU-tanh MLP of 4h, biases, hidden and attention dropout 0.1,
vocab 50304, output layer without bias), fp32, mean cross-entropy on the logits, AdamW (lr 1e-4,
betas 0.9/0.999, eps 1e-8, weight decay 0.01 on the weight matrices only, as Megatron), gradient
clipping at global norm 1.0. Threads: OMP_NUM_THREADS if set, else 2.
"""
import argparse
import ctypes
import math
import os
import resource
import statistics
import sys
import time

CONFIGS = {  # name: (layers, hidden, heads, seq, batch), as kConfigs in bench/train_throughput.cpp
    "tiny": (4, 256, 4, 256, 8),
    "small": (6, 512, 8, 512, 4),
    "gpt2-124m": (12, 768, 12, 512, 4),
}
VOCAB = 50304


def retune_openblas_or_continue():
    """Same rule as app/blas_tuning.cpp, so both sides use the same sgemm kernels.

    Debian's torch calls the system OpenBLAS for fp32 matmuls; OpenBLAS 0.3.21 falls back to its
    generic "Prescott" kernels on recent Xeons. When OPENBLAS_CORETYPE is unset and OpenBLAS chose
    Prescott on a CPU with AVX-512 (or AVX2+FMA), set the variable and re-execute before torch loads.
    """
    if "OPENBLAS_CORETYPE" in os.environ:
        return
    if openblas_corename() != "Prescott":
        return
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return
    if all(f in flags for f in ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd")):
        coretype = "SkylakeX"
    elif "avx2" in flags and "fma" in flags:
        coretype = "Haswell"
    else:
        return
    os.environ["OPENBLAS_CORETYPE"] = coretype
    os.execv(sys.executable, [sys.executable] + sys.argv)  # returns only on failure


def openblas_corename():
    try:
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        return lib.openblas_get_corename().decode()
    except (OSError, AttributeError):
        return "unknown"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("config", choices=sorted(CONFIGS))
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--seed", type=int, default=1234)
    args = p.parse_args()
    if args.iters < 1 or args.warmup < 0:
        p.error("--iters must be >= 1 and --warmup >= 0")
    return args


def main():
    args = parse_args()
    retune_openblas_or_continue()

    import torch  # after the OpenBLAS decision: OpenBLAS reads OPENBLAS_CORETYPE when it loads
    import torch.nn as nn
    import torch.nn.functional as F

    threads = int(os.environ.get("OMP_NUM_THREADS", "2") or "2")
    torch.set_num_threads(threads)
    torch.manual_seed(args.seed)

    layers, hidden, heads, seq, batch = CONFIGS[args.config]
    dropout = 0.1

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(hidden, 3 * hidden)
            self.proj = nn.Linear(hidden, hidden)
            self.attn_drop = nn.Dropout(dropout)
            self.register_buffer("causal", torch.ones(seq, seq, dtype=torch.bool).triu(1), persistent=False)

        def forward(self, x):  # x [b, s, h]
            b, s, h = x.shape
            d = h // heads
            q, k, v = self.qkv(x).view(b, s, 3, heads, d).permute(2, 0, 3, 1, 4)  # each [b, heads, s, d]
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(d)
            scores = scores.masked_fill(self.causal[:s, :s], float("-inf"))
            probs = self.attn_drop(F.softmax(scores, dim=-1))
            ctx = (probs @ v).transpose(1, 2).reshape(b, s, h)
            return self.proj(ctx)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(hidden, eps=1e-5)
            self.attn = Attention()
            self.drop1 = nn.Dropout(dropout)
            self.ln2 = nn.LayerNorm(hidden, eps=1e-5)
            self.fc1 = nn.Linear(hidden, 4 * hidden)
            self.fc2 = nn.Linear(4 * hidden, hidden)
            self.drop2 = nn.Dropout(dropout)

        def forward(self, x):
            x = x + self.drop1(self.attn(self.ln1(x)))
            return x + self.drop2(self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh")))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(VOCAB, hidden)
            self.wpe = nn.Embedding(seq, hidden)
            self.drop = nn.Dropout(dropout)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f = nn.LayerNorm(hidden, eps=1e-5)
            self.head = nn.Linear(hidden, VOCAB, bias=False)  # untied output layer, no bias (Megatron)
            # Megatron's init: N(0, 0.02), output projections of each block N(0, 0.02/sqrt(2L)), zero biases.
            for name, p in self.named_parameters():
                if p.dim() == 1:
                    if "ln" in name and name.endswith("weight"):
                        nn.init.ones_(p)
                    else:
                        nn.init.zeros_(p)
                else:
                    std = 0.02 / math.sqrt(2 * layers) if name.endswith(("proj.weight", "fc2.weight")) else 0.02
                    nn.init.normal_(p, 0.0, std)

        def forward(self, tokens):
            pos = torch.arange(tokens.shape[1], device=tokens.device)
            x = self.drop(self.wte(tokens) + self.wpe(pos))
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.ln_f(x))

    model = GPT()
    model.train()
    params = list(model.parameters())
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
        lr=1e-4, betas=(0.9, 0.999), eps=1e-8)
    numel = sum(p.numel() for p in params)

    print(f"pytorch_baseline: torch {torch.__version__}, OpenBLAS kernels {openblas_corename()}, fp32, {torch.get_num_threads()} threads, "
          f"{args.warmup} warm-up + {args.iters} measured iterations", file=sys.stderr, flush=True)

    gen = torch.Generator().manual_seed(args.seed)
    ms = []
    for it in range(args.warmup + args.iters):
        tokens = torch.randint(0, VOCAB, (batch, seq), generator=gen)
        labels = torch.randint(0, VOCAB, (batch, seq), generator=gen)
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        logits = model(tokens)
        loss = F.cross_entropy(logits.view(-1, VOCAB), labels.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        t1 = time.perf_counter()
        del logits, loss
        if it >= args.warmup:
            ms.append((t1 - t0) * 1e3)

    med = statistics.median(ms)
    peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1024.0 * 1024.0)  # Linux: KiB
    print(f"pytorch    {args.config:<10s} params {numel / 1e6:6.1f}M | median {med:8.1f} ms/iter | "
          f"{batch * seq / (med * 1e-3):7.0f} tokens/s | peak RSS {peak_gib:.2f} GiB", flush=True)


if __name__ == "__main__":
    main()
