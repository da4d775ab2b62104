// Drives `sluice serve` with the official `openai` npm package: 20 sampled chat completions with
// response_format json_schema (seeds 11..30, temperatures 0.6..1.5, every fourth streamed).
// Prints [{"content": text, "finish": ...}, ...] as JSON on stdout.
// Used by tests/test_serve_openai.cpp.
// usage: node tests/openai_json_schema_client.cjs PORT MODEL SCHEMA_JSON   (NODE_PATH finds openai)
const OpenAI = require('openai');

async function main() {
  const [port, model, schemaJson] = process.argv.slice(2);
  const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'none', maxRetries: 0, timeout: 120000 });
  const replies = [];
  for (let i = 0; i < 20; ++i) {
    const req = {
      model,
      messages: [{ role: 'user', content: 'Describe a city as JSON.' }],
      max_tokens: 300,
      temperature: 0.6 + 0.05 * i,
      seed: 11 + i,
      response_format: { type: 'json_schema', json_schema: { name: 'city', schema: JSON.parse(schemaJson), strict: true } },
    };
    if (i % 4 === 3) {
      let content = '';
      let finish = null;
      for await (const chunk of await client.chat.completions.create({ ...req, stream: true })) {
        const ch = chunk.choices[0];
        if (!ch) continue;
        if (ch.delta && ch.delta.content) content += ch.delta.content;
        if (ch.finish_reason) finish = ch.finish_reason;
      }
      replies.push({ content, finish, stream: true });
    } else {
      const res = await client.chat.completions.create(req);
      replies.push({ content: res.choices[0].message.content, finish: res.choices[0].finish_reason, stream: false });
    }
  }
  process.stdout.write(JSON.stringify(replies));
}

main().catch((e) => { console.error(String(e && e.stack || e)); process.exit(1); });
