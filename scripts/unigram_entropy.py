#!/usr/bin/env python3
"""Prints the unigram entropy (nats per token) of the tokens of a Megatron .bin/.idx dataset's
train split: the loss of the best model that ignores context, so a trained model's loss well below
it shows it learned from context. Standard library only.
usage: unigram_entropy.py PREFIX [SPLIT]   (SPLIT as --split, default 969,30,1)"""
import array
import collections
import math
import re
import struct
import sys

prefix = sys.argv[1]
split = sys.argv[2] if len(sys.argv) > 2 else "969,30,1"
with open(prefix + ".idx", "rb") as f:
    idx = f.read()
assert idx[:9] == b"MMIDIDX\x00\x00", "not a Megatron index: " + prefix + ".idx"
code = idx[17]
n = struct.unpack_from("<Q", idx, 18)[0]
typecode = {1: "B", 2: "b", 3: "h", 4: "i", 5: "q", 8: "H"}[code]
lengths = array.array("i", idx[34:34 + 4 * n])
weights = [float(x) for x in re.findall(r"[.0-9]+", split)] + [0.0, 0.0]
end = int(round(weights[0] / sum(weights[:3]) * n))  # the train split is sequences [0, end)
count = sum(lengths[:end])
tokens = array.array(typecode)
with open(prefix + ".bin", "rb") as f:
    tokens.fromfile(f, count)
freq = collections.Counter(tokens)
entropy = -sum(c / count * math.log(c / count) for c in freq.values())
print("unigram entropy of the %d train-split tokens (%d distinct): %.3f nats" % (count, len(freq), entropy))
