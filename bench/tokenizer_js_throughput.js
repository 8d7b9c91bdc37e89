#!/usr/bin/env node
// The JavaScript side of the tokenizer throughput comparison (docs/performance.md): encodes a text
// file, one document per line, with tokenizers.js reading <tokenizer dir>'s tokenizer.json and
// with the npm package that ships the vocabulary (llama3-tokenizer-js or mistral-tokenizer-js), or
// (`tiktoken`, <tokenizer dir> then a Megatron .json vocabulary) with js-tiktoken laid out as
// Megatron's TikTokenizer defaults (v2 pattern, 1000 special tokens, 131072 ids); one thread; prints
// the median MB/s of [runs] runs for each, as build/bench/tokenizer_throughput does for megatron.cpp.
//   node bench/tokenizer_js_throughput.js <node_modules dir> <tokenizer dir> <llama3|mistral|tiktoken> <corpus> [runs]
'use strict';
const fs = require('fs');
const path = require('path');

const [modulesArg, dir, pkg, input, runsArg] = process.argv.slice(2);
const modules = modulesArg && path.resolve(modulesArg);
if (!input) {
  console.error('usage: tokenizer_js_throughput.js <node_modules dir> <tokenizer dir> <llama3|mistral> <corpus> [runs]');
  process.exit(2);
}
const runs = Number(runsArg || 3);

async function main() {
  const text = fs.readFileSync(input, 'utf-8');
  const lines = text.split(/(?<=\n)/);
  const mb = Buffer.byteLength(text, 'utf-8') / 1e6;
  const { Tokenizer } = require(path.join(modules, '@huggingface/tokenizers/dist/tokenizers.cjs'));
  const read = (f) => JSON.parse(fs.readFileSync(path.join(dir, f), 'utf-8'));
  const encoders = {};
  if (pkg !== 'tiktoken') {
    encoders['tokenizers.js'] = () => {
      const tok = new Tokenizer(read('tokenizer.json'), read('tokenizer_config.json'));
      return (t) => tok.encode(t).ids.length;
    };
  }
  if (pkg === 'tiktoken') {
    const { Tiktoken } = require(path.join(modules, 'js-tiktoken/dist/lite.cjs'));
    const v2 = '[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|' +
      '[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|' +
      '\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+';
    const tokens = JSON.parse(fs.readFileSync(dir, 'utf-8')).slice(0, 131072 - 1000).map((e) => e.token_bytes);
    const specials = {};
    ['<unk>', '<s>', '</s>', '<mask>', '<pad>', '<cls>', '<sep>'].forEach((s, i) => { specials[s] = i; });
    for (let i = 7; i < 1000; ++i) specials[`<SPECIAL_${i}>`] = i;
    encoders['js-tiktoken'] = () => {
      const enc = new Tiktoken({ pat_str: v2, special_tokens: specials, bpe_ranks: `! 1000 ${tokens.join(' ')}` });
      return (t) => enc.encode(t, 'all').length;
    };
  } else if (pkg === 'llama3') {
    const { llama3Tokenizer } =
      require(path.join(modules, 'llama3-tokenizer-js/bundle/commonjs-llama3-tokenizer-with-baked-data.cjs'));
    encoders['llama3-tokenizer-js'] = () => (t) => llama3Tokenizer.encode(t, { bos: true, eos: false }).length;
  } else {
    const mistral = (await import(path.join(modules, 'mistral-tokenizer-js/mistral-tokenizer.js'))).default;
    encoders['mistral-tokenizer-js'] = () => (t) => mistral.encode(t, true, true).length;
  }
  console.log(`input ${input}: ${mb.toFixed(1)} MB, ${lines.length} lines`);
  for (const [name, make] of Object.entries(encoders)) {
    const rates = [];
    let tokens = 0;
    for (let r = 0; r < runs; ++r) {
      const encode = make();
      const t0 = process.hrtime.bigint();
      tokens = 0;
      for (const line of lines) tokens += encode(line);
      rates.push(mb / (Number(process.hrtime.bigint() - t0) / 1e9));
    }
    rates.sort((a, b) => a - b);
    console.log(`${name}: median ${rates[Math.floor(rates.length / 2)].toFixed(2)} MB/s, ${tokens} tokens`);
  }
}
main().catch((e) => { console.error(e); process.exit(1); });
