#!/usr/bin/env bash
# Installs the agent CLIs the opt-in smoke test drives (cmd/lmlite
# TestAgentCLIsSmoke, `make smoke-agent-clis`), pinned, into a cache folder outside
# the repository, once, and prints that folder. Needs node and npm; both packages
# ship native binaries (about 800 MB together; the install took 17 s here).
#   - @anthropic-ai/claude-code: `claude -p` against /v1/messages
#   - @openai/codex: `codex exec` against /v1/responses
set -euo pipefail
dir=${AGENT_CLIS_DIR:-$HOME/.cache/lmlite-peers/agent-clis}
claude=2.1.332
codex=0.171.0
stamp="$dir/.installed-claude-code@$claude-codex@$codex"
if [ ! -f "$stamp" ]; then
  mkdir -p "$dir"
  (cd "$dir" && { [ -f package.json ] || echo '{"name":"agent-clis-peer","private":true}' > package.json; } \
    && npm install --no-audit --no-fund --loglevel=error --engine-strict=false "@anthropic-ai/claude-code@$claude" "@openai/codex@$codex" >&2)
  rm -f "$dir"/.installed-*
  touch "$stamp"
fi
echo "$dir"
