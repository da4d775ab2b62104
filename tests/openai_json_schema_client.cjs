// Drives `sluice serve` with the official `openai` npm package: one chat completion with
// response_format json_schema, sampled. Prints {"content": text, "finish": ...} as JSON on stdout.
// Used by tests/test_serve_openai.cpp.
// usage: node tests/openai_json_schema_client.cjs PORT MODEL SCHEMA_JSON   (NODE_PATH finds openai)
const OpenAI = require('openai');

async function main() {
  const [port, model, schemaJson] = process.argv.slice(2);
  const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'none', maxRetries: 0, timeout: 120000 });
  const res = await client.chat.completions.create({
    model,
    messages: [{ role: 'user', content: 'Describe a city as JSON.' }],
    max_tokens: 300,
    temperature: 1.0,
    seed: 11,
    response_format: { type: 'json_schema', json_schema: { name: 'city', schema: JSON.parse(schemaJson), strict: true } },
  });
  process.stdout.write(JSON.stringify({ content: res.choices[0].message.content, finish: res.choices[0].finish_reason }));
}

main().catch((e) => { console.error(String(e && e.stack || e)); process.exit(1); });
