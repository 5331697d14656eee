#!/usr/bin/env node
// Single-thread encoding throughput of Hugging Face tokenizers (npm binding) on a text file,
// in chunks of about CHUNK bytes cut at line ends (the same chunks bench_tokenizer uses).
// Run with RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false.
// Usage: node hf_throughput.js TOKENIZER_JSON TEXT_FILE CHUNK_BYTES  -> {"mb_per_s":..,"tokens":..}
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require(path.join(__dirname, '..', 'node_modules', 'tokenizers'));

// Cut on bytes, as the C++ side does, so both encode exactly the same chunks.
function chunks(buf, size) {
  const out = [];
  let start = 0;
  while (start < buf.length) {
    let end = Math.min(buf.length, start + size);
    const nl = buf.indexOf(10, end);
    end = nl < 0 ? buf.length : nl + 1;
    out.push(buf.subarray(start, end).toString('utf8'));
    start = end;
  }
  return out;
}

(async () => {
  const [file, textFile, chunk] = process.argv.slice(2);
  const tok = Tokenizer.fromFile(file);
  const buf = fs.readFileSync(textFile);
  const parts = chunks(buf, Number(chunk || 65536));
  let tokens = 0;
  for (const p of parts) await tok.encode(p, null, { addSpecialTokens: false });  // warm-up
  const t0 = process.hrtime.bigint();
  for (const p of parts) tokens += (await tok.encode(p, null, { addSpecialTokens: false })).getIds().length;
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  console.log(JSON.stringify({ mb_per_s: buf.length / 1e6 / seconds, tokens }));
})();
