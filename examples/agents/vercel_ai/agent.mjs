// Vercel AI SDK: one charge per tool call, across a crash and a re-run from the saved steps.
//
// The AI SDK keeps no state between processes; the application does: it saves the run's
// messages after each finished step (onStepFinish) and, after a crash, calls generateText
// again from them. The key idem sees is the application's step id: its run id + the
// step's number within the run (steps saved before this call + the SDK's stepNumber) +
// the tool call's index within the step. A re-run of an unfinished step has the same
// step id, whatever call id the model mints this time.
//
//     node agent.mjs RUN_ID '[{"customer": "cus_1", "amount": 500}, ...]'
//
// The model is the SDK's own MockLanguageModelV3 (`ai/test`), scripted: it asks for one
// charge_card call per item with fresh call ids (SAME_CALL_ID=1: all `call_0`) and a note
// (REWORD=1: reworded, as a model asked again may do), then answers. Environment: IDEM_URL (http://127.0.0.1:8082), AGENT_STATE (the run's saved
// steps, default ./vercel-ai-RUN_ID.json), IDEM_CRASH_AFTER_CHARGE=1 (SIGKILL right after
// the first charge answered, before the step was saved).
import { readFileSync, writeFileSync, existsSync } from "node:fs";
import { randomUUID } from "node:crypto";
import { generateText, stepCountIs, tool } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { z } from "zod";

const IDEM_URL = process.env.IDEM_URL ?? "http://127.0.0.1:8082";
const [runId, chargesJson] = process.argv.slice(2);
const statePath = process.env.AGENT_STATE ?? `vercel-ai-${runId}.json`;
const saved = existsSync(statePath)
  ? JSON.parse(readFileSync(statePath, "utf8"))
  : { steps: 0, messages: [], results: [] };

// --- the helper: the application's step id for this call, as the key idem reads --------
async function idemPost(context, path, body) {
  const intent = `${context.stepId}:${context.nextCall++}`; // run, step, call's index
  const r = await fetch(IDEM_URL + path, {
    method: "POST",
    headers: { "content-type": "application/json", "x-idem-intent": intent },
    body: JSON.stringify(body),
  });
  const out = { intent, status: r.status, body: await r.json(), note: body.note,
                replayed: r.headers.get("idempotent-replayed") === "true" };
  if (process.env.IDEM_CRASH_AFTER_CHARGE === "1") {
    console.log(JSON.stringify({ crashed_after: out }));
    process.kill(process.pid, "SIGKILL"); // the tool ran; the step was not saved
  }
  return out;
}
// ------------------------------------------------------------------------------------------

const chargeCard = tool({
  description: "Charge a customer's card.",
  inputSchema: z.object({ customer: z.string(), amount: z.number(), note: z.string() }),
  execute: async (input, { experimental_context }) => idemPost(experimental_context, "/charges", input),
});

const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 1, text: 1, reasoning: 0 },
};
const model = new MockLanguageModelV3({
  doGenerate: async ({ prompt }) => {
    const answered = prompt.some((m) => m.role === "tool");
    if (answered) {
      return { content: [{ type: "text", text: "charged" }], usage, warnings: [],
               finishReason: { unified: "stop", raw: "stop" } };
    }
    const same = process.env.SAME_CALL_ID === "1";
    const note = process.env.REWORD === "1" ? "Monthly plan, renewal" : "Renewal of the monthly plan";
    const content = JSON.parse(chargesJson).map((charge) => ({
      type: "tool-call", toolName: "charge_card", input: JSON.stringify({ ...charge, note }),
      toolCallId: same ? "call_0" : `call_${randomUUID().slice(0, 12)}`,
    }));
    return { content, usage, warnings: [], finishReason: { unified: "tool-calls", raw: "tool_calls" } };
  },
});

await generateText({
  model,
  tools: { charge_card: chargeCard },
  messages: [{ role: "user", content: "Charge my invoices." }, ...saved.messages],
  stopWhen: stepCountIs(5),
  prepareStep: ({ stepNumber }) => ({
    experimental_context: { stepId: `${runId}:${saved.steps + stepNumber}`, nextCall: 0 },
  }),
  onStepFinish: (step) => { // the application's checkpoint: this step is done
    saved.steps += 1;
    saved.messages.push(...step.response.messages);
    saved.results.push(...step.toolResults.map((r) => r.output));
    writeFileSync(statePath, JSON.stringify(saved));
  },
});
console.log(JSON.stringify({ results: saved.results }));
