// Deterministic test corpus: English, Korean, Chinese, Japanese, emoji (ZWJ sequences,
// skin tones, flags), code, numbers, long whitespace runs, special-token strings inside
// text, combining marks, compatibility characters and invalid UTF-8. Lines are Buffers
// (bytes), so invalid UTF-8 can be expressed.
// CLI: node corpus.js --text OUT_FILE MEGABYTES   writes valid-UTF-8 mixed text for benchmarks
'use strict';

function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const words = ('the of and to in is you that it he was for on are as with his they I at be this have from or one had by ' +
  'word but not what all were we when your can said there use an each which she do how their if will up other about out ' +
  'many then them these so some her would make like him into time has look two more write go see number no way could ' +
  'people my than first water been call who oil its now find long down day did get come made may part tokenizer ' +
  'attention latent cache inference throughput don\'t it\'s they\'re we\'ve I\'m you\'ll she\'d DON\'T IT\'S ' +
  'Hello World GPU CUDA PyTorch naïve café résumé Zürich São Paulo coöperate façade').split(' ');
const code = [
  'for (int i = 0; i < n; ++i) {\n    sum += a[i] * b[i];\n}',
  'def forward(self, x):\n\treturn self.proj(torch.relu(x)) + x  # residual',
  'const ids = await tokenizer.encode("hello", { addSpecialTokens: false });',
  'SELECT id, name FROM users WHERE created_at > \'2024-01-01\' ORDER BY id DESC;',
  '#include <vector>\nstd::vector<int32_t> v{1, 2, 3};  // braces, not parens',
  'if x != None and len(x) >= 3:\n        print(f"{x[0]!r} -> {x[-1]:>10}")',
  '<div class="row"><span id=\'x\'>&amp;&lt;&gt;</span></div>',
  '{"model": "llama", "vocab_size": 128256, "rope_theta": 500000.0, "tie": false}',
  'fn main() { let v: Vec<u8> = (0..=255).collect(); println!("{:?}", v); }',
  '$ ./build/latentserve tokenize --model DIR --text "Hi!" | jq .ids',
  '    return a ||= b && !c ?? d;    // trailing spaces   ',
  'x=1;y=2;z=x**y//3%4^5|6&7~8',
];
const specials = ['<|begin_of_text|>', '<|end_of_text|>', '<|eot_id|>', '<|start_header_id|>', '<|end_header_id|>',
  '<|reserved_special_token_5|>', '<|im_start|>', '<|im_end|>', '<|endoftext|>', '<think>', '</think>', '<tool_call>',
  '<｜begin▁of▁sentence｜>', '<｜end▁of▁sentence｜>', '<｜User｜>', '<｜Assistant｜>', '<|EOT|>', '<s>', '</s>', '<unk>',
  '<|im_', 'im_end|>', '<<s>>', '<s><s>', '</s >', '<|fim_prefix|>', '<｜tool▁sep｜>'];
const emoji = ['😀', '😂', '🥲', '👍', '👍🏽', '👩‍💻', '👨‍👩‍👧‍👦', '🏳️‍🌈', '🇰🇷', '🇯🇵', '🇺🇸', '❤️', '✈️', '🧑🏿‍🚀',
  '🫠', '🦀', '🐍', '1️⃣', '#️⃣', '👁️‍🗨️', '🤷‍♀️', '🧔🏻‍♂️', '💯', '🔥', '⚡', '☕', '🍣', '🀄', '🃏'];
const whitespace = [' ', '  ', '   ', '\t', '\n', '\n\n', '\r\n', ' \n ', '\u00a0', '\u3000', '\u2003', '\u200b', '\u2028',
  '\t\t\t', '                ', '\n\n\n\n', ' \t \t', '\u0085', '\u202f', '\ufeff'];
const combining = ['e\u0301', 'a\u0308', 'n\u0303', '\u1100\u1161\u11a8', 'A\u030a', '\u212b', '\ufb01', '\u2460',
  '\uff21\uff22\uff23', '\u3392', 'ｶﾀｶﾅ', '\u00bd', 'x\u0327\u0301', '\u0e01\u0e34', '\u0928\u093f', '\u1e9b\u0323'];

function make(seed) {
  const r = rng(seed);
  const int = (n) => Math.floor(r() * n);
  const pick = (arr) => arr[int(arr.length)];
  const range = (lo, hi) => String.fromCodePoint(lo + int(hi - lo + 1));
  const str = (n, lo, hi) => Array.from({ length: n }, () => range(lo, hi)).join('');
  const gens = {
    english: () => {
      const n = 3 + int(20);
      let s = Array.from({ length: n }, () => pick(words)).join(' ');
      s = s[0].toUpperCase() + s.slice(1);
      return s + pick(['.', '!', '?', '...', ' :)', ',', ';', '']);
    },
    korean: () => Array.from({ length: 1 + int(8) }, () => str(1 + int(5), 0xac00, 0xd7a3)).join(pick([' ', ', ', '. ', ' '])) +
      pick(['.', '?', ' 입니다.', '요!', '']),
    chinese: () => Array.from({ length: 1 + int(5) }, () => str(2 + int(10), 0x4e00, 0x9fa5)).join(pick(['，', '。', '、', ' ', '：'])) +
      pick(['。', '！', '？', '']),
    japanese: () => Array.from({ length: 1 + int(6) }, () => pick([str(2 + int(4), 0x3041, 0x3093), str(1 + int(4), 0x30a1, 0x30f6),
      str(1 + int(3), 0x4e00, 0x9fa5), 'です', 'ます', 'ー', '「', '」'])).join('') + pick(['。', '、', '！', '']),
    emoji: () => Array.from({ length: 1 + int(8) }, () => pick([pick(emoji), pick(words), ' ', pick(emoji) + pick(emoji)])).join(''),
    code: () => pick(code) + (r() < 0.3 ? '\n' + pick(code) : ''),
    numbers: () => Array.from({ length: 1 + int(6) }, () => pick([
      String(int(1e9)), (r() * 1e6).toFixed(int(5)), '3.14159', '1,234,567', '0x' + int(1e8).toString(16), '+1 (555) 123-4567',
      '2024-05-17T12:34:56Z', String(int(100)) + '%', '٣٤٥', '１２３', '①②', 'v1.2.3', '1e-9', '-0.0', 'x' + int(1000) + 'y',
      '12345678901234567890'])).join(pick([' ', ', ', '', '\n'])),
    whitespace: () => Array.from({ length: 1 + int(6) }, () => pick(whitespace) + (r() < 0.5 ? pick(words) : '')).join(''),
    specials: () => Array.from({ length: 1 + int(5) }, () => pick([pick(specials), pick(words), ' ', pick(specials) + ' ',
      ' ' + pick(specials), pick(emoji), pick(whitespace)])).join(''),
    combining: () => Array.from({ length: 1 + int(6) }, () => pick([pick(combining), pick(words), ' '])).join(''),
    scripts: () => Array.from({ length: 1 + int(6) }, () => pick([str(3 + int(6), 0x0410, 0x044f), str(3 + int(6), 0x03b1, 0x03c9),
      str(3 + int(6), 0x05d0, 0x05ea), str(3 + int(6), 0x0627, 0x064a), str(3 + int(6), 0x0e01, 0x0e2e), str(3 + int(6), 0x0905, 0x0939),
      str(2 + int(4), 0x20000, 0x2a6df), str(2, 0x1f300, 0x1f5ff), str(2, 0x2200, 0x22ff), str(2, 0xe000, 0xe0ff),
      str(2, 0x1d400, 0x1d4ff)])).join(pick([' ', '', '-'])),
    mixed: () => Array.from({ length: 2 + int(6) }, () => pick(Object.values(simple))()).join(pick([' ', '\n', '', '  ', '\t'])),
  };
  const simple = Object.assign({}, gens);
  delete simple.mixed;
  return { r, int, pick, gens };
}

function invalidUtf8(r, int, pick, text) {
  const bad = [[0x80], [0xff], [0xc3], [0xe2, 0x82], [0xf0, 0x9f, 0x98], [0xed, 0xa0, 0x80], [0xc0, 0xaf], [0xf5, 0x80],
    [0xe0, 0x80, 0x80], [0xf4, 0x90, 0x80, 0x80], [0xfe, 0xfe], [0xc3, 0x28], [0xa0, 0xa1]];
  const base = Buffer.from(text, 'utf8');
  const parts = [];
  let pos = 0;
  const k = 1 + int(3);
  for (let i = 0; i < k; ++i) {
    const cut = Math.min(base.length, pos + int(Math.max(1, base.length - pos)));
    parts.push(base.subarray(pos, cut), Buffer.from(pick(bad)));
    pos = cut;
  }
  parts.push(base.subarray(pos));
  return Buffer.concat(parts);
}

function corpusLines(count = 6000) {
  const { r, int, pick, gens } = make(20240517);
  const names = Object.keys(gens);
  const lines = [Buffer.from(''), Buffer.from(' '), Buffer.from('\n'), Buffer.from('a'), Buffer.from('  leading'),
    Buffer.from('trailing  '), Buffer.from('<s>'), Buffer.from('<|im_end|>'), Buffer.from('\u2581\u2581x')];
  while (lines.length < count) {
    const name = names[lines.length % names.length];
    let text = gens[name]();
    if (r() < 0.05) text = Array.from({ length: 20 + int(60) }, () => gens[pick(names)]()).join(pick([' ', '\n']));  // long lines
    if (r() < 0.04) lines.push(invalidUtf8(r, int, pick, text));
    else lines.push(Buffer.from(text, 'utf8'));
  }
  return lines;
}

function benchText(megabytes) {
  const { gens } = make(7);
  const names = Object.keys(gens);
  const parts = [];
  let size = 0, i = 0;
  while (size < megabytes * 1e6) {
    // English and code dominate, as in real traffic; every other kind is present.
    const name = i % 4 === 0 ? names[(i >> 2) % names.length] : (i % 4 === 1 ? 'code' : 'english');
    const s = gens[name]() + '\n';
    parts.push(s);
    size += Buffer.byteLength(s);
    ++i;
  }
  return parts.join('');
}

module.exports = { corpusLines, benchText };

if (require.main === module) {
  const [flag, out, mb] = process.argv.slice(2);
  if (flag !== '--text' || !out) throw new Error('usage: node corpus.js --text OUT_FILE MEGABYTES');
  require('fs').writeFileSync(out, benchText(Number(mb || 4)));
}
