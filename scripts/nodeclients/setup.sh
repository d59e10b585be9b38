#!/usr/bin/env bash
# Installs the official Node client packages the client smoke test drives
# (gateway TestNodeClientsSmoke: smoke.mjs), pinned, into a cache folder outside the
# repository, once, and prints that folder. Needs node and npm.
#   - openai: responses.create, streamed and not (OpenAI's Responses API)
#   - @anthropic-ai/sdk: messages.create and messages.stream (Anthropic's Messages API)
set -euo pipefail
dir=${NODE_CLIENTS_DIR:-$HOME/.cache/lmlite-peers/node-clients}
openai=7.59.0
anthropic=1.14.0
stamp="$dir/.installed-openai@$openai-anthropic@$anthropic"
if [ ! -f "$stamp" ]; then
  mkdir -p "$dir"
  (cd "$dir" && { [ -f package.json ] || echo '{"name":"node-clients-peer","private":true,"type":"module"}' > package.json; } \
    && npm install --no-audit --no-fund --loglevel=error --engine-strict=false "openai@$openai" "@anthropic-ai/sdk@$anthropic" >&2)
  rm -f "$dir"/.installed-*
  touch "$stamp"
fi
echo "$dir"
