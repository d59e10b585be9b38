#!/usr/bin/env bash
# Installs real chat templates of popular models, and an independent Jinja renderer,
# into a cache folder outside the repository, once, and prints that folder. The
# template tests (engine TestRealTemplatesMatchHFJinja, gateway TestSDKRealTemplateTools)
# read the templates from there; none is copied into the repository.
#
# Sources, each a pinned registry package:
#   - npm @huggingface/ollama-utils: its chat-template automap holds the GGUF chat
#     templates (tokenizer.chat_template) of the Ollama library's models: Llama 3.1,
#     Llama 3.2, Phi-4-mini, Phi-4;
#   - the Go module github.com/ardanlabs/jinja (a Jinja engine): its test data holds
#     the GGUF templates of Ministral 3 and Mistral Medium 3.5 (Mistral's
#     [AVAILABLE_TOOLS] format);
#   - npm @huggingface/jinja, the renderer the tests compare with.
# The folder then holds templates/NAME.jinja (NAME as in extract.mjs) and node_modules.
# Needs node, npm and go.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${CHAT_TEMPLATES_DIR:-$HOME/.cache/lmlite-peers/chat-templates}
utils=0.0.18
jinja=0.5.11
ardan=v1.8.0
stamp="$dir/.installed-ollama-utils@$utils-jinja@$jinja-ardanlabs-jinja@$ardan"
if [ ! -f "$stamp" ] || [ ! -d "$dir/templates" ]; then
  mkdir -p "$dir"
  (cd "$dir" && { [ -f package.json ] || echo '{"name":"chat-templates-peer","private":true,"type":"module"}' > package.json; } \
    && npm install --no-audit --no-fund --loglevel=error "@huggingface/ollama-utils@$utils" "@huggingface/jinja@$jinja" >&2)
  # Outside any module, so that no go.mod is touched; the module lands in GOMODCACHE.
  ardandir=$(cd "$dir" && GOFLAGS=-mod=mod GOWORK=off GO111MODULE=on go mod download -json "github.com/ardanlabs/jinja@$ardan" \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -d "$ardandir/testdata/templates" ] || { echo "chattemplates/setup.sh: github.com/ardanlabs/jinja@$ardan has no testdata/templates" >&2; exit 1; }
  rm -rf "$dir/templates.new"
  node "$here/extract.mjs" "$dir" "$ardandir" "$dir/templates.new" >&2
  rm -rf "$dir/templates" && mv "$dir/templates.new" "$dir/templates"
  rm -f "$dir"/.installed-*
  touch "$stamp"
fi
echo "$dir"
