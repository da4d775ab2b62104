"""Python replica of cache/cache_simulator.cpp (simulate_sequence / evaluate_policy), for studying
policies and foresight bounds offline; checked to reproduce `sluice tune`'s LRU and Belady figures."""
import math
import os

TRACES = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', '..', 'shared', 'traces')
FLAME = os.path.join(TRACES, 'flame-moe-290m.trace')
MIXTRAL = os.path.join(TRACES, 'mixtral-8x7b.trace')


def load(path):
    hdr = {}
    seqs = {}
    for line in open(path):
        if line.startswith('#'):
            for kv in line[1:].split():
                if '=' in kv:
                    k, v = kv.split('=', 1)
                    hdr[k] = v
            continue
        r = list(map(int, line.split()))
        s, t, l = r[0], r[1], r[2]
        seqs.setdefault(s, {}).setdefault(t, {})[l] = r[3:]
    L, E, K = int(hdr['layers']), int(hdr['experts']), int(hdr['topk'])
    out = []
    for s in sorted(seqs):
        toks = seqs[s]
        out.append([[toks[t][l] for l in range(L)] for t in sorted(toks)])
    return out, L, E, K


class Policy:
    def reset(self, L, E, K, C): pass
    def on_token(self): pass
    def on_access(self, key, hit): pass
    def on_insert(self, key): pass
    def on_evict(self, key): pass
    def choose_victim(self, cands, incoming): raise NotImplementedError


def simulate_sequence(seq, L, E, K, policy, C):
    policy.reset(L, E, K, C)
    resident = set()
    hits = misses = 0
    for t, tok in enumerate(seq):
        policy.on_token()
        for l in range(L):
            step = tok[l]
            pinned = set(l * E + e for e in step if (l * E + e) in resident)
            for e in step:
                k = l * E + e
                if k in resident:
                    hits += 1
                    policy.on_access(k, True)
                    continue
                misses += 1
                if len(resident) >= C:
                    cands = [x for x in resident if x not in pinned]
                    v = policy.choose_victim(cands, k)
                    victim = cands[v]
                    resident.discard(victim)
                    policy.on_evict(victim)
                resident.add(k)
                pinned.add(k)
                policy.on_insert(k)
                policy.on_access(k, False)
    return hits, misses


def evaluate(seqs, L, E, K, make_policy, C):
    """make_policy(train_seqs, test_index) -> Policy; train_seqs are the OTHER sequences."""
    H = M = 0
    per = []
    for s in range(len(seqs)):
        others = [seqs[j] for j in range(len(seqs)) if j != s]
        p = make_policy(others, seqs[s])
        h, m = simulate_sequence(seqs[s], L, E, K, p, C)
        per.append(h / (h + m))
        H += h
        M += m
    return H / (H + M), per


def budget(L, E, frac=0.25):
    return int(math.floor(frac * L * E + 1e-9))


# ---------------------------------------------------------------- baselines
class LRU(Policy):
    def reset(self, L, E, K, C):
        self.last = {}
        self.tick = 0
    def on_access(self, k, hit):
        self.tick += 1; self.last[k] = self.tick
    def on_insert(self, k):
        self.tick += 1; self.last[k] = self.tick
    def choose_victim(self, cands, inc):
        last = self.last
        return min(range(len(cands)), key=lambda i: last[cands[i]])


class Belady(Policy):
    """future = the test sequence (clairvoyant); window=None: full Belady; else lookahead N tokens."""
    def __init__(self, seq, window=None):
        self.seq = seq
        self.window = window
    def reset(self, L, E, K, C):
        self.L, self.E, self.K = L, E, K
        fut = []
        for tok in self.seq:
            for l in range(L):
                for e in tok[l]:
                    fut.append(l * E + e)
        self.fut = fut
        self.occ = {}
        for p, k in enumerate(fut):
            self.occ.setdefault(k, []).append(p)
        self.ptr = {k: 0 for k in self.occ}
        self.pos = 0
        self.tick = 0
        self.last = {}
        self.apt = L * K
    def on_access(self, k, hit):
        assert self.fut[self.pos] == k
        self.pos += 1
        self.tick += 1
        self.last[k] = self.tick
    def nextuse(self, k):
        o = self.occ.get(k, [])
        i = self.ptr.get(k, 0)
        while i < len(o) and o[i] < self.pos:
            i += 1
        if o:
            self.ptr[k] = i
        return o[i] if i < len(o) else float('inf')
    def choose_victim(self, cands, inc):
        hor = float('inf') if self.window is None else (self.pos // self.apt + 1 + self.window) * self.apt
        best, far, unseen = 0, -1, False
        for i, k in enumerate(cands):
            n = self.nextuse(k)
            if self.window is not None and n >= hor:
                if not unseen or self.last.get(k, 0) < self.last.get(cands[best], 0):
                    best = i
                unseen = True
                continue
            if unseen:
                continue
            if n > far:
                far, best = n, i
        return best
