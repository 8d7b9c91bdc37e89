#!/usr/bin/env python3
"""bench/paper_activation_memory.py: activation memory per GPU for the GPT models of Korthikanti
et al. (2205.05198, Table 3: s = 2048, b = 1), with tensor parallelism alone and with sequence
parallelism + selective recomputation, three ways side by side:

  paper     the paper's per-layer formulas times the L layers' worth the first pipeline stage keeps
            (p micro-batches in flight of L/p layers each): s*b*h*(10 + 24/t + 5*a*s/(h*t)) and
            s*b*h*34/t
  megatron  Megatron-LM's report_theoretical_memory (training/theoretical_memory_usage.py): its
            SP + selective formula, and its "without SP" one, which has no attention-score term
  ours      `megatron plan --json`: the first pipeline rank's activation bytes, exactly what
            train reserves for them (bf16, dropout 0.1; unfused attention without recomputation,
            the flash path with it, as selective recomputation requires)

Usage: bench/paper_activation_memory.py [path/to/megatron]   (default build/megatron)
Prints a Markdown table (GiB) for docs/performance.md."""
import json
import subprocess
import sys

MEGATRON = sys.argv[1] if len(sys.argv) > 1 else "build/megatron"
S, B, V = 2048, 1, 51200
GIB = 1024.0**3
# name, heads, hidden, layers, tp, pp, global batch (the paper's Table 3)
MODELS = [
    ("22B", 64, 6144, 48, 8, 1, 4),
    ("175B", 96, 12288, 96, 8, 8, 64),
    ("530B", 128, 20480, 105, 8, 35, 280),
    ("1T", 160, 25600, 128, 8, 64, 512),
]


def ours(a, h, L, t, p, gbs, sp_selective):
    args = [MEGATRON, "plan", "--json", "--num-layers", str(L), "--hidden-size", str(h), "--num-attention-heads",
            str(a), "--seq-length", str(S), "--micro-batch-size", str(B), "--global-batch-size", str(gbs),
            "--vocab-size", str(V), "--tensor-model-parallel-size", str(t), "--pipeline-model-parallel-size", str(p),
            "--world-size", str(t * p), "--bf16", "--lr", "1e-4", "--train-iters", "1"]
    args += ["--sequence-parallel", "--recompute-activations"] if sp_selective else ["--attention-backend", "unfused"]
    plan = json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)
    return plan["ranks"][0]["activations_bytes"]


def megatron(a, h, L, t, p, gbs, sp_selective):
    f = 4 * h
    m = gbs  # micro-batches per iteration (dp = 1)
    per_layer = S * B * h * ((18 + 4 * f / h) if sp_selective else (10 + 24 / t))
    total = per_layer * L + 8 * S * B * p + S * B * h * p
    if p > 1:
        total *= min(1, m / p)
    if sp_selective:
        if p == 1:
            total += S * B * h * 4 * (1 + V / h)
        return total / t
    if p == 1:
        total += (S * B * V / t + S * B * h) * 2
    return total * 1.05


def paper(a, h, L, t, p, gbs, sp_selective):
    per_layer = S * B * h * (34 / t if sp_selective else 10 + 24 / t + 5 * a * S / (h * t))
    return per_layer * L


print("| model | t | p | paper TP | paper SP+sel | ratio | Megatron TP | Megatron SP+sel | ours TP | ours SP+sel | ratio |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for name, a, h, L, t, p, gbs in MODELS:
    row = [name, str(t), str(p)]
    for fn in (paper, megatron, ours):
        base, reduced = fn(a, h, L, t, p, gbs, False), fn(a, h, L, t, p, gbs, True)
        row += [f"{base / GIB:.1f}", f"{reduced / GIB:.1f}"]
        if fn is not megatron:
            row.append(f"{base / reduced:.2f}x")
    print("| " + " | ".join(row) + " |")
