#!/usr/bin/env python3
"""Soak test for `sluice serve` (issues 26, 39): for a bounded time, a few client threads mix valid
greedy requests (plain and streamed) with hostile ones (deep JSON, partial and trickled heads,
chunked bodies past --max-body, pipelined requests, abandoned requests and streams, garbage,
wrong methods, idle connections), while three attackers run throughout: malformed requests at
100/s, 22 POST heads whose body never comes (each renewed after 4.5 s, before its grace ends),
and valid requests whose bodies are trickled at 17 KiB/s (their answers are checked like any
other valid request). It fails (exit 1, one line per problem) on:
  - a crash (the server process exits) or a failed shutdown (SIGTERM must exit 0 within 10 s);
  - any 5xx answer;
  - a lost valid request (no complete answer);
  - a greedy text that differs from `sluice run`'s greedy text on the same prompt (computed by
    running `sluice run` once per prompt at the start).

  scripts/serve_soak.py --sluice build/sluice --model M.gguf [--seconds 60]
"""
import argparse
import http.client
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

PROMPTS = ["Once upon a time", "The capital of France", "1, 2, 3, 4,", "The quick brown fox",
           "In the beginning", "Hello, my name is", "def main():", "Dear Sir or Madam,"]
N_TOKENS = 12
MAX_BODY = 64 * 1024


class Soak:
    def __init__(self, port, expected, seconds, seed):
        self.port = port
        self.expected = expected  # prompt -> greedy text
        self.deadline = time.monotonic() + seconds
        self.rng_seed = seed
        self.lock = threading.Lock()
        self.problems = []
        self.counts = {}

    def fail(self, what):
        with self.lock:
            if len(self.problems) < 50:
                self.problems.append(what)

    def count(self, kind):
        with self.lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1

    def conn(self, timeout=30):
        return socket.create_connection(("127.0.0.1", self.port), timeout=timeout)

    def status_check(self, kind, status, allowed):
        if status >= 500:
            self.fail(f"{kind}: 5xx answer {status}")
        elif status not in allowed:
            self.fail(f"{kind}: status {status}, expected one of {allowed}")

    # ---- valid requests: every one must be answered, greedy text equal to sluice run's ----
    def check_text(self, kind, prompt, text, finish):
        want = self.expected[prompt]
        # The empty text is a prefix of anything: it never passes.
        ok = text != "" and (text == want if finish == "length" else want.startswith(text))
        if not ok:
            self.fail(f"{kind}: greedy text for {prompt!r} is {text!r}, sluice run gave {want!r} (finish {finish})")

    def valid_plain(self, rng):
        prompt = rng.choice(list(self.expected))
        body = json.dumps({"prompt": prompt, "max_tokens": N_TOKENS, "temperature": 0})
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
            r = c.getresponse()
            data = r.read()
            c.close()
        except Exception as e:  # noqa: BLE001 - any failure is a lost request
            return self.fail(f"valid request lost: {e!r}")
        self.status_check("valid", r.status, [200])
        if r.status == 200:
            j = json.loads(data)
            self.check_text("valid", prompt, j["choices"][0]["text"], j["choices"][0]["finish_reason"])
        self.count("valid")

    def valid_stream(self, rng):
        prompt = rng.choice(list(self.expected))
        body = json.dumps({"prompt": prompt, "max_tokens": N_TOKENS, "temperature": 0, "stream": True})
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
            r = c.getresponse()
            data = r.read().decode()
            c.close()
        except Exception as e:  # noqa: BLE001
            return self.fail(f"valid stream lost: {e!r}")
        self.status_check("stream", r.status, [200])
        if r.status != 200:
            return
        events = [line[6:] for line in data.split("\n") if line.startswith("data: ")]
        if not events or events[-1] != "[DONE]":
            return self.fail(f"stream for {prompt!r} did not end with [DONE]")
        text, finish = "", None
        for e in events[:-1]:
            ch = json.loads(e)["choices"][0]
            text += ch["text"]
            finish = ch["finish_reason"] or finish
        self.check_text("stream", prompt, text, finish)
        self.count("stream")

    def valid_pipelined(self, rng):
        prompts = [rng.choice(list(self.expected)) for _ in range(3)]
        reqs = b""
        for i, p in enumerate(prompts):
            body = json.dumps({"prompt": p, "max_tokens": N_TOKENS, "temperature": 0}).encode()
            close = b"Connection: close\r\n" if i == len(prompts) - 1 else b""
            reqs += (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + close +
                     b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        try:
            s = self.conn(60)
            s.sendall(reqs)
            raw = b""
            while True:
                b = s.recv(65536)
                if not b:
                    break
                raw += b
            s.close()
        except Exception as e:  # noqa: BLE001
            return self.fail(f"pipelined requests lost: {e!r}")
        answers = parse_responses(raw)
        if len(answers) != len(prompts):
            return self.fail(f"pipelined: {len(answers)} answers to {len(prompts)} requests")
        for p, (status, body) in zip(prompts, answers):
            self.status_check("pipelined", status, [200])
            if status == 200:
                j = json.loads(body)
                self.check_text("pipelined", p, j["choices"][0]["text"], j["choices"][0]["finish_reason"])
        self.count("pipelined")

    # ---- hostile requests: answered with 4xx (or closed), never 5xx, never a crash ----
    def raw_exchange(self, kind, data, allowed, timeout=15):
        try:
            s = self.conn(timeout)
            s.sendall(data)
            raw = b""
            while b"\r\n\r\n" not in raw or not parse_responses(raw):
                b = s.recv(65536)
                if not b:
                    break
                raw += b
            s.close()
        except (ConnectionResetError, BrokenPipeError):
            raw = raw if "raw" in locals() else b""
        except socket.timeout:
            return self.fail(f"{kind}: no answer within {timeout} s")
        answers = parse_responses(raw)
        if answers:
            self.status_check(kind, answers[0][0], allowed)
        elif 400 not in allowed:
            self.fail(f"{kind}: no answer")
        self.count(kind)

    def deep_json(self, rng):
        n = rng.choice([65, 1000, 30000])
        deep = "[" * n + "]" * n
        field = rng.choice(["x", "prompt", "stop"])
        body = json.dumps({"prompt": "hi"})[:-1] + f', "{field}": ' + deep + "}"
        self.raw_exchange("deep-json", http_post("/v1/completions", body.encode(), close=True), [400, 413])

    def partial_head(self, rng):
        try:
            s = self.conn()
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nContent-Le")
            time.sleep(rng.uniform(0.2, 2.0))
            s.close()
        except OSError:
            pass
        self.count("partial-head")

    def trickled_head(self, rng):
        head = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 200 + b"\r\n\r\n"
        try:
            s = self.conn()
            for i in range(len(head)):
                s.sendall(head[i:i + 1])
                time.sleep(0.05)
                if time.monotonic() > self.deadline:
                    break
            s.close()
        except OSError:
            pass  # closed by the server's head deadline: expected
        self.count("trickled-head")

    def chunked_over_limit(self, rng):
        kind = "chunked-over-limit"
        try:
            s = self.conn()
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
            piece = b"4000\r\n" + b"a" * 0x4000 + b"\r\n"
            s.settimeout(0.0)
            raw, sent = b"", 0
            t_end = time.monotonic() + 15
            while time.monotonic() < t_end and not parse_responses(raw):
                try:
                    raw += s.recv(65536)
                except BlockingIOError:
                    pass
                try:
                    if sent < 64 * MAX_BODY:
                        sent += s.send(piece)
                except BlockingIOError:
                    time.sleep(0.001)
            s.close()
        except (ConnectionResetError, BrokenPipeError):
            pass
        answers = parse_responses(raw) if "raw" in locals() else []
        if answers:
            self.status_check(kind, answers[0][0], [413])
        self.count(kind)

    def huge_length(self, rng):
        self.raw_exchange("huge-length", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n", [413])

    def abandoned(self, rng):
        stream = rng.random() < 0.5
        body = json.dumps({"prompt": rng.choice(PROMPTS), "max_tokens": 1500, "temperature": 1.0, "stream": stream})
        try:
            s = self.conn()
            s.sendall(http_post("/v1/completions", body.encode()))
            time.sleep(rng.uniform(0.05, 0.5))
            s.close()
        except OSError:
            pass
        self.count("abandoned")

    def garbage(self, rng):
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300))) + b"\r\n\r\n"
        self.raw_exchange("garbage", data, [400, 404, 405, 413, 431, 501, 505])

    def wrong_method(self, rng):
        self.raw_exchange("wrong-method", b"GET /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", [405])

    def idle_connections(self, rng):
        socks = []
        try:
            for _ in range(rng.randrange(5, 30)):
                socks.append(self.conn())
            time.sleep(rng.uniform(0.2, 1.5))
        except OSError:
            pass
        for s in socks:
            s.close()
        self.count("idle")

    # ---- attackers that run for the whole soak (issue 39) ----
    def malformed_flood(self):
        """Malformed requests at 100/s; half are closed at once, half wait for their 4xx."""
        rng = random.Random(self.rng_seed * 100 + 99)
        bad = [b"GET\r\n\r\n", b"GET / HTTP/2.0\r\n\r\n", b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: x\r\n\r\n",
               b"GET /health HTTP/1.1\r\nBad Header\r\n\r\n"]
        while time.monotonic() < self.deadline:
            t0 = time.monotonic()
            try:
                s = self.conn(10)
                s.sendall(rng.choice(bad))
                if rng.random() < 0.5:
                    raw = b""
                    while True:
                        b = s.recv(65536)
                        if not b:
                            break
                        raw += b
                    answers = parse_responses(raw)
                    if not answers:
                        self.fail("malformed: closed without an answer")
                    elif answers[0][0] not in (400, 501, 505):  # 501/505 are the right answers here
                        self.fail(f"malformed: status {answers[0][0]}")
                s.close()
            except (ConnectionResetError, BrokenPipeError):
                pass
            except OSError as e:
                self.fail(f"malformed: {e!r}")
            self.count("malformed")
            time.sleep(max(0.0, 0.01 - (time.monotonic() - t0)))

    def head_only_posts(self):
        """22 POST heads announcing a 10-byte body that never comes, each renewed after 4.5 s."""
        held = []  # (socket, opened)
        while time.monotonic() < self.deadline:
            now = time.monotonic()
            keep = []
            for s, opened in held:
                if now - opened >= 4.5:
                    s.close()
                else:
                    keep.append((s, opened))
            held = keep
            while len(held) < 22:
                try:
                    s = self.conn(10)
                    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n")
                    held.append((s, time.monotonic()))
                    self.count("head-only-post")
                except OSError as e:
                    self.fail(f"head-only post: {e!r}")
                    break
            time.sleep(0.1)
        for s, _ in held:
            s.close()

    def slow_body(self, index):
        """A valid request whose 32 KiB body (JSON after padding) is trickled at 17 KiB/s."""
        rng = random.Random(self.rng_seed * 100 + 90 + index)
        while time.monotonic() < self.deadline:
            prompt = rng.choice(list(self.expected))
            body = json.dumps({"prompt": prompt, "max_tokens": N_TOKENS, "temperature": 0}).encode()
            body = b" " * (32 * 1024 - len(body)) + body
            try:
                s = self.conn(60)
                s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n")
                for at in range(0, len(body), 1740):  # 1740 bytes every 100 ms
                    s.sendall(body[at:at + 1740])
                    time.sleep(0.1)
                raw = b""
                while True:
                    b = s.recv(65536)
                    if not b:
                        break
                    raw += b
                s.close()
            except Exception as e:  # noqa: BLE001 - any failure is a lost request
                self.fail(f"slow-body request lost: {e!r}")
                continue
            answers = parse_responses(raw)
            if not answers:
                self.fail("slow-body request: no answer")
                continue
            status, data = answers[0]
            self.status_check("slow-body", status, [200])
            if status == 200:
                j = json.loads(data)
                self.check_text("slow-body", prompt, j["choices"][0]["text"], j["choices"][0]["finish_reason"])
            self.count("slow-body")

    def worker(self, index):
        rng = random.Random(self.rng_seed * 100 + index)
        valid = [self.valid_plain, self.valid_stream, self.valid_pipelined]
        hostile = [self.deep_json, self.partial_head, self.trickled_head, self.chunked_over_limit, self.huge_length,
                   self.abandoned, self.garbage, self.wrong_method, self.idle_connections]
        while time.monotonic() < self.deadline:
            action = rng.choice(valid) if rng.random() < 0.5 else rng.choice(hostile)
            action(rng)


def http_post(path, body, close=False):
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"{'Connection: close' + chr(13) + chr(10) if close else ''}"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def parse_responses(raw):
    """(status, body) of each complete response in raw; chunked bodies decoded."""
    out, at = [], 0
    while at < len(raw):
        end = raw.find(b"\r\n\r\n", at)
        if end < 0 or not raw.startswith(b"HTTP/", at):
            break
        head = raw[at:end].decode("latin-1").split("\r\n")
        status = int(head[0].split(" ")[1])
        headers = {h.split(":", 1)[0].lower(): h.split(":", 1)[1].strip() for h in head[1:] if ":" in h}
        at = end + 4
        if 100 <= status < 200:
            continue
        if "content-length" in headers:
            n = int(headers["content-length"])
            if at + n > len(raw):
                break
            out.append((status, raw[at:at + n]))
            at += n
        elif headers.get("transfer-encoding") == "chunked":
            body, complete = b"", False
            while True:
                eol = raw.find(b"\r\n", at)
                if eol < 0:
                    break
                n = int(raw[at:eol], 16)
                if eol + 2 + n + 2 > len(raw):
                    break
                body += raw[eol + 2:eol + 2 + n]
                at = eol + 2 + n + 2
                if n == 0:
                    complete = True
                    break
            if not complete:
                break
            out.append((status, body))
        else:
            out.append((status, raw[at:]))
            at = len(raw)
    return out


def greedy_texts(sluice, model):
    expected = {}
    for p in PROMPTS:
        r = subprocess.run([sluice, "run", "-m", model, "-p", p, "-n", str(N_TOKENS), "--temp", "0"],
                           capture_output=True, check=True, timeout=120)
        out = r.stdout[:-1]  # run ends with a newline
        if not out.startswith(p.encode()):
            raise SystemExit(f"serve_soak: sluice run did not echo the prompt {p!r}: {out!r}")
        try:
            expected[p] = out[len(p.encode()):].decode("utf-8")  # run echoes the prompt first
        except UnicodeDecodeError:
            continue  # raw bytes that are not UTF-8: the server's JSON would carry U+FFFD instead
    return expected


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    expected = greedy_texts(args.sluice, args.model)
    if len(expected) < 3:
        print(f"serve_soak: only {len(expected)} prompts have UTF-8 greedy text; need 3", file=sys.stderr)
        return 1
    err = tempfile.NamedTemporaryFile(prefix="serve_soak_", suffix=".err", delete=False)
    server = subprocess.Popen([args.sluice, "serve", "-m", args.model, "--chat-template", "chatml", "--port", "0",
                               "--parallel", "4", "--queue", "16", "-c", "2048", "--max-body", str(MAX_BODY)],
                              stdout=subprocess.DEVNULL, stderr=err)
    port, t_end = None, time.monotonic() + 120
    while port is None and time.monotonic() < t_end and server.poll() is None:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)\n", open(err.name).read())
        port = int(m.group(1)) if m else None
        time.sleep(0.05)
    if port is None:
        print("serve_soak: the server did not start: " + open(err.name).read(), file=sys.stderr)
        server.kill()
        return 1

    soak = Soak(port, expected, args.seconds, args.seed)
    threads = [threading.Thread(target=soak.worker, args=(i,)) for i in range(args.clients)]
    threads += [threading.Thread(target=soak.malformed_flood), threading.Thread(target=soak.head_only_posts)]
    threads += [threading.Thread(target=soak.slow_body, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        if server.poll() is not None:
            soak.fail(f"the server exited during the soak (status {server.returncode})")
            break
        time.sleep(0.2)
    for t in threads:
        t.join(timeout=120)

    if server.poll() is None:
        soak.valid_plain(random.Random(0))  # still serving after all that
        metrics = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        metrics.request("GET", "/metrics")
        print("serve_soak: " + " ".join(l for l in metrics.getresponse().read().decode().split("\n")
                                        if l.startswith("sluice_requests_")))
        t0 = time.monotonic()
        server.send_signal(signal.SIGTERM)
        try:
            rc = server.wait(timeout=10)
            took = time.monotonic() - t0
            print(f"serve_soak: SIGTERM to exit {took:.2f} s")
            if rc != 0:
                soak.fail(f"SIGTERM: exit status {rc} after {took:.1f} s (want 0)")
        except subprocess.TimeoutExpired:
            server.kill()
            soak.fail("SIGTERM: the server did not exit within 10 s")
    print("serve_soak: " + ", ".join(f"{k} {v}" for k, v in sorted(soak.counts.items())))
    log = open(err.name).read()
    os.unlink(err.name)
    if soak.problems:
        for p in soak.problems:
            print("serve_soak: FAIL " + p, file=sys.stderr)
        print("serve_soak: server stderr:\n" + log[-3000:], file=sys.stderr)
        return 1
    print(f"serve_soak: ok ({len(expected)} prompts checked against sluice run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
