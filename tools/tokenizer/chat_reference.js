#!/usr/bin/env node
// The reference side of tests/unit/test_jinja.cpp: renders chat templates with @huggingface/jinja
// (the Jinja implementation of Hugging Face's JavaScript libraries, with its trim_blocks and
// lstrip_blocks environment).
//   node chat_reference.js <node_modules dir> <in.json> <out.json>
// in.json: [{"template": "...", "context": {...}}, ...]; out.json: [{"text": "..."} or {"error": "..."}].
'use strict';
const fs = require('fs');
const path = require('path');

const [modulesArg, input, output] = process.argv.slice(2);
if (!output) {
  console.error('usage: chat_reference.js <node_modules dir> <in.json> <out.json>');
  process.exit(2);
}
const { Template } = require(path.join(path.resolve(modulesArg), '@huggingface/jinja/dist/index.cjs'));
const cases = JSON.parse(fs.readFileSync(input, 'utf-8'));
const result = cases.map((c) => {
  try {
    return { text: new Template(c.template).render(c.context) };
  } catch (e) {
    return { error: String(e.message || e) };
  }
});
fs.writeFileSync(output + '.tmp', JSON.stringify(result));
fs.renameSync(output + '.tmp', output);
