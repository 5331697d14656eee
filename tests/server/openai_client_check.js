// The official OpenAI client (npm `openai`) against a running latentserve server, with
// Hugging Face's own chat-template renderer (@huggingface/jinja) and tokenizer (`tokenizers`)
// as the reference for what a chat prompt must be. Run by tests/server/openai_client_test.cpp:
//   node openai_client_check.js BASE_URL MODEL_NAME MODEL_DIR
// Prints one line per check; exits 1 with the reason at the first one that fails.
const fs = require('fs');
const path = require('path');
const assert = require('assert/strict');

const modules = path.join(__dirname, '..', 'node_modules');
const { OpenAI } = require(path.join(modules, 'openai'));
const { Tokenizer } = require(path.join(modules, 'tokenizers'));
const { Template } = require(path.join(modules, '@huggingface', 'jinja'));

const [baseUrl, model, modelDir] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `${baseUrl}/v1`, apiKey: 'not-needed', maxRetries: 0, timeout: 60000 });
const greedy = { temperature: 0, max_tokens: 12, ignore_eos: true };  // ignore_eos: vLLM's extension, passed through
const messages = [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: 'Name three colours.' },
];

async function check(name, fn) {
  try {
    await fn();
    console.log(`ok   ${name}`);
  } catch (e) {
    console.log(`FAIL ${name}: ${e.stack || e}`);
    process.exit(1);
  }
}

async function main() {
  await check('models.list names the served model', async () => {
    const ids = [];
    for await (const m of client.models.list()) ids.push(m.id);
    assert.deepEqual(ids, [model]);
  });

  let chatText;
  let chatUsage;
  await check('chat.completions.create (non-streaming)', async () => {
    const r = await client.chat.completions.create({ model, messages, ...greedy });
    assert.equal(r.object, 'chat.completion');
    assert.equal(r.choices.length, 1);
    assert.equal(r.choices[0].message.role, 'assistant');
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.equal(r.usage.completion_tokens, 12);
    chatText = r.choices[0].message.content;
    chatUsage = r.usage;
  });

  await check('chat.completions.create (streaming) adds up to the same reply', async () => {
    const stream = await client.chat.completions.create({ model, messages, ...greedy, stream: true, stream_options: { include_usage: true } });
    let text = '';
    let finish = null;
    let usage = null;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) {
        text += c.delta.content || '';
        if (c.finish_reason) finish = c.finish_reason;
      }
    }
    assert.equal(text, chatText);
    assert.equal(finish, 'length');
    assert.equal(usage.prompt_tokens, chatUsage.prompt_tokens);
    assert.equal(usage.completion_tokens, 12);
  });

  await check('the chat prompt is the template rendered by @huggingface/jinja, tokenized by HF tokenizers', async () => {
    const config = JSON.parse(fs.readFileSync(path.join(modelDir, 'tokenizer_config.json'), 'utf8'));
    const rendered = new Template(config.chat_template).render({
      messages, add_generation_prompt: true, bos_token: config.bos_token || '', eos_token: config.eos_token || '',
    });
    const tok = Tokenizer.fromFile(path.join(modelDir, 'tokenizer.json'));
    const [encoding] = await tok.encodeBatch([rendered], { addSpecialTokens: false });
    const ids = Array.from(encoding.getIds());
    assert.equal(chatUsage.prompt_tokens, ids.length);
    const r = await client.completions.create({ model, prompt: ids, ...greedy });
    assert.equal(r.choices[0].text, chatText);
  });

  await check('completions.create (streaming) equals non-streaming', async () => {
    const whole = await client.completions.create({ model, prompt: 'Once upon a time', ...greedy });
    const stream = await client.completions.create({ model, prompt: 'Once upon a time', ...greedy, stream: true });
    let text = '';
    for await (const chunk of stream) for (const c of chunk.choices) text += c.text;
    assert.equal(text, whole.choices[0].text);
    assert.equal(whole.usage.prompt_tokens, Buffer.byteLength('Once upon a time'));  // byte-level: one id per byte
  });

  await check('chat logprobs: one entry per token, top_logprobs sorted', async () => {
    const r = await client.chat.completions.create({ model, messages, ...greedy, max_tokens: 5, logprobs: true, top_logprobs: 3 });
    const content = r.choices[0].logprobs.content;
    assert.equal(content.length, 5);
    for (const t of content) {
      assert.equal(t.top_logprobs.length, 3);
      assert.ok(t.logprob <= 0);
      assert.equal(t.logprob, t.top_logprobs[0].logprob);  // greedy: the chosen token is the best
      assert.ok(t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob);
    }
  });

  await check('n = 2 with a seed gives two reproducible choices', async () => {
    const req = { model, messages, temperature: 1, max_tokens: 8, n: 2, seed: 5, ignore_eos: true };
    const a = await client.chat.completions.create(req);
    const b = await client.chat.completions.create(req);
    assert.deepEqual(a.choices.map((c) => c.index), [0, 1]);
    assert.deepEqual(a.choices.map((c) => c.message.content), b.choices.map((c) => c.message.content));
  });

  await check('a bad parameter is a BadRequestError naming it', async () => {
    await assert.rejects(client.completions.create({ model, prompt: 'x', temperature: 3 }), (e) => {
      assert.ok(e instanceof OpenAI.BadRequestError, `got ${e.constructor.name}`);
      assert.equal(e.status, 400);
      assert.equal(e.param, 'temperature');
      assert.match(e.message, /temperature/);
      return true;
    });
  });

  await check('an unknown model is a NotFoundError', async () => {
    await assert.rejects(client.chat.completions.create({ model: 'gpt-nope', messages }), (e) => {
      assert.ok(e instanceof OpenAI.NotFoundError, `got ${e.constructor.name}`);
      assert.equal(e.param, 'model');
      return true;
    });
  });
}

main().then(() => console.log('all checks passed'));
