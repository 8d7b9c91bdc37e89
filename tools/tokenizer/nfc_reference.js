#!/usr/bin/env node
// The reference side of tests/unit/test_unicode_nfc.cpp: JavaScript's own String.normalize('NFC').
//   node nfc_reference.js <in.json: ["text", ...]> <out.json>
'use strict';
const fs = require('fs');

const [input, output] = process.argv.slice(2);
if (!output) {
  console.error('usage: nfc_reference.js <in.json> <out.json>');
  process.exit(2);
}
const texts = JSON.parse(fs.readFileSync(input, 'utf-8'));
fs.writeFileSync(output + '.tmp', JSON.stringify(texts.map((t) => t.normalize('NFC'))));
fs.renameSync(output + '.tmp', output);
