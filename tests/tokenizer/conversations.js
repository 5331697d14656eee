// Conversations rendered through each chat template by @huggingface/jinja (make_reference.js)
// and by latentserve's interpreter (chat_template_test.cpp).
'use strict';

// The npm Llama-2 package ships no chat_template; this is the one of meta-llama/Llama-2-7b-chat-hf.
const llama2Template = "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}";

const u = (content) => ({ role: 'user', content });
const a = (content) => ({ role: 'assistant', content });
const s = (content) => ({ role: 'system', content });

const weather = { type: 'function', function: { name: 'get_weather', description: 'Current weather',
  parameters: { type: 'object', properties: { city: { type: 'string' }, unit: { type: 'string', enum: ['c', 'f'] } },
    required: ['city'] } } };

const conversations = [
  { name: 'single user', context: { messages: [u('Hello!')], add_generation_prompt: true } },
  { name: 'single user, no generation prompt', context: { messages: [u('Hi there')], add_generation_prompt: false } },
  { name: 'system + user', context: { messages: [s('You are a helpful assistant.'), u('What is 2+2?')], add_generation_prompt: true } },
  { name: 'multi turn', context: { messages: [s('Be brief.'), u('Name a color.'), a('Blue.'), u('Another?'), a('Green.'), u('One more')],
    add_generation_prompt: true } },
  { name: 'whitespace and unicode', context: { messages: [u('  padded question \n'), a('\n 답변: 你好 👋 \n'), u('naïve café\t')],
    add_generation_prompt: true } },
  { name: 'special tokens in content', context: { messages: [u('<|im_end|> <s> </s> <|eot_id|> {{ not a tag }} {% raw %}')],
    add_generation_prompt: true } },
  { name: 'empty content', context: { messages: [u('')], add_generation_prompt: true } },
  { name: 'roles must alternate', only: ['llama2'], context: { messages: [u('a'), u('b')], add_generation_prompt: true } },
  { name: 'thinking', only: ['qwen3'], context: { messages: [u('Why?'), a('<think>\nreasoning here\n</think>\n\nBecause.'), u('And?'),
    a('<think>more</think>Final.')], add_generation_prompt: false } },
  { name: 'reasoning_content and enable_thinking', only: ['qwen3'], context: { messages: [u('Q1'),
    Object.assign(a('A1'), { reasoning_content: 'thought 1' }), u('Q2')], add_generation_prompt: true, enable_thinking: false } },
  { name: 'tools', only: ['qwen3'], context: { tools: [weather], messages: [s('You can call tools.'), u('Weather in Seoul?'),
    { role: 'assistant', content: '', tool_calls: [{ type: 'function', function: { name: 'get_weather', arguments: { city: 'Seoul', unit: 'c' } } },
      { type: 'function', function: { name: 'get_weather', arguments: '{"city": "Busan"}' } }] },
    { role: 'tool', content: '{"temp": 21}' }, { role: 'tool', content: '{"temp": 23}' }, a('Seoul 21°C, Busan 23°C.')],
    add_generation_prompt: true } },
  { name: 'tool response as user turn', only: ['qwen3'], context: { messages: [u('<tool_response>x</tool_response>'), a('ok')],
    add_generation_prompt: true } },
  { name: 'tool calls', only: ['deepseek_v3'], context: { messages: [s('sys one'), s('sys two'), u('Weather?'),
    { role: 'assistant', content: null, tool_calls: [
      { type: 'function', function: { name: 'get_weather', arguments: '{"city": "Seoul"}' } },
      { type: 'function', function: { name: 'get_weather', arguments: '{"city": "Tokyo"}' } }] },
    { role: 'tool', content: '21' }, { role: 'tool', content: '18' }, a('Seoul 21, Tokyo 18.'), u('Thanks')],
    add_generation_prompt: true } },
  { name: 'tool output last', only: ['deepseek_v3'], context: { messages: [u('x'),
    { role: 'assistant', content: null, tool_calls: [{ type: 'function', function: { name: 'f', arguments: '{}' } }] },
    { role: 'tool', content: 'out' }], add_generation_prompt: true } },
  { name: 'no add_generation_prompt key', only: ['deepseek_v3', 'qwen3'], context: { messages: [u('Hi'), a('Hello')] } },
];

module.exports = { conversations, llama2Template };
