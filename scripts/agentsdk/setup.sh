#!/usr/bin/env bash
# Installs the OpenAI Agents SDK for JavaScript that the agent smoke test drives
# (cmd/lmlite TestAgentsSDKToolTurn: scripts/agentsdk/agent.mjs), pinned, into a cache
# folder outside the repository, once, and prints that folder. Needs node and npm.
#   - @openai/agents: an Agent with a function tool, run through /v1/responses
#   - zod: its peer dependency (the tool's parameters and the agent's output type)
#   - openai: the client it calls the gateway with (the client smoke test's version)
set -euo pipefail
dir=${AGENTS_SDK_DIR:-$HOME/.cache/lmlite-peers/agents-sdk}
agents=0.20.0
zod=4.6.7
openai=7.59.0
stamp="$dir/.installed-agents@$agents-zod@$zod-openai@$openai"
if [ ! -f "$stamp" ]; then
  mkdir -p "$dir"
  (cd "$dir" && { [ -f package.json ] || echo '{"name":"agents-sdk-peer","private":true,"type":"module"}' > package.json; } \
    && npm install --no-audit --no-fund --loglevel=error --engine-strict=false "@openai/agents@$agents" "zod@$zod" "openai@$openai" >&2)
  rm -f "$dir"/.installed-*
  touch "$stamp"
fi
echo "$dir"
