// Writes the chat templates the tests use, from the installed packages: the named
// ones as OUT/NAME.jinja, and every template of both packages under
// OUT/corpus/ (ollama-MODEL.jinja, ardanlabs-FILE). usage:
// node extract.mjs CACHE_DIR ARDANLABS_JINJA_DIR OUT
import fs from "node:fs";
import path from "node:path";

const [cache, ardan, out] = process.argv.slice(2);

// @huggingface/ollama-utils does not export its automap; its TypeScript source is
// shipped beside the build, an array literal once the type annotations are gone.
const automap = path.join(cache, "node_modules/@huggingface/ollama-utils/src/chat-template-automap.ts");
let src = fs.readFileSync(automap, "utf8");
src = src.replace(/^import type .*$/m, "").replace(/: OllamaChatTemplateMapEntry\[\]/, "");
const { OLLAMA_CHAT_TEMPLATE_MAPPING: entries } = await import("data:text/javascript;base64," + Buffer.from(src).toString("base64"));

const fromOllama = {
	"llama3.1": "library/llama3.1:8b",
	"llama3.2": "library/llama3.2:3b",
	"phi4-mini": "library/phi4-mini:3.8b",
	"phi4": "library/phi4:14b",
};
const fromArdan = {
	"ministral3": "Ministral-3-14B-Instruct-2512-Q4_0.jinja",
	"mistral-medium3.5": "Mistral-Medium-3.5-128B-GGUF.jinja",
};

fs.mkdirSync(out, { recursive: true });
for (const [name, model] of Object.entries(fromOllama)) {
	const e = entries.find((x) => x.model === model);
	if (!e) throw new Error(`extract.mjs: ${model} is not in ${automap}`);
	fs.writeFileSync(path.join(out, name + ".jinja"), e.gguf);
}
for (const [name, file] of Object.entries(fromArdan)) {
	fs.copyFileSync(path.join(ardan, "testdata/templates", file), path.join(out, name + ".jinja"));
	fs.chmodSync(path.join(out, name + ".jinja"), 0o644);
}
fs.mkdirSync(path.join(out, "corpus"));
const seen = new Map();
for (const e of entries) {
	let name = "ollama-" + e.model.replace(/^library\//, "").replace(/[^A-Za-z0-9._-]/g, "_");
	const n = (seen.get(name) ?? 0) + 1;
	seen.set(name, n);
	if (n > 1) name += "-" + n;
	fs.writeFileSync(path.join(out, "corpus", name + ".jinja"), e.gguf);
}
for (const file of fs.readdirSync(path.join(ardan, "testdata/templates"))) {
	if (!file.endsWith(".jinja")) continue;
	const to = path.join(out, "corpus", "ardanlabs-" + file);
	fs.copyFileSync(path.join(ardan, "testdata/templates", file), to);
	fs.chmodSync(to, 0o644);
}
console.log(`extract.mjs: ${Object.keys(fromOllama).length + Object.keys(fromArdan).length} templates and a corpus of ${fs.readdirSync(path.join(out, "corpus")).length} in ${out}`);
