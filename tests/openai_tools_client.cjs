// Drives one tool-call round trip through `sluice serve` with the official `openai` npm package:
// a chat with `tools` (not streamed, then streamed with stream_options.include_usage and
// logprobs), the calls assembled from the stream's deltas as a client does, then the next turn
// with each call's result as a role "tool" message. Prints {"plain": message, "plain_finish",
// "streamed_calls", "stream_finish", "usage", "logprobs", "next_finish"} as JSON on stdout.
// Used by tests/test_serve_openai.cpp.
// usage: node tests/openai_tools_client.cjs PORT MODEL   (NODE_PATH finds openai)
const OpenAI = require('openai');

const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];

async function main() {
  const [port, model] = process.argv.slice(2);
  const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'none', maxRetries: 0, timeout: 120000 });
  const messages = [{ role: 'user', content: 'Weather in Paris?' }];
  const req = { model, messages, tools, max_tokens: 400, temperature: 0 };
  const plain = await client.chat.completions.create(req);
  const calls = [];
  let streamFinish = null;
  let usage = null;
  let logprobs = 0;
  const stream = await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true },
    logprobs: true, top_logprobs: 2 });
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    const choice = chunk.choices[0];
    if (!choice) continue;
    if (choice.logprobs && choice.logprobs.content) logprobs += choice.logprobs.content.length;
    for (const d of (choice.delta && choice.delta.tool_calls) || []) {
      if (!calls[d.index]) calls[d.index] = { id: d.id, type: 'function', function: { name: '', arguments: '' } };
      if (d.function && d.function.name) calls[d.index].function.name += d.function.name;
      if (d.function && d.function.arguments) calls[d.index].function.arguments += d.function.arguments;
    }
    if (choice.finish_reason) streamFinish = choice.finish_reason;
  }
  const msg = plain.choices[0].message;
  const turn = [...messages, msg, ...msg.tool_calls.map((c) => ({ role: 'tool', tool_call_id: c.id, content: '18 C, sunny' }))];
  const next = await client.chat.completions.create({ model, messages: turn, tools, max_tokens: 4, temperature: 0 });
  process.stdout.write(JSON.stringify({
    plain: msg, plain_finish: plain.choices[0].finish_reason, streamed_calls: calls, stream_finish: streamFinish,
    usage, logprobs, next_finish: next.choices[0].finish_reason,
  }));
}

main().catch((e) => { console.error(String(e && e.stack || e)); process.exit(1); });
