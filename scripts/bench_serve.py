#!/usr/bin/env python3
"""Measures continuous batching in `sluice serve`: aggregate decode tok/s, bytes read per token
and expert overlap with 1 stream and with N concurrent streams of different prompts.

usage: scripts/bench_serve.py -m MODEL.gguf [--cache-experts 100%] [--streams 4] [-n 32] [-t 2]
Starts build/sluice serve on a free port, runs the single stream, then the N streams, and reads
the server's /metrics counters around each phase (decode-only passes, so prefill is excluded).
"""
import argparse, json, os, re, subprocess, sys, threading, time, urllib.request

PROMPTS = ["Tell me about the history of the printing press.", "Write a short poem about rivers and stones.",
           "List three uses of graphite in industry.", "Explain how a refrigerator moves heat outside.",
           "Describe the rules of chess for a beginner.", "Why is the sky blue during the day?",
           "Summarize the plot of a detective story.", "What makes sourdough bread rise?"]

def metrics(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    return {k: float(v) for k, v in re.findall(r"^(sluice_\w+) (\S+)$", text, re.M)}

def complete(port, prompt, n, out, i):
    body = json.dumps({"prompt": prompt, "max_tokens": n, "temperature": 0, "stream": False}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body, {"Content-Type": "application/json"})
    out[i] = json.loads(urllib.request.urlopen(req, timeout=3600).read())

def phase(port, prompts, n):
    before = metrics(port)
    out = [None] * len(prompts)
    threads = [threading.Thread(target=complete, args=(port, p, n, out, i)) for i, p in enumerate(prompts)]
    t0 = time.time()
    for t in threads: t.start()
    for t in threads: t.join()
    wall = time.time() - t0
    after = metrics(port)
    d = {k: after[k] - before.get(k, 0) for k in after}
    tok = d["sluice_decode_tokens_total"]
    return {"streams": len(prompts), "wall_s": round(wall, 2),
            "generated": int(d["sluice_generated_tokens_total"]),
            "decode_tokens": int(tok),
            "decode_tok_s": round(tok / d["sluice_decode_seconds_total"], 3) if d["sluice_decode_seconds_total"] else 0,
            "decode_batch_mean": round(tok / d["sluice_decode_steps_total"], 2) if d["sluice_decode_steps_total"] else 0,
            "bytes_read_per_token": round(d["sluice_decode_bytes_read_total"] / tok) if tok else 0,
            "tokens_per_expert_read": round(d["sluice_routed_pairs_total"] / d["sluice_distinct_experts_total"], 3)
            if d["sluice_distinct_experts_total"] else 0}

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--cache-experts", default="100%")
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("-t", "--threads", default="2")
    ap.add_argument("--policy", default="lru")
    ap.add_argument("--binary", default=os.path.join(os.path.dirname(__file__), "..", "build", "sluice"))
    a = ap.parse_args()
    cmd = [a.binary, "serve", "-m", a.model, "--port", "0", "--cache-experts", a.cache_experts, "--parallel",
           str(a.streams), "-c", "512", "-t", a.threads, "--policy", a.policy]
    srv = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    port = None
    for line in srv.stderr:
        sys.stderr.write(line)
        m = re.search(r"listening on http://127.0.0.1:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
    if port is None:
        sys.exit("server did not start")
    threading.Thread(target=lambda: [None for _ in srv.stderr], daemon=True).start()
    try:
        # Warm-up. At 100% the claim is "every expert resident": run every prompt first (greedy, so
        # the measured phases route exactly as here) until the phases below read nothing from disk;
        # otherwise both phases would pay for first touches. Below 100% only page in the resident
        # weights, with a prompt that is not measured.
        if a.cache_experts.strip() == "100%":
            for i in range(0, len(PROMPTS), a.streams):
                phase(port, PROMPTS[i:i + a.streams], a.n)
        else:
            phase(port, PROMPTS[:1], 4)
        single = phase(port, PROMPTS[1:2], a.n)
        multi = phase(port, PROMPTS[2:2 + a.streams], a.n)
        res = {"model": os.path.basename(a.model), "cache_experts": a.cache_experts, "policy": a.policy, "threads": a.threads,
               "single": single, "multi": multi,
               "speedup": round(multi["decode_tok_s"] / single["decode_tok_s"], 3) if single["decode_tok_s"] else 0}
        print(json.dumps(res, indent=1))
    finally:
        srv.terminate()
        srv.wait()

main()
