#!/usr/bin/env python3
"""Dumps the fortune files of Debian's `fortunes` package (plain text, entries separated by lines
holding a single '%') to JSON lines, one {"text": ...} per fortune, shuffled with a fixed seed so
that the contiguous train/valid/test splits of --split each mix every fortune file.
usage: fortunes_to_jsonl.py [DIR] > corpus.jsonl   (DIR defaults to /usr/share/games/fortunes)"""
import json
import os
import random
import sys

root = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/games/fortunes"
fortunes = []
for name in sorted(os.listdir(root)):
    path = os.path.join(root, name)
    # Skip the strfile indexes (.dat), the UTF-8 duplicates (.u8) and symbolic links to other files.
    if name.endswith((".dat", ".u8")) or os.path.islink(path) or not os.path.isfile(path):
        continue
    with open(path, encoding="utf-8", errors="replace") as f:
        entry = []
        for line in f:
            if line.rstrip("\n") == "%":
                if entry:
                    fortunes.append("".join(entry))
                entry = []
            else:
                entry.append(line)
        if entry:
            fortunes.append("".join(entry))
random.Random(1234).shuffle(fortunes)
for text in fortunes:
    print(json.dumps({"text": text}))
print("fortunes_to_jsonl: %d fortunes from %s" % (len(fortunes), root), file=sys.stderr)
