#!/usr/bin/env python3
"""Measures KV prefix reuse in `sluice serve`: one conversation of --turns turns, each resending the
whole history (every earlier prompt) plus --new random token ids, greedy --answer tokens a turn,
against a server with reuse and one with --no-cache-prompt. Prints per server the prompt tokens,
the cached and prefilled ones (/metrics), the wall time of all turns, and whether the answers of
the two servers are equal.

usage: scripts/bench_prefix_reuse.py -m MODEL.gguf [--turns 10] [--new 200] [--answer 8] [-t 2]
       [--cache-experts 100%] [-c 4096]
"""
import argparse, json, os, random, re, subprocess, sys, threading, time, urllib.request

def metrics(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    return {k: float(v) for k, v in re.findall(r"^(sluice_\w+) (\S+)$", text, re.M)}

def post(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=36000).read())

def start(cmd):
    srv = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    for line in srv.stderr:
        m = re.search(r"listening on http://127.0.0.1:(\d+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in srv.stderr], daemon=True).start()
            return srv, int(m.group(1))
    sys.exit("server did not start: " + " ".join(cmd))

def converse(a, extra, turns):
    cmd = [a.binary, "serve", "-m", a.model, "--port", "0", "--cache-experts", a.cache_experts, "--parallel", "1",
           "-c", str(a.ctx), "-t", a.threads] + extra
    srv, port = start(cmd)
    try:
        post(port, {"prompt": [1, 2, 3], "max_tokens": 1, "temperature": 0})  # pages in the resident weights
        before = metrics(port)
        answers, per_turn = [], []
        t0 = time.time()
        for prompt in turns:
            t = time.time()
            r = post(port, {"prompt": prompt, "max_tokens": a.answer, "temperature": 0})
            per_turn.append(round(time.time() - t, 2))
            answers.append(r["choices"][0]["text"])
        wall = time.time() - t0
        after = metrics(port)
        d = {k: after[k] - before.get(k, 0) for k in after}
        return answers, {"flags": extra, "prompt_tokens": int(d["sluice_prompt_tokens_total"]),
                         "cached_tokens": int(d["sluice_prompt_tokens_cached_total"]),
                         "prefilled_tokens": int(d["sluice_prompt_tokens_total"] - d["sluice_prompt_tokens_cached_total"]),
                         "wall_s": round(wall, 2), "turn_s": per_turn}
    finally:
        srv.terminate()
        srv.wait()

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--new", type=int, default=200)
    ap.add_argument("--answer", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=2048, help="token ids are drawn from [0, VOCAB)")
    ap.add_argument("--cache-experts", default="100%")
    ap.add_argument("-c", "--ctx", type=int, default=4096)
    ap.add_argument("-t", "--threads", default="2")
    ap.add_argument("--binary", default=os.path.join(os.path.dirname(__file__), "..", "build", "sluice"))
    a = ap.parse_args()
    rng = random.Random(37)
    history, turns = [], []
    for _ in range(a.turns):
        history = history + [rng.randrange(a.vocab) for _ in range(a.new)]
        turns.append(history)
    with_answers, with_reuse = converse(a, [], turns)
    without_answers, without = converse(a, ["--no-cache-prompt"], turns)
    print(json.dumps({"model": os.path.basename(a.model), "turns": a.turns, "new_per_turn": a.new,
                      "new_tokens": a.turns * a.new, "answer_tokens": a.answer, "threads": a.threads,
                      "reuse": with_reuse, "no_reuse": without,
                      "answers_equal": with_answers == without_answers}, indent=1))

main()
