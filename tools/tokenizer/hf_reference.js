#!/usr/bin/env node
// The reference side of tests/unit/test_tokenizer_hf.cpp: encodes texts with independent JavaScript
// encoders, so megatron.cpp's HuggingFaceTokenizer is checked against more than its own reading
// of the format.
//   node hf_reference.js <node_modules dir> <encoder> <tokenizer dir> <in.json> <out.json>
// encoder: `hf` runs @huggingface/tokenizers (tokenizers.js) on <tokenizer dir>'s tokenizer.json and
// tokenizer_config.json and also decodes its ids; `llama3` runs llama3-tokenizer-js (BOS, no EOS);
// `mistral` runs mistral-tokenizer-js (BOS and the leading space). in.json: ["text", ...];
// out.json: {"ids": [[id, ...], ...], "texts": ["decoded", ...] (hf only)}.
'use strict';
const fs = require('fs');
const path = require('path');

const [modulesArg, encoder, dir, input, output] = process.argv.slice(2);
const modules = modulesArg && path.resolve(modulesArg);
if (!output) {
  console.error('usage: hf_reference.js <node_modules dir> <hf|llama3|mistral> <tokenizer dir> <in.json> <out.json>');
  process.exit(2);
}

async function makeEncoder() {
  if (encoder === 'hf') {
    const { Tokenizer } = require(path.join(modules, '@huggingface/tokenizers/dist/tokenizers.cjs'));
    const read = (f) => JSON.parse(fs.readFileSync(path.join(dir, f), 'utf-8'));
    const config = Object.assign(read('tokenizer_config.json'), { clean_up_tokenization_spaces: false });
    const tok = new Tokenizer(read('tokenizer.json'), config);
    return {
      encode: (t) => tok.encode(t).ids,
      decode: (ids) => (ids.length ? tok.decode(ids, { clean_up_tokenization_spaces: false }) : ''),
    };
  }
  if (encoder === 'llama3') {
    const { llama3Tokenizer } =
      require(path.join(modules, 'llama3-tokenizer-js/bundle/commonjs-llama3-tokenizer-with-baked-data.cjs'));
    return { encode: (t) => llama3Tokenizer.encode(t, { bos: true, eos: false }) };
  }
  if (encoder === 'mistral') {
    const mistral = (await import(path.join(modules, 'mistral-tokenizer-js/mistral-tokenizer.js'))).default;
    return { encode: (t) => mistral.encode(t, true, true) };
  }
  throw new Error('unknown encoder ' + encoder);
}

makeEncoder().then((enc) => {
  const texts = JSON.parse(fs.readFileSync(input, 'utf-8'));
  const ids = texts.map((t) => enc.encode(t));
  const result = { ids };
  if (enc.decode) result.texts = ids.map((i) => enc.decode(i));
  fs.writeFileSync(output + '.tmp', JSON.stringify(result));
  fs.renameSync(output + '.tmp', output);
}).catch((e) => { console.error(e); process.exit(1); });
