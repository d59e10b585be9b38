#!/usr/bin/env python3
"""llama-server's speculative modes against its own plain decoding, ABAB
(docs/PERFORMANCE.md, "llama-server's speculative modes beside ours").
usage: spec_side.py MODEL PROMPTFILE N_PREDICT PAIRS MODE [extra server args...]
Starts two llama-servers on the same file (plain, and --spec-type MODE + extra; MODE
none: both plain), sends the same greedy /completion (temperature 0, ignore_eos,
no prompt cache) to each alternately, and prints one JSON line: the median tokens/s
both ways (llama-server's own timings), the median of the pairs' ratios, the pairs'
CPU-time ratios (plain over speculative, the server processes' /proc times), the
drafted and accepted tokens, and whether each pair gave the same text.
LLAMA_SERVER: the binary (build.sh prints it); CTX: the context (512)."""
import json, os, statistics, subprocess, sys, tempfile, time, urllib.request

BIN = os.environ.get("LLAMA_SERVER", "/tmp/llamaserver/bin/llama-server")
model, promptfile, npred, pairs, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
extra = sys.argv[6:]
prompt = open(promptfile).read()
ctx = os.environ.get("CTX", "512")

def start(port, args):
    cmd = [BIN, "-m", model, "-t", "2", "-tb", "2", "-c", ctx, "-np", "1", "--port", str(port), "--host", "127.0.0.1", "--no-warmup"] + args
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(os.path.join(tempfile.gettempdir(), f"llama-server-{port}.log"), "w"))
    for _ in range(600):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
            return p, cmd
        except Exception:
            if p.poll() is not None:
                raise SystemExit(f"server {cmd} exited {p.returncode}")
            time.sleep(0.5)
    raise SystemExit("server did not start")

def cpu(p):
    f = open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

def ask(port, n=None):
    body = json.dumps({"prompt": prompt, "n_predict": n or npred, "temperature": 0, "top_k": 1, "ignore_eos": True,
                       "cache_prompt": False, "seed": 1}).encode()
    r = urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/completion", body, {"Content-Type": "application/json"}), timeout=3600)
    return json.load(r)

plain, pcmd = start(18091, [])
sp, scmd = start(18092, ["--spec-type", mode] + extra if mode != "none" else [])
try:
    ask(18091, 8); ask(18092, 8)  # warm-up
    ratios, pt, st, same, dn, da, cr = [], [], [], [], 0, 0, []
    for i in range(pairs):
        c0 = cpu(plain); a = ask(18091); c1 = cpu(plain)
        d0 = cpu(sp); b = ask(18092); d1 = cpu(sp)
        cr.append((c1 - c0) / max(d1 - d0, 1e-9))
        ta, tb = a["timings"]["predicted_per_second"], b["timings"]["predicted_per_second"]
        pt.append(ta); st.append(tb); ratios.append(tb / ta)
        same.append(a["content"] == b["content"])
        dn += b["timings"].get("draft_n", 0); da += b["timings"].get("draft_n_accepted", 0)
    print(json.dumps({"mode": mode, "extra": extra, "model": model, "n_predict": npred, "pairs": pairs,
                      "plain_tok_s": statistics.median(pt), "spec_tok_s": statistics.median(st),
                      "ratio": statistics.median(ratios), "ratios": [round(x, 2) for x in ratios], "cpu_ratio": statistics.median(cr), "cpu_ratios": [round(x, 2) for x in cr],
                      "same_text": same, "drafted": dn, "accepted": da,
                      "first_diff": next((k for k in range(min(len(a["content"]), len(b["content"]))) if a["content"][k] != b["content"][k]), None),
                      "plain_text": a["content"][:120], "spec_text": b["content"][:120], "server": " ".join(scmd[1:])}))
finally:
    plain.terminate(); sp.terminate(); plain.wait(); sp.wait()
