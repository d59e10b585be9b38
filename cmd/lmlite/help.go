package main

import (
	"flag"
	"fmt"
	"strings"
)

// help is what `lmlite NAME --help` prints above the flags: the usage line, what the
// arguments are, and examples to copy. Every FlagSet newFlags makes has one (the
// --help tests hold every subcommand to it).
type help struct {
	usage    string   // after "Usage: "
	about    string   // more lines, or ""
	examples []string // command lines
}

var helps = map[string]help{
	"serve": {usage: "lmlite serve [--config FILE] [--listen ADDR] [flags]",
		about:    "Serves the OpenAI-compatible API; without --config, the embedded demo (its models are written into data/ on the first run).",
		examples: []string{"lmlite serve", "lmlite serve --listen 127.0.0.1:9090 -v", "lmlite serve --config configs/example.yaml"}},
	"bench": {usage: "lmlite bench --model FILE.gguf [flags]",
		about:    "Measures prompt processing (pp) and generation (tg) in tokens/s, llama-bench's protocol; --prompt + --gen are lowered to fit the model's context.",
		examples: []string{"lmlite bench --model data/models/demo-stories.gguf", "lmlite bench --model m.gguf --threads 2 --prompt 256 --gen 64 --json", "lmlite bench --membw"}},
	"gen-model": {usage: "lmlite gen-model --out FILE.gguf [flags]",
		examples: []string{"lmlite gen-model --out tiny.gguf", "lmlite gen-model --arch qwen3 --preset 125m --type q4_k_m --seed 1 --out data/q3.gguf", "lmlite gen-model --arch qwen3 --context 65536 --out data/long.gguf", "lmlite gen-model --lora --base tiny.gguf --rank 16 --alpha 32 --out tiny-lora.gguf"}},
	"keys": {usage: "lmlite keys create --tenant T | revoke ID | list  [--config FILE] [--server URL] [--admin-key K]",
		about:    "Without a running server it opens the store in the data directory; while a server holds it, it goes through the server's admin API with the admin key ($LMLITE_ADMIN_KEY, or data_dir/admin-key, made by serve).",
		examples: []string{"lmlite keys create --tenant acme --config my.yaml", "lmlite keys list", "lmlite keys revoke key_0123abcd --config my.yaml"}},
	"keys create": {usage: "lmlite keys create --tenant T [--config FILE] [--server URL] [--admin-key K]",
		examples: []string{"lmlite keys create --tenant acme --config my.yaml"}},
	"keys revoke": {usage: "lmlite keys revoke ID [--config FILE] [--server URL] [--admin-key K]",
		examples: []string{"lmlite keys revoke key_0123abcd --config my.yaml"}},
	"keys list": {usage: "lmlite keys list [--config FILE] [--server URL] [--admin-key K]",
		examples: []string{"lmlite keys list", "lmlite keys list --server http://127.0.0.1:8080"}},
	"ledger verify": {usage: "lmlite ledger verify --config FILE [--data-dir DIR]... [--release]",
		about:    "Reconciles the ledgers of the processes sharing a Redis (their servers stopped) with the spend Redis holds; --release first closes the leases those processes held (a process killed and not restarted), from their ledgers.",
		examples: []string{"lmlite ledger verify --config shared.yaml --data-dir /srv/a/data --data-dir /srv/b/data"}},
	"loadtest": {usage: "lmlite loadtest --scenario FILE --out DIR [--target URL] [--api-key KEY] [--duration 30s | --requests N] [--slo ttft_p99=500ms,...]\n       lmlite loadtest compare A.json B.json\n       lmlite loadtest ab --scenario FILE --target URL_A --target URL_B (see lmlite loadtest ab --help)",
		examples: []string{"lmlite loadtest --scenario loadtest/scenarios/steady-chat.yaml --api-key lml_… --out /tmp/lt", "lmlite loadtest compare before/report.json after/report.json"}},
	"loadtest compare": {usage: "lmlite loadtest compare A.json B.json",
		about:    "Compares two loadtest reports side by side.",
		examples: []string{"lmlite loadtest compare before/report.json after/report.json"}},
	"loadtest ab": {usage: "lmlite loadtest ab --scenario FILE --target URL_A --target URL_B [--api-key K | --api-key KA --api-key KB] [--rounds 100] [--out DIR]",
		about:    "Sends each round's request to every target, one at a time in a random order, and compares them request by request.",
		examples: []string{"lmlite loadtest ab --scenario loadtest/scenarios/steady-chat.yaml --target http://127.0.0.1:8080 --target http://127.0.0.1:9090 --api-key lml_…"}},
	"pull": {usage: "lmlite pull [flags] [REF ...]",
		about:    "REF is hf://ORG/REPO[@REVISION]/FILE.gguf, an http(s):// URL or a catalogue name.\nhf:// uses $HF_ENDPOINT (default https://huggingface.co) and $HF_TOKEN for gated repositories.",
		examples: []string{"lmlite pull --list", "lmlite pull -q hf://ORG/REPO/model-Q4_K_M.gguf", "lmlite pull --config my.yaml"}},
	"run": {usage: "lmlite run --model FILE.gguf --prompt TEXT [flags]",
		examples: []string{`lmlite run --model data/models/demo-stories.gguf --prompt "Once upon a time" --max-tokens 32`, `lmlite run --model chat.gguf --chat --prompt "Hi" --temperature 0.7`, `lmlite run --model tiny.gguf --lora tiny-lora.gguf:0.5 --prompt "Once upon a time"`}},
	"score": {usage: "lmlite score --model FILE.gguf --ids IDS [flags]",
		examples: []string{"lmlite score --model data/models/demo-stories.gguf --ids 1,403,407,263 --top 5", "lmlite score --model tiny.gguf --lora tiny-lora.gguf --ids 1,574,568,260 --top 5"}},
	"tokenize": {usage: "lmlite tokenize --model FILE.gguf (--prompt TEXT | --file FILE) [flags]",
		examples: []string{`lmlite tokenize --model data/models/demo-stories.gguf --prompt "Once upon a time"`}},
	"version": {usage: "lmlite version",
		about:    "Prints the module version, the VCS commit and the Go version of the build.",
		examples: []string{"lmlite version"}},
}

// onNewFlags, when set (tests), sees every FlagSet newFlags makes.
var onNewFlags func(*flag.FlagSet)

// printHelp prints name's help and the flags of fs.
func printHelp(fs *flag.FlagSet, name string) {
	w := fs.Output()
	h, ok := helps[name]
	if !ok {
		h = help{usage: "lmlite " + name + " [flags]"}
	}
	fmt.Fprintf(w, "Usage: %s\n", h.usage)
	if h.about != "" {
		fmt.Fprintf(w, "\n%s\n", h.about)
	}
	if len(h.examples) > 0 {
		fmt.Fprintln(w, "\nExamples:")
		for _, e := range h.examples {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprintln(w, "\nFlags:")
		fs.PrintDefaults()
	}
}

// errorLine is the line main prints for a subcommand's error: "lmlite NAME: " and
// the error, without the name again when the error starts with it ("pull: …").
func errorLine(name string, err error) string {
	msg := strings.TrimSpace(err.Error())
	for _, p := range []string{name + ": ", "lmlite " + name + ": "} {
		msg = strings.TrimPrefix(msg, p)
	}
	return "lmlite " + name + ": " + msg
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help" || arg == "help"
}
