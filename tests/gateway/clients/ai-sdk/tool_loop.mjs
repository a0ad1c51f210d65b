// The Vercel AI SDK's tool loop, as a new user writes it, against the served graph: a weather tool the
// model calls, its result sent back, and the answer; over the Responses API (store on and off), Chat
// Completions and Anthropic's Messages API, streaming and not. Prints one JSON line per case.
//
//   node tool_loop.mjs BASE_URL API_KEY MODEL
import { createAnthropic } from "@ai-sdk/anthropic";
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, jsonSchema, stepCountIs, streamText, tool } from "ai";

const [baseURL, apiKey, model] = process.argv.slice(2);
const openai = createOpenAI({ baseURL, apiKey });
const anthropic = createAnthropic({ baseURL, apiKey });

const weather = tool({
  description: "Current weather for a city.",
  inputSchema: jsonSchema({
    type: "object",
    properties: { city: { type: "string" } },
    required: ["city"],
    additionalProperties: false,
  }),
  execute: async ({ city }) => `Sunny, 21 C in ${city}`,
});

const models = {
  "responses-store": [openai.responses(model), { openai: { store: true } }],
  "responses-stateless": [openai.responses(model), { openai: { store: false } }],
  chat: [openai.chat(model), {}],
  messages: [anthropic(model), {}],
};

for (const [name, [languageModel, providerOptions]] of Object.entries(models)) {
  for (const streaming of [false, true]) {
    const options = {
      model: languageModel,
      providerOptions,
      tools: { get_weather: weather },
      stopWhen: stepCountIs(3),
      maxRetries: 0,
      prompt: "Use get_weather for Paris.",
    };
    const outcome = { case: name, streaming };
    try {
      const result = streaming ? streamText(options) : await generateText(options);
      const steps = await result.steps;
      outcome.steps = steps.map((step) => ({
        calls: step.toolCalls.map((call) => call.toolName),
        results: step.toolResults.map((each) => each.output),
        finishReason: step.finishReason,
        text: step.text,
        responseId: step.response.id,
      }));
      outcome.text = await result.text;
    } catch (error) {
      outcome.error = String(error?.responseBody ?? error?.message ?? error);
    }
    console.log(JSON.stringify(outcome));
  }
}
