// Tokenizes a list of texts with llama.cpp (node-llama-cpp, the peer in
// ../shared/peers/llamacpp) for each of several vocabularies, without and with
// special-token parsing, no BOS.
// usage: node llamacpp_tokenize.mjs PEER_DIR COMMON_MJS INPUTS_JSON MODEL...
// prints {"MODEL": {"plain": [[ids...]...], "special": [[ids...]...]}, ...}
import fs from "node:fs";
import { pathToFileURL } from "node:url";
const [peerDir, commonMjs, inputsFile, ...models] = process.argv.slice(2);
const { loadLlama } = await import(pathToFileURL(commonMjs).href);
const { llama } = await loadLlama(peerDir);
const inputs = JSON.parse(fs.readFileSync(inputsFile, "utf8"));
const out = {};
for (const model of models) {
  const m = await llama.loadModel({ modelPath: model, vocabOnly: true });
  const run = (special) => inputs.map((s) => Array.from(m.tokenize(s, special)));
  out[model] = { plain: run(false), special: run(true) };
  await m.dispose();
}
console.log(JSON.stringify(out));
