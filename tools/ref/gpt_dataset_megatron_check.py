#!/usr/bin/python3
"""Cross-checks tools/ref/gpt_dataset_ref.py (the generator of tests/golden/data_gpt_dataset.txt)
against Megatron-LM's own dataset code: BlendedMegatronDatasetBuilder + MockGPTDataset with the
real NullTokenizer, GPTDataset over the synthetic sequences, and the split-string parsers. Every
index array and every sample field must be equal. Megatron's package imports are stubbed down to
what megatron/core/datasets needs, so only Debian's python3-numpy and python3-torch are required.

Setup (once): a Megatron-LM checkout with its helpers.cpp compiled in place, e.g.
  git -C <git dir> archive HEAD megatron | tar -x -C /tmp/mlm
  cd /tmp/mlm/megatron/core/datasets && g++ -O2 -shared -std=c++17 -fPIC \
      -I/usr/include/python3.11 helpers.cpp -o helpers_cpp$(python3-config --extension-suffix)
Run:
  /usr/bin/python3 tools/ref/gpt_dataset_megatron_check.py /tmp/mlm
"""
import importlib.util
import os

import numpy

from megatron_env import MEGATRON  # first: sets up the Megatron imports below
from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
from megatron.core.datasets.blended_megatron_dataset_config import (
    convert_split_vector_to_split_matrix, parse_and_normalize_split)
from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig, MockGPTDataset
from megatron.core.datasets.utils import Split

import gpt_dataset_ref as ref


def load_null_tokenizer_class():
    path = os.path.join(MEGATRON, "megatron", "core", "tokenizers", "text", "libraries", "null_tokenizer.py")
    spec = importlib.util.spec_from_file_location("null_tokenizer", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.NullTokenizer


class TextTokenizerView:
    """The attributes megatron/core/tokenizers/text/text_tokenizer.py exposes over a library."""

    def __init__(self, library):
        self._library = library

    vocab_size = property(lambda self: self._library.vocab_size)
    eod = property(lambda self: self._library.eod)
    pad = property(lambda self: self._library.pad_id)
    unique_identifiers = property(lambda self: self._library.unique_identifiers)


def same(real, mine, what):
    assert numpy.array_equal(numpy.asarray(real), numpy.asarray(mine)), what


def check_samples(real, mine, indices, what):
    for i in indices:
        got = real[i]
        tokens, labels, loss_mask, position_ids = mine.sample(i)
        same(got["tokens"].numpy(), tokens, "%s tokens %d" % (what, i))
        same(got["labels"].numpy(), labels, "%s labels %d" % (what, i))
        same(got["loss_mask"].numpy(), loss_mask, "%s loss_mask %d" % (what, i))
        same(got["position_ids"].numpy(), position_ids, "%s position_ids %d" % (what, i))


def check_indices(real, mine, what):
    same(real.document_index, mine.document_index, what + " document_index")
    same(real.sample_index, mine.sample_index, what + " sample_index")
    same(real.shuffle_index, mine.shuffle_index, what + " shuffle_index")


def check_mock():
    """--mock-data, NullTokenizer --vocab-size 1000, seq 64, seed 1234, sizes 80/16/16."""
    tokenizer = TextTokenizerView(load_null_tokenizer_class()(1000))
    config = GPTDatasetConfig(random_seed=1234, sequence_length=64, blend=None, blend_per_split=None, split=None,
                              tokenizer=tokenizer, reset_position_ids=True, reset_attention_mask=False,
                              eod_mask_loss=True, path_to_cache=None, mmap_bin_files=False)
    sizes = [80, 16, 16]
    real = BlendedMegatronDatasetBuilder(MockGPTDataset, sizes, lambda: True, config).build()
    lengths = numpy.random.default_rng(seed=0).integers(low=1, high=4096, size=100000, dtype=numpy.int32)

    def mock_sequence(i, length):
        return numpy.int64(numpy.concatenate([(numpy.arange(length - 1) + 1) % 1000, [999]]))

    for si, indices in enumerate(ref.split_indices("1,1,1", len(lengths))):
        cfg = dict(seq_length=64, seed=1234, drop_last_valid=1, eod_mask_loss=1, reset_position_ids=1, extra=1,
                   eod=999, pad=-1)
        mine = ref.RefGPTDataset(lengths, ref.slicer(mock_sequence, lengths), indices, sizes[si], si, cfg)
        same(real[si].indices, indices, "mock split %d indices" % si)
        check_indices(real[si], mine, "mock split %d" % si)
        check_samples(real[si], mine, list(range(8)) + [12345, len(mine) - 1], "mock split %d" % si)
        print("mock split %d: equal (%d samples)" % (si, len(mine)))


class SyntheticLowLevel:
    def __init__(self, sizes):
        self.sequence_lengths = sizes
        self.path_prefix = None
        self._get = ref.slicer(ref.synthetic_sequence, sizes)

    def get(self, i, offset=0, length=None):
        return self._get(i, offset, length)


class SyntheticTokenizer:
    vocab_size = 51
    eod = ref.SYNTH_EOD
    pad = -1
    unique_identifiers = {"class": "synthetic"}


def check_synthetic():
    small = numpy.array([5, 17, 3, 40, 1, 9, 26], dtype=numpy.int32)
    large = numpy.random.RandomState(7).randint(1, 300, size=200).astype(numpy.int32)
    # sizes, split, split index, num_samples, seq, seed, drop_last_valid, eod_mask, reset_pos, extra
    cases = [(small, "4,2,1", 0, 40, 8, 1234, 1, 0, 0, 1), (small, "4,2,1", 0, 26, 8, 1234, 1, 1, 1, 1),
             (small, "1", 0, None, 6, 5, 1, 1, 1, 1), (small, "4,2,1", 1, None, 4, 3, 0, 1, 0, 1),
             (small, "4,2,1", 1, 9, 4, 3, 0, 0, 1, 1), (small, "4,2,1", 2, 12, 5, 8, 1, 1, 1, 0),
             (large, "969,30,1", 0, 2500, 32, 1234, 1, 1, 1, 1), (large, "969,30,1", 0, 1300, 32, 42, 1, 0, 1, 1),
             (large, "90,8,2", 1, 100, 16, 1234, 0, 1, 0, 1), (large, "969,30,1", 0, 1577, 32, 1234, 1, 0, 0, 1),
             (large, "969,30,1", 0, 1578, 32, 1234, 1, 0, 0, 1)]
    for sizes, split, si, num_samples, seq, seed, dlv, eml, rpi, extra in cases:
        config = GPTDatasetConfig(random_seed=seed, sequence_length=seq, blend=(["unused"], None), split=split,
                                  tokenizer=SyntheticTokenizer(), reset_position_ids=bool(rpi),
                                  reset_attention_mask=False, eod_mask_loss=bool(eml),
                                  drop_last_partial_validation_sequence=bool(dlv),
                                  add_extra_token_to_sequence=bool(extra), path_to_cache=None, mmap_bin_files=False)
        config.mock = True  # no on-disk index cache
        indices = ref.split_indices(split, len(sizes))[si]
        real = GPTDataset(SyntheticLowLevel(sizes), None, indices, num_samples, Split(si), config)
        cfg = dict(seq_length=seq, seed=seed, drop_last_valid=dlv, eod_mask_loss=eml, reset_position_ids=rpi,
                   extra=extra, eod=ref.SYNTH_EOD, pad=-1)
        mine = ref.RefGPTDataset(sizes, ref.slicer(ref.synthetic_sequence, sizes), indices, num_samples, si, cfg)
        what = "synthetic %s/%d/%s" % (split, si, num_samples)
        check_indices(real, mine, what)
        check_samples(real, mine, range(len(mine)), what)
        print("%s: equal (%d samples)" % (what, len(mine)))


def check_splits():
    for split in ["969,30,1", "969, 30, 1", "1,1,1", "98,2", "0.5 0.25 0.25", "1", "3,0,1", "2.5,2.5", "1,1",
                  "1,3"]:
        real = convert_split_vector_to_split_matrix(parse_and_normalize_split(split))
        mine = ref.convert_split_vector_to_split_matrix(ref.parse_and_normalize_split(split))
        assert real == mine, split
    print("split strings: equal")


if __name__ == "__main__":
    check_mock()
    check_synthetic()
    check_splits()
