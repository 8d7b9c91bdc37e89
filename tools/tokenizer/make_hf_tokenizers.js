#!/usr/bin/env node
// Writes Hugging Face tokenizer directories (tokenizer.json + tokenizer_config.json) for the
// HuggingFaceTokenizer tests from real vocabularies shipped by npm packages:
//   llama3/   Llama 3's 128K byte-level BPE (llama3-tokenizer-js): Split regex + ByteLevel,
//             ignore_merges, <|begin_of_text|> added by the post-processor
//   mistral/  Mistral 7B's 32K SentencePiece-style BPE with byte fallback (mistral-tokenizer-js):
//             Prepend/Replace normalizer, no pre-tokenizer, <s> added by the post-processor
//   qwen2/    the Llama 3 vocabulary under Qwen2's pipeline (the NFC normalizer, single digits, no
//             BOS), to exercise that normalizer and split pattern
// The layout of each file is Hugging Face's tokenizers serialisation (version 1.0). Each
// tokenizer_config.json carries its family's chat template from tests/golden/chat_templates.json.
//   node make_hf_tokenizers.js <node_modules dir> <out dir>
'use strict';
const fs = require('fs');
const path = require('path');

const STAMP = 'hf-tokenizers 2 (chat templates, NFC for qwen2)';
const [modulesArg, outDir] = process.argv.slice(2);
const templates = JSON.parse(fs.readFileSync(path.join(__dirname, '../../tests/golden/chat_templates.json'), 'utf-8'));
const modules = modulesArg && path.resolve(modulesArg);
if (!modules || !outDir) {
  console.error('usage: make_hf_tokenizers.js <node_modules dir> <out dir>');
  process.exit(2);
}

const LLAMA3_SPLIT =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN2_SPLIT =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

function addedToken(id, content) {
  return { id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true };
}

function bpeModel(vocabById, merges, extra) {
  const vocab = {};
  vocabById.forEach((token, id) => { vocab[token] = id; });
  return Object.assign({
    type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
    fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab, merges,
  }, extra);
}

function template(bos) {
  if (!bos) return null;
  return {
    type: 'TemplateProcessing',
    single: [{ SpecialToken: { id: bos.content, type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
    pair: [{ SpecialToken: { id: bos.content, type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
           { SpecialToken: { id: bos.content, type_id: 1 } }, { Sequence: { id: 'B', type_id: 1 } }],
    special_tokens: { [bos.content]: { id: bos.content, ids: [bos.id], tokens: [bos.content] } },
  };
}

function write(name, tokenizer, config) {
  const dir = path.join(outDir, name);
  fs.mkdirSync(dir, { recursive: true });
  for (const [file, value] of [['tokenizer.json', tokenizer], ['tokenizer_config.json', config]]) {
    fs.writeFileSync(path.join(dir, file + '.tmp'), JSON.stringify(value, null, 1));
    fs.renameSync(path.join(dir, file + '.tmp'), path.join(dir, file));
  }
}

function byteLevelFile(vocabById, specialsFrom, merges, split, bos, ignoreMerges, normalizer) {
  const added = vocabById.slice(specialsFrom).map((t, i) => addedToken(specialsFrom + i, t));
  const byteLevel = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false };
  return {
    version: '1.0', truncation: null, padding: null, added_tokens: added, normalizer,
    pre_tokenizer: { type: 'Sequence', pretokenizers: [
      { type: 'Split', pattern: { Regex: split }, behavior: 'Isolated', invert: false }, byteLevel] },
    post_processor: bos ? { type: 'Sequence', processors: [byteLevel, template(bos)] } : byteLevel,
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: bpeModel(vocabById.slice(0, specialsFrom), merges, { ignore_merges: ignoreMerges }),
  };
}

async function main() {
  // Llama 3: the vocabulary (byte-level spellings), its 256 special tokens from 128000, and the
  // merges in priority order (a Map keyed "left right").
  const { llama3Tokenizer: llama3 } =
    require(path.join(modules, 'llama3-tokenizer-js/bundle/commonjs-llama3-tokenizer-with-baked-data.cjs'));
  const llamaMerges = [...llama3.merges.keys()];
  const bos = { id: 128000, content: '<|begin_of_text|>' };
  write('llama3', byteLevelFile(llama3.vocabById, 128000, llamaMerges, LLAMA3_SPLIT, bos, true, null),
        { bos_token: '<|begin_of_text|>', eos_token: '<|end_of_text|>', tokenizer_class: 'PreTrainedTokenizerFast',
          chat_template: templates.llama3 });
  write('qwen2', byteLevelFile(llama3.vocabById, 128000, llamaMerges, QWEN2_SPLIT, null, false, { type: 'NFC' }),
        { bos_token: null, eos_token: '<|end_of_text|>', pad_token: '<|finetune_right_pad_id|>',
          tokenizer_class: 'Qwen2Tokenizer', chat_template: templates.chatml });

  // Mistral 7B: <unk>, <s>, </s>, the 256 byte tokens <0x00>..<0xFF>, then pieces spelled with ▁.
  const mistral = (await import(path.join(modules, 'mistral-tokenizer-js/mistral-tokenizer.js'))).default;
  const mistralMerges = [...mistral.merges.keys()];
  const sBos = { id: 1, content: '<s>' };
  write('mistral', {
    version: '1.0', truncation: null, padding: null,
    added_tokens: [addedToken(0, '<unk>'), addedToken(1, '<s>'), addedToken(2, '</s>')],
    normalizer: { type: 'Sequence', normalizers: [
      { type: 'Prepend', prepend: '\u2581' }, { type: 'Replace', pattern: { String: ' ' }, content: '\u2581' }] },
    pre_tokenizer: null,
    post_processor: template(sBos),
    decoder: { type: 'Sequence', decoders: [
      { type: 'Replace', pattern: { String: '\u2581' }, content: ' ' }, { type: 'ByteFallback' }, { type: 'Fuse' },
      { type: 'Strip', content: ' ', start: 1, stop: 0 }] },
    model: bpeModel(mistral.vocabById, mistralMerges, { unk_token: '<unk>', fuse_unk: true, byte_fallback: true }),
  }, { bos_token: '<s>', eos_token: '</s>', unk_token: '<unk>', tokenizer_class: 'LlamaTokenizer',
       chat_template: templates.mistral });
}

main().then(() => {
  // Last: install-deps greps it to tell this version's files from an older run's.
  fs.writeFileSync(path.join(outDir, 'STAMP'), STAMP + '\n');
}).catch((e) => { console.error(e); process.exit(1); });
