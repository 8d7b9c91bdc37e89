#!/usr/bin/env node
// Writes tiktoken vocabularies for the TikTokenizer tests from the ranks js-tiktoken ships:
//   cl100k_base.tiktoken, o200k_base.tiktoken   OpenAI's form: "base64 rank" per line
//   o200k_megatron.json                         Megatron's form: [{rank, token_bytes, token_str}],
//                                               the 256 bytes first in byte order (as Megatron
//                                               requires), then o200k's other tokens in rank order
//   node make_tiktoken_files.js <node_modules dir> <out dir>
'use strict';
const fs = require('fs');
const path = require('path');

const [modulesArg, outDir] = process.argv.slice(2);
if (!modulesArg || !outDir) {
  console.error('usage: make_tiktoken_files.js <node_modules dir> <out dir>');
  process.exit(2);
}
const modules = path.resolve(modulesArg);

// js-tiktoken's compressed ranks: lines "! offset tok tok ...", tokens base64, ranks consecutive.
function ranksOf(name) {
  const ranks = require(path.join(modules, `js-tiktoken/dist/ranks/${name}.cjs`));
  const table = (ranks.default || ranks).bpe_ranks;
  const tokens = [];
  for (const line of table.split('\n').filter(Boolean)) {
    const [, offset, ...list] = line.split(' ');
    list.forEach((t, i) => { tokens[Number(offset) + i] = t; });
  }
  return tokens;  // base64 by rank
}

function write(file, text) {
  fs.mkdirSync(outDir, { recursive: true });
  fs.writeFileSync(path.join(outDir, file + '.tmp'), text);
  fs.renameSync(path.join(outDir, file + '.tmp'), path.join(outDir, file));
}

for (const name of ['cl100k_base', 'o200k_base']) {
  write(`${name}.tiktoken`, ranksOf(name).map((t, r) => `${t} ${r}\n`).join(''));
}
const o200k = ranksOf('o200k_base');
const bytes = [...Array(256).keys()].map((b) => Buffer.from([b]).toString('base64'));
const single = new Set(bytes);
const ordered = bytes.concat(o200k.filter((t) => !single.has(t)));
const list = ordered.map((t, rank) => ({
  rank, token_bytes: t, token_str: Buffer.from(t, 'base64').toString('utf-8'),
}));
write('o200k_megatron.json', JSON.stringify(list));
