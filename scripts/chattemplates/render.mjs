// Renders chat templates with @huggingface/jinja (the independent renderer the
// template tests compare lmlite's with). usage: node render.mjs CACHE_DIR < cases.json
// cases.json: [{"name", "template", "context": {...}, "now": "RFC 3339 time"}];
// prints [{"name", "text"} or {"name", "error"}].
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const cache = process.argv[2];
const { Template } = await import(pathToFileURL(path.join(cache, "node_modules/@huggingface/jinja/dist/index.js")).href);

// strftime_now is @huggingface/jinja's own, on a fixed clock: Date without
// arguments is "now" of the case being rendered (run with TZ=UTC and an English locale).
const RealDate = Date;
let fixed = 0;
globalThis.Date = class extends RealDate {
	constructor(...args) {
		if (args.length === 0) super(fixed);
		else super(...args);
	}
	static now() {
		return fixed;
	}
};

const cases = JSON.parse(fs.readFileSync(0, "utf8"));
const out = cases.map((c) => {
	try {
		fixed = RealDate.parse(c.now);
		return { name: c.name, text: new Template(c.template).render(c.context) };
	} catch (e) {
		return { name: c.name, error: String(e && e.message ? e.message : e) };
	}
});
process.stdout.write(JSON.stringify(out));
