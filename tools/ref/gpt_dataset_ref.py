#!/usr/bin/python3
"""Reference fixtures for megatron.cpp's data module (src/data/): numpy's generators and
Megatron's GPT dataset index machinery.

The GPT part is a small pure-Python + numpy port of Megatron-LM's
megatron/core/datasets/gpt_dataset.py (GPTDataset._build_document_sample_shuffle_indices,
_build_document_index, _build_shuffle_index, _query_document_sample_shuffle_indices,
_get_ltor_masks_and_position_ids, MockGPTLowLevelDataset), helpers.cpp::build_sample_idx,
blended_megatron_dataset_config.py (parse_and_normalize_split,
convert_split_vector_to_split_matrix) and blended_megatron_dataset_builder.py
(_build_megatron_dataset_splits). The random draws are numpy's own (RandomState, default_rng),
so the fixtures pin our C++ generators and index builders to real numpy.

Writes two small text fixtures, one record per line: `key value value ...`.
  tests/golden/data_numpy_random.txt
  tests/golden/data_gpt_dataset.txt

Run (Debian's python3-numpy; output is deterministic):
  /usr/bin/python3 tools/ref/gpt_dataset_ref.py tests/golden
"""
import functools
import math
import os
import re
import sys

import numpy

MASK64 = (1 << 64) - 1


def hash_values(values):
    """Order-sensitive 64-bit hash of integers (mod 2^64); the C++ tests compute the same."""
    h = 0x9E3779B97F4A7C15
    for v in values:
        h = (h * 1000003 + (int(v) & MASK64)) & MASK64
    return h


def line(key, *values):
    return " ".join([key] + [str(int(v)) if not isinstance(v, str) else v for v in values])


# ----------------------------------------------------------------------------------------------
# numpy generators


def numpy_random_fixture():
    out = []
    seeds = [0, 1, 42, 1234, 2**31 + 7, 2**32 - 1]
    for seed in seeds:
        raw = numpy.random.RandomState(seed).randint(0, 2**32, size=2000, dtype=numpy.uint32)
        out.append(line("mt_raw", seed, hash_values(raw), *raw[:8]))
    for seed in seeds:
        for n in [0, 1, 2, 3, 5, 10, 33]:
            out.append(line("permutation", seed, n, *numpy.random.RandomState(seed).permutation(n)))
        for n in [1000, 100003]:
            p = numpy.random.RandomState(seed).permutation(n)
            out.append(line("permutation_hash", seed, n, hash_values(p)))
    # shuffle of an int32 array (the document index's dtype) draws exactly like permutation.
    arr = numpy.arange(50, dtype=numpy.int32) * 3
    numpy.random.RandomState(99).shuffle(arr)
    out.append(line("shuffle_int32_x3", 99, 50, *arr))
    # random_interval(max) == legacy randint(0, max + 1, dtype=int64): 32-bit masked draws, and
    # 64-bit masked draws (two MT outputs, first one high) past 2^32 - 1; mixed in one stream.
    maxes = [1, 2, 3, 7, 100, 2**31, 2**32 - 2, 2**32 - 1, 2**32, 2**33 + 5, 2**40 + 12345,
             2**62 + 1, 2**63 - 2, 5, 2**45, 6]
    for seed in [0, 1234, 77]:
        rs = numpy.random.RandomState(seed)
        vals = []
        for m in maxes:
            vals += [m, int(rs.randint(0, m + 1, dtype=numpy.int64))]
        out.append(line("interval", seed, *vals))
    for entropy in [0, 1, 1234, 2**32 - 1, 2**32, 2**63 + 12345, 2**64 - 1]:
        out.append(line("seedseq", entropy, *numpy.random.SeedSequence(entropy).generate_state(8)))
    for seed in [0, 1, 1234, 2**40 + 3]:
        out.append(line("pcg_raw", seed, *numpy.random.default_rng(seed).bit_generator.random_raw(8)))
        out.append(line("pcg_next32", seed, *numpy.random.default_rng(seed).integers(
            0, 2**32, size=7, dtype=numpy.uint32)))
    ranges = [(0, 10, 20), (1, 4096, 20), (-5, 5, 11), (0, 2, 9), (7, 8, 3), (0, 2**32, 5),
              (0, 2**32 - 1, 5), (0, 2**40, 5), (-2**62, 2**62, 5), (3, 2**31 + 3, 6)]
    for seed in [0, 5, 1234]:
        for low, high, size in ranges:
            v = numpy.random.default_rng(seed).integers(low, high, size=size)
            out.append(line("integers", seed, low, high, size, *v))
        # One stream of scalar draws of mixed widths: the 32-bit half buffer survives a 64-bit draw.
        g = numpy.random.default_rng(seed)
        vals = []
        for low, high, _ in ranges * 2:
            vals += [low, high, int(g.integers(low, high))]
        out.append(line("integers_seq", seed, *vals))
    lengths = numpy.random.default_rng(seed=0).integers(low=1, high=4096, size=100000, dtype=numpy.int32)
    out.append(line("mock_lengths", len(lengths), int(lengths.sum()), hash_values(lengths),
                    *lengths[:16], *lengths[-4:]))
    return out


# ----------------------------------------------------------------------------------------------
# Megatron's GPT dataset, ported


def parse_and_normalize_split(split):
    split = list(map(float, re.findall(r"[.0-9]+", split)))
    split = split + [0.0 for _ in range(3 - len(split))]
    assert len(split) == 3
    w = numpy.array(split, dtype=numpy.float64)
    return (w / numpy.sum(w)).tolist()


def convert_split_vector_to_split_matrix(vector):
    expansion = functools.reduce(lambda a, b: a + [a[len(a) - 1] + b], [[0], *vector])
    bookends = list(zip(expansion[:-1], expansion[1:]))
    return [None if b[1] <= b[0] else b for b in bookends]


def split_ranges(split, n):
    """(beg, end) of each split's sequence ids, or None (the builder's per-split arange)."""
    matrix = convert_split_vector_to_split_matrix(parse_and_normalize_split(split))
    return [None if b is None else (int(round(b[0] * float(n))), int(round(b[1] * float(n))))
            for b in matrix]


def split_indices(split, n):
    return [None if r is None else numpy.arange(start=r[0], stop=r[1], step=1, dtype=numpy.int32)
            for r in split_ranges(split, n)]


def build_document_index(documents, num_epochs, rs, separate_final_epoch):
    if not separate_final_epoch or num_epochs == 1:
        document_index = numpy.mgrid[0:num_epochs, 0:len(documents)][1]
        document_index[:] = documents
        document_index = document_index.reshape(-1).astype(numpy.int32)
        rs.shuffle(document_index)
        return document_index
    first = build_document_index(documents, num_epochs - 1, rs, False)
    last = build_document_index(documents, 1, rs, False)
    return numpy.concatenate((first, last))


def build_sample_idx(sizes, document_idx, seq_length, num_epochs, tokens_per_epoch, drop_last, extra):
    """helpers.cpp::build_sample_idx, line by line."""
    if drop_last:
        num_samples = (num_epochs * tokens_per_epoch - extra) // seq_length
    else:
        num_samples = math.ceil(float(numpy.float32(num_epochs * tokens_per_epoch - extra)
                                      / numpy.float32(seq_length)))
    sample_idx = [(0, 0)]
    d, off = 0, 0
    while len(sample_idx) <= num_samples:
        remaining = seq_length + extra
        while remaining != 0:
            doc_len = int(sizes[document_idx[d]]) - off
            remaining -= doc_len
            if remaining <= 0:
                off += remaining + doc_len - extra
                remaining = 0
            else:
                if d == len(document_idx) - 1:
                    assert len(sample_idx) == num_samples
                    off = int(sizes[document_idx[d]]) - extra
                    break
                d += 1
                off = 0
        sample_idx.append((d, off))
    return numpy.array(sample_idx, dtype=numpy.int64)


def build_shuffle_index(num_samples, total_size, rs):
    dtype_ = numpy.uint32 if total_size < numpy.iinfo(numpy.uint32).max - 1 else numpy.int64
    first = numpy.arange(0, num_samples, 1, dtype=dtype_)
    rs.shuffle(first)
    if num_samples == total_size:
        return first
    last = numpy.arange(num_samples, total_size, 1, dtype=dtype_)
    rs.shuffle(last)
    return numpy.concatenate((first, last))


class RefGPTDataset:
    def __init__(self, sizes, get, indices, num_samples, split_index, cfg):
        self.sizes, self.get, self.cfg = sizes, get, cfg
        seq, extra = cfg["seq_length"], cfg["extra"]
        tokens_per_epoch = int(numpy.sum(sizes[indices]))
        num_epochs = 1
        if num_samples is not None:
            num_tokens = tokens_per_epoch
            while num_tokens < num_samples * seq + extra:
                num_epochs += 1
                num_tokens += tokens_per_epoch
        separate = False
        if num_epochs > 1:
            sans_final = ((num_epochs - 1) * tokens_per_epoch - extra) // seq
            from_final = num_samples - sans_final
            per_epoch = (tokens_per_epoch - extra) // seq
            assert 0 <= from_final <= per_epoch + 1
            separate = from_final < int(0.80 * per_epoch)
        rs = numpy.random.RandomState(cfg["seed"])
        self.document_index = build_document_index(indices, num_epochs, rs, separate)
        drop_last = cfg["drop_last_valid"] if split_index == 1 else True
        self.sample_index = build_sample_idx(sizes, self.document_index, seq, num_epochs,
                                             tokens_per_epoch, drop_last, extra)
        total = self.sample_index.shape[0] - 1
        self.shuffle_index = build_shuffle_index(sans_final if separate else total, total, rs)
        self.num_epochs, self.separate = num_epochs, separate

    def __len__(self):
        return self.sample_index.shape[0] - 1

    def text(self, idx):
        extra, pad = self.cfg["extra"], self.cfg["pad"]
        idx = self.shuffle_index[idx]
        d0, o0 = self.sample_index[idx]
        d1, o1 = self.sample_index[idx + 1]
        parts = []
        if d0 == d1:
            parts.append(self.get(self.document_index[d0], int(o0), int(o1 - o0 + extra)))
        else:
            for i in range(d0, d1 + 1):
                offset = 0 if i > d0 else o0
                length = None if i < d1 else o1 + extra
                parts.append(self.get(self.document_index[i], int(offset), length))
        n = sum(map(len, parts))
        want = self.cfg["seq_length"] + extra
        if n < want:
            parts.append([pad] * (want - n))
        return numpy.concatenate(parts).astype(numpy.int64)

    def sample(self, idx):
        cfg = self.cfg
        text = self.text(idx)
        if cfg["extra"]:
            tokens, labels = text[:-1].copy(), text[1:].copy()
        else:
            tokens = text.copy()
            labels = numpy.roll(text, -1)
            labels[-1] = cfg["pad"]
        n = len(tokens)
        loss_mask = numpy.ones(n, dtype=numpy.float32)
        if cfg["eod_mask_loss"]:
            loss_mask[tokens == cfg["eod"]] = 0.0
        position_ids = numpy.arange(n, dtype=numpy.int64)
        if cfg["reset_position_ids"]:
            prev = 0
            for i in numpy.nonzero(tokens == cfg["eod"])[0]:
                position_ids[i + 1:] -= i + 1 - prev
                prev = i + 1
        loss_mask[labels == cfg["pad"]] = 0.0
        tokens[tokens == cfg["pad"]] = 0
        labels[labels == cfg["pad"]] = 0
        return tokens, labels, loss_mask, position_ids


def slicer(content_fn, sizes):
    """Megatron's dataset.get(idx, offset, length) over content_fn(seq_id) -> full sequence."""
    def get(i, offset=0, length=None):
        seq = content_fn(int(i), int(sizes[i]))
        if length is None:
            length = int(sizes[i]) - offset
        return seq[offset:offset + length]
    return get


SYNTH_EOD = 0


def synthetic_sequence(i, length):
    """Token j of synthetic sequence i (the C++ test builds the same): EOD last."""
    seq = [1 + (i * 131 + j * 7) % 50 for j in range(length - 1)] + [SYNTH_EOD]
    return numpy.array(seq, dtype=numpy.int64)


def dataset_records(name, ds, full, n_samples):
    out = [line("case", name), line("num_epochs", ds.num_epochs), line("separate", int(ds.separate)),
           line("size", len(ds))]
    arrays = [("document_index", ds.document_index), ("sample_index", ds.sample_index.reshape(-1)),
              ("shuffle_index", ds.shuffle_index)]
    for key, a in arrays:
        if full:
            out.append(line(key, *a))
        else:
            out.append(line(key + "_hash", len(a), hash_values(a), *a[:8]))
    for i in range(min(n_samples, len(ds))):
        tokens, labels, loss_mask, position_ids = ds.sample(i)
        out.append(line("tokens", i, *tokens))
        # labels[k] == tokens[k + 1] always (both read text[k + 1]); only the last one is new.
        assert (labels[:-1] == tokens[1:]).all()
        out.append(line("last_label", i, labels[-1]))
        out.append(line("loss_mask", i, *loss_mask.astype(numpy.int64)))
        out.append(line("position_ids", i, *position_ids))
    return out


def gpt_fixture():
    out = []
    small = numpy.array([5, 17, 3, 40, 1, 9, 26], dtype=numpy.int32)
    large = numpy.random.RandomState(7).randint(1, 300, size=200).astype(numpy.int32)
    cases = [
        # name, lengths, split, split index, num_samples, seq, seed, drop_last_valid, eod_mask,
        # reset_pos, extra, full arrays, samples recorded
        ("train_multi_epoch", small, "4,2,1", 0, 40, 8, 1234, 1, 0, 0, 1, True, 12),
        ("train_separate_final", small, "4,2,1", 0, 26, 8, 1234, 1, 1, 1, 1, True, 12),
        ("train_one_epoch", small, "1", 0, None, 6, 5, 1, 1, 1, 1, True, 20),
        ("valid_partial", small, "4,2,1", 1, None, 4, 3, 0, 1, 0, 1, True, 20),
        ("valid_partial_multi", small, "4,2,1", 1, 9, 4, 3, 0, 0, 1, 1, True, 20),
        ("test_no_extra", small, "4,2,1", 2, 12, 5, 8, 1, 1, 1, 0, True, 12),
        ("large_train", large, "969,30,1", 0, 2500, 32, 1234, 1, 1, 1, 1, False, 6),
        ("large_separate", large, "969,30,1", 0, 1300, 32, 42, 1, 0, 1, 1, False, 6),
        ("large_valid", large, "90,8,2", 1, 100, 16, 1234, 0, 1, 0, 1, False, 6),
        # The 80% threshold itself: 877 samples per epoch, int(0.8 * 877) = 701 from the last epoch.
        ("large_threshold_below", large, "969,30,1", 0, 877 + 700, 32, 1234, 1, 0, 0, 1, False, 2),
        ("large_threshold_at", large, "969,30,1", 0, 877 + 701, 32, 1234, 1, 0, 0, 1, False, 2),
    ]
    previous_sizes = None
    for (name, sizes, split, si, num_samples, seq, seed, dlv, eml, rpi, extra, full, ns) in cases:
        cfg = dict(seq_length=seq, seed=seed, drop_last_valid=dlv, eod_mask_loss=eml,
                   reset_position_ids=rpi, extra=extra, eod=SYNTH_EOD, pad=-1)
        indices = split_indices(split, len(sizes))[si]
        ds = RefGPTDataset(sizes, slicer(synthetic_sequence, sizes), indices, num_samples, si, cfg)
        out.append(line("setup", name, split, si, -1 if num_samples is None else num_samples, seq, seed,
                        dlv, eml, rpi, extra))
        if previous_sizes is not sizes:  # a case reuses the last "lengths" record when absent
            out.append(line("lengths", *sizes))
            previous_sizes = sizes
        out += dataset_records(name, ds, full, ns)

    # Splits: the normalized vectors (as float hex) and (begin, end) per split, -1 -1 for none.
    for split, n in [("969,30,1", 1000), ("969, 30, 1", 7), ("1,1,1", 100000), ("98,2", 333),
                     ("0.5 0.25 0.25", 10), ("1", 5), ("3,0,1", 9), ("2.5,2.5", 3),
                     ("1,1", 5), ("1,3", 2)]:
        vec = parse_and_normalize_split(split)
        ranges = []
        for r in split_ranges(split, n):
            ranges += [-1, -1] if r is None else list(r)
        out.append("split " + split.replace(" ", "_") + " " + str(n) + " " +
                   " ".join(v.hex() for v in vec) + " " + " ".join(map(str, ranges)))

    # --mock-data: NullTokenizer --vocab-size 1000 (eod 999, pad -1), seq 64, seed 1234,
    # sizes = 10 iterations x global batch 8 for train, 2 x 8 for valid and test.
    vocab, eod = 1000, 999
    lengths = numpy.random.default_rng(seed=0).integers(low=1, high=4096, size=100000, dtype=numpy.int32)

    def mock_sequence(i, length):
        return numpy.int64(numpy.concatenate([(numpy.arange(length - 1) + 1) % vocab, [eod]]))

    sizes = [80, 16, 16]
    for si, idx in enumerate(split_indices("1,1,1", len(lengths))):
        cfg = dict(seq_length=64, seed=1234, drop_last_valid=1, eod_mask_loss=1, reset_position_ids=1,
                   extra=1, eod=eod, pad=-1)
        ds = RefGPTDataset(lengths, slicer(mock_sequence, lengths), idx, sizes[si], si, cfg)
        out.append(line("mock", si, sizes[si]))
        out += dataset_records("mock_%d" % si, ds, False, 8)
    return out


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else "tests/golden"
    for name, records in [("data_numpy_random.txt", numpy_random_fixture()),
                          ("data_gpt_dataset.txt", gpt_fixture())]:
        path = os.path.join(outdir, name)
        with open(path + ".tmp", "w") as f:
            f.write("# generated by tools/ref/gpt_dataset_ref.py with numpy %s; do not edit\n" % numpy.__version__)
            f.write("\n".join(records) + "\n")
        os.replace(path + ".tmp", path)
        print(path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
