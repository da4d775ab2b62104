// Drives `sluice serve` with the official `openai` npm package: one chat completion without
// streaming and one with, greedy. Prints {"plain": text, "plain_finish": ..., "streamed": text,
// "stream_finish": ...} as JSON on stdout. Used by tests/test_serve_openai.cpp.
// usage: node tests/openai_client.cjs PORT MODEL MAX_TOKENS MESSAGES_JSON   (NODE_PATH finds openai)
const OpenAI = require('openai');

async function main() {
  const [port, model, maxTokens, messagesJson] = process.argv.slice(2);
  const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'none', maxRetries: 0, timeout: 120000 });
  const messages = JSON.parse(messagesJson);
  const req = { model, messages, max_tokens: Number(maxTokens), temperature: 0 };
  const plain = await client.chat.completions.create(req);
  let streamed = '';
  let streamFinish = null;
  const stream = await client.chat.completions.create({ ...req, stream: true });
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (choice.delta && choice.delta.content) streamed += choice.delta.content;
    if (choice.finish_reason) streamFinish = choice.finish_reason;
  }
  process.stdout.write(JSON.stringify({
    plain: plain.choices[0].message.content, plain_finish: plain.choices[0].finish_reason,
    streamed, stream_finish: streamFinish, models: (await client.models.list()).data.map((m) => m.id),
  }));
}

main().catch((e) => { console.error(String(e && e.stack || e)); process.exit(1); });
