#!/usr/bin/env node
// The reference side of tests/unit/test_tokenizer_tiktoken.cpp: js-tiktoken's encoder, given the
// same vocabulary file laid out as Megatron's TikTokenizer lays it out (special tokens at ids
// 0..N-1, rank r at id r + N, cut to vocab_size - N), encodes texts with special tokens allowed.
//   node tiktoken_reference.js <node_modules dir> <vocab file> <v1|v2|o200k|cl100k> <N> <vocab size>
//                              <special tokens JSON list> <in.json> <out.json>
// Patterns: Megatron's v1 written without its possessive quantifiers (JavaScript has none; they
// change nothing there: what they keep could never be given back to a match), Megatron's v2, and
// the o200k / cl100k patterns js-tiktoken ships. out.json: {"ids": [[...]], "texts": [decoded]}.
'use strict';
const fs = require('fs');
const path = require('path');

const [modulesArg, vocab, pattern, n, size, specialsJson, input, output] = process.argv.slice(2);
if (!output) {
  console.error('usage: tiktoken_reference.js <node_modules> <vocab> <v1|v2|o200k|cl100k> <N> <vocab size> <specials> <in> <out>');
  process.exit(2);
}
const modules = path.resolve(modulesArg);
const { Tiktoken } = require(path.join(modules, 'js-tiktoken/dist/lite.cjs'));
const ranksOf = (name) => { const r = require(path.join(modules, `js-tiktoken/dist/ranks/${name}.cjs`)); return r.default || r; };
const patterns = {
  v1: '[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+',
  v2: '[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+',
  o200k: ranksOf('o200k_base').pat_str,
  cl100k: ranksOf('cl100k_base').pat_str,
};
const N = Number(n);
const inner = Number(size) - N;

// Tokens (base64) by rank, from either file form.
const text = fs.readFileSync(vocab, 'utf-8');
let tokens = [];
if (vocab.endsWith('.json')) {
  tokens = JSON.parse(text).map((e) => e.token_bytes);
} else {
  for (const line of text.split('\n').filter(Boolean)) {
    const [t, r] = line.split(' ');
    tokens[Number(r)] = t;
  }
}
tokens = tokens.slice(0, inner);
const specials = {};
JSON.parse(specialsJson).forEach((s, i) => { specials[s] = i; });
for (let i = Object.keys(specials).length; i < N; ++i) specials[`<SPECIAL_${i}>`] = i;
const enc = new Tiktoken({ pat_str: patterns[pattern], special_tokens: specials, bpe_ranks: `! ${N} ${tokens.join(' ')}` });

const texts = JSON.parse(fs.readFileSync(input, 'utf-8'));
const ids = texts.map((t) => enc.encode(t, 'all'));
fs.writeFileSync(output + '.tmp', JSON.stringify({ ids, texts: ids.map((i) => enc.decode(i)) }));
fs.renameSync(output + '.tmp', output);
