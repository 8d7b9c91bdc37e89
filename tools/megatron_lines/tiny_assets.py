"""Small tokenizer files and a small dataset, written with the standard library, for run.py.

Every tokenizer here has more than 256 ids and every dataset token is below 250, so the same
dataset suits all of them.
- GPT-2 byte-level BPE: vocab.json (the 256 byte symbols, 3 merges, <|endoftext|>) and merges.txt.
- SentencePiece: a unigram ModelProto (<unk> <s> </s>, the printable ASCII characters, and filler
  pieces up to 320), encoded by hand (protobuf wire format).
- Hugging Face: a directory with a byte-level BPE tokenizer.json (the GPT-2 vocabulary above) and
  tokenizer_config.json.
- Dataset: Megatron's MMIDIDX .bin/.idx pair (docs/formats.md), uint16 tokens, seeded.
"""

import json
import os
import random
import struct

GPT2_MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he")]
EOD_TEXT = "<|endoftext|>"
DATA_TOKEN_LIMIT = 250  # dataset tokens are in [0, DATA_TOKEN_LIMIT)


def _byte_symbols():
    """GPT-2's printable stand-in for each byte value, in the order GPT-2 numbers them."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    order, symbols, extra = list(printable), [chr(b) for b in printable], 0
    for b in range(256):
        if b not in printable:
            order.append(b)
            symbols.append(chr(256 + extra))
            extra += 1
    return symbols


def gpt2_vocab():
    vocab = {s: i for i, s in enumerate(_byte_symbols())}
    for a, b in GPT2_MERGES:
        vocab[a + b] = len(vocab)
    vocab[EOD_TEXT] = len(vocab)
    return vocab


def write_gpt2(directory):
    os.makedirs(directory, exist_ok=True)
    vocab_path, merges_path = os.path.join(directory, "vocab.json"), os.path.join(directory, "merges.txt")
    with open(vocab_path, "w", encoding="utf-8") as f:
        json.dump(gpt2_vocab(), f, ensure_ascii=False)
    with open(merges_path, "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in GPT2_MERGES))
    return vocab_path, merges_path


def write_hf(directory):
    os.makedirs(directory, exist_ok=True)
    vocab = gpt2_vocab()
    eod = vocab[EOD_TEXT]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": eod, "content": EOD_TEXT, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None, "pre_tokenizer": byte_level, "post_processor": byte_level, "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "vocab": {k: v for k, v in vocab.items() if k != EOD_TEXT},
                  "merges": [f"{a} {b}" for a, b in GPT2_MERGES]},
    }
    with open(os.path.join(directory, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer, f, ensure_ascii=False)
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": EOD_TEXT, "eos_token": EOD_TEXT,
                   "model_max_length": 1 << 20}, f)
    return directory


# --- protobuf wire format (sentencepiece_model.proto) -------------------------------------------

def _varint(n):
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field_varint(num, value):
    return _varint(num << 3 | 0) + _varint(value)


def _field_bytes(num, data):
    return _varint(num << 3 | 2) + _varint(len(data)) + data


def _field_float(num, value):
    return _varint(num << 3 | 5) + struct.pack("<f", value)


SP_NORMAL, SP_UNKNOWN, SP_CONTROL = 1, 2, 3
SP_VOCAB = 320


def sentencepiece_pieces():
    pieces = [("<unk>", 0.0, SP_UNKNOWN), ("<s>", 0.0, SP_CONTROL), ("</s>", 0.0, SP_CONTROL),
              ("\u2581", -1.0, SP_NORMAL)]
    pieces += [(chr(c), -2.0 - k * 0.01, SP_NORMAL) for k, c in enumerate(range(33, 127))]
    pieces += [("\u2581" + chr(c), -1.5 - k * 0.01, SP_NORMAL) for k, c in enumerate(range(ord("a"), ord("z") + 1))]
    k = 0
    while len(pieces) < SP_VOCAB:
        pieces.append((f"\u2581w{k}", -5.0 - k * 0.01, SP_NORMAL))
        k += 1
    return pieces


def write_sentencepiece(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    proto = bytearray()
    for piece, score, kind in sentencepiece_pieces():
        body = _field_bytes(1, piece.encode("utf-8")) + _field_float(2, score) + _field_varint(3, kind)
        proto += _field_bytes(1, body)
    trainer = (_field_varint(3, 1)            # model_type: UNIGRAM
               + _field_varint(4, SP_VOCAB)   # vocab_size
               + _field_varint(40, 0)         # unk_id
               + _field_varint(41, 1)         # bos_id
               + _field_varint(42, 2)         # eos_id
               + _field_varint(43, -1))       # pad_id: none
    proto += _field_bytes(2, trainer)
    normalizer = (_field_bytes(1, b"identity") + _field_varint(3, 1)   # add_dummy_prefix
                  + _field_varint(4, 1) + _field_varint(5, 1))         # remove_extra_whitespaces, escape_whitespaces
    proto += _field_bytes(3, normalizer)
    with open(path, "wb") as f:
        f.write(bytes(proto))
    return path


# --- Megatron .bin/.idx ---------------------------------------------------------------------------

def write_dataset(prefix, documents=30000, seed=1234):
    """documents of 4..36 tokens in [0, DATA_TOKEN_LIMIT); one sequence per document."""
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    rng = random.Random(seed)
    lengths, tokens = [], bytearray()
    for _ in range(documents):
        n = rng.randint(4, 36)
        lengths.append(n)
        tokens += struct.pack(f"<{n}H", *(rng.randrange(DATA_TOKEN_LIMIT) for _ in range(n)))
    with open(prefix + ".bin", "wb") as f:
        f.write(tokens)
    pointers, offset = [], 0
    for n in lengths:
        pointers.append(offset)
        offset += 2 * n
    idx = bytearray(b"MMIDIDX\x00\x00")
    idx += struct.pack("<Q", 1) + struct.pack("<B", 8)        # version 1, dtype code 8 (uint16)
    idx += struct.pack("<Q", len(lengths)) + struct.pack("<Q", len(lengths) + 1)
    idx += struct.pack(f"<{len(lengths)}i", *lengths)
    idx += struct.pack(f"<{len(pointers)}q", *pointers)
    idx += struct.pack(f"<{len(lengths) + 1}q", *range(len(lengths) + 1))
    with open(prefix + ".idx", "wb") as f:
        f.write(bytes(idx))
    return prefix


def write_all(directory):
    """Every asset under directory; returns their paths by role."""
    vocab, merges = write_gpt2(os.path.join(directory, "gpt2"))
    return {
        "vocab_file": vocab, "merge_file": merges,
        "sentencepiece": write_sentencepiece(os.path.join(directory, "sentencepiece", "tokenizer.model")),
        "hf_dir": write_hf(os.path.join(directory, "hf")),
        "data_prefix": write_dataset(os.path.join(directory, "data", "tiny_text_document")),
    }
