"""NBP: naive-Bayes predicted-next-use eviction.

Learned leave-one-sequence-out from the training sequences (the other ones):
  W[lp][l][i][j]  within-token log-likelihood ratio  log P(j at l | i at lp, same token) / P(j at l), lp < l
  X[lp][l][i][j]  cross-token LLR  log P(j at l, token t+1 | i at lp, token t) / P(j at l)
  R[g]            recency LLR: logit P(used at a visit | last used g tokens before) - logit(K/E)
Online per sequence: last-use token, use counts.
"""
import math
from sim import Policy

GMAX = 32


def logit(p):
    return math.log(p / (1 - p))


class Model:
    def __init__(self, train, L, E, K, alpha=4.0):
        self.L, self.E, self.K = L, E, K
        n_tok = 0
        U = [[0] * E for _ in range(L)]
        Wc = [[None] * L for _ in range(L)]
        Xc = [[None] * L for _ in range(L)]
        for lp in range(L):
            for l in range(L):
                if lp < l:
                    Wc[lp][l] = [[0] * E for _ in range(E)]
                Xc[lp][l] = [[0] * E for _ in range(E)]
        Un = [[0] * E for _ in range(L)]  # source counts for cross-token (tokens having a successor)
        n_pair = 0
        trials = [0.0] * (GMAX + 1)
        hits = [0.0] * (GMAX + 1)
        for sq in train:
            last = [[-1] * E for _ in range(L)]
            for t, tok in enumerate(sq):
                n_tok += 1
                for l in range(L):
                    for e in tok[l]:
                        U[l][e] += 1
                    s = set(tok[l])
                    for e in range(E):
                        g = GMAX if last[l][e] < 0 else min(t - last[l][e], GMAX)
                        trials[g] += 1
                        if e in s:
                            hits[g] += 1
                    for e in tok[l]:
                        last[l][e] = t
                for lp in range(L):
                    for l in range(lp + 1, L):
                        M = Wc[lp][l]
                        for i in tok[lp]:
                            Mi = M[i]
                            for j in tok[l]:
                                Mi[j] += 1
                if t + 1 < len(sq):
                    n_pair += 1
                    nxt = sq[t + 1]
                    for lp in range(L):
                        for i in tok[lp]:
                            Un[lp][i] += 1
                        for l in range(L):
                            M = Xc[lp][l]
                            for i in tok[lp]:
                                Mi = M[i]
                                for j in nxt[l]:
                                    Mi[j] += 1
        base = K / E
        self.base = base
        pj = [[(U[l][j] + alpha * base) / (n_tok + alpha) for j in range(E)] for l in range(L)]
        self.W = [[None] * L for _ in range(L)]
        self.X = [[None] * L for _ in range(L)]
        for lp in range(L):
            for l in range(L):
                if lp < l:
                    self.W[lp][l] = [[math.log((Wc[lp][l][i][j] + alpha * pj[l][j]) / (U[lp][i] + alpha) / pj[l][j])
                                      for j in range(E)] for i in range(E)]
                self.X[lp][l] = [[math.log((Xc[lp][l][i][j] + alpha * pj[l][j]) / (Un[lp][i] + alpha) / pj[l][j])
                                  for j in range(E)] for i in range(E)]
        lb = logit(base)
        self.R = [logit((hits[g] + 4 * base) / (trials[g] + 4)) - lb for g in range(GMAX + 1)]
        self.rawR = [(hits[g] + 4 * base) / (trials[g] + 4) for g in range(GMAX + 1)]


class NBP(Policy):
    """a: weight of within-token evidence; b: weight of cross-token evidence; r: recency weight;
    f: weight of log relative frequency in the sequence so far; xsrc: which previous-token layers
    feed cross-token evidence ('all' or 'same')."""

    def __init__(self, model, a=1.0, b=1.0, r=1.0, f=0.0, score='ent', xsrc='all', hl=0):
        self.hl = hl  # half-life (tokens) of the frequency counts; 0 = no decay
        self.m = model
        self.a, self.b, self.r, self.f = a, b, r, f
        self.score = score
        self.xsrc = xsrc

    def reset(self, L, E, K, C):
        self.L, self.E, self.K = L, E, K
        self.t = -1
        self.c = 0
        self.tick = 0
        self.touch = [0] * (L * E)
        self.last = [-1] * (L * E)
        self.cnt = [0] * (L * E)
        self.lcnt = [0] * L
        self.accA = [[0.0] * E for _ in range(L)]
        self.accBcur = [[0.0] * E for _ in range(L)]
        self.accBnext = [[0.0] * E for _ in range(L)]
        self.seen = set()
        self.lb = logit(self.m.base)
        self.tails = {}

    def on_token(self):
        self.t += 1
        L, E = self.L, self.E
        if self.hl:
            dec = 0.5 ** (1.0 / self.hl)
            self.cnt = [x * dec for x in self.cnt]
            self.lcnt = [x * dec for x in self.lcnt]
        self.accBcur = self.accBnext
        self.accBnext = [[0.0] * E for _ in range(L)]
        self.accA = [[0.0] * E for _ in range(L)]
        self.seen = set()

    def _learn(self, k):
        if k in self.seen:
            return
        self.seen.add(k)
        L, E = self.L, self.E
        l, e = divmod(k, E)
        W, X = self.m.W, self.m.X
        for l2 in range(l + 1, L):
            row = W[l][l2][e]
            acc = self.accA[l2]
            self.accA[l2] = [x + y for x, y in zip(acc, row)]
        targets = range(L) if self.xsrc == 'all' else [l]
        for l2 in targets:
            row = X[l][l2][e]
            acc = self.accBnext[l2]
            self.accBnext[l2] = [x + y for x, y in zip(acc, row)]

    def on_access(self, k, hit):
        self.c = k // self.E
        self._learn(k)
        self.tick += 1
        self.touch[k] = self.tick
        if self.last[k] != self.t:
            self.last[k] = self.t
            self.cnt[k] += 1
            self.lcnt[self.c] += 1

    def on_insert(self, k):
        self.tick += 1
        self.touch[k] = self.tick

    def prob(self, k):
        E, L = self.E, self.L
        l, e = divmod(k, E)
        c = self.c
        if l > c:
            tn = self.t
            z = self.a * self.accA[l][e] + self.b * self.accBcur[l][e]
            d = l - c
        else:
            tn = self.t + 1
            z = self.b * self.accBnext[l][e]
            d = l + L - c
        g = GMAX if self.last[k] < 0 else min(tn - self.last[k], GMAX)
        z += self.r * self.m.R[g]
        if self.f:
            mean = self.lcnt[l] / E
            z += self.f * math.log((self.cnt[k] + 1) / (mean + 1))
        z += self.lb
        if z > 30:
            z = 30
        p = 1 / (1 + math.exp(-z))
        if self.score == 'ent3':
            Fq = 0.0
            if self.f:
                Fq = round(self.f * math.log((self.cnt[k] + 1) / (mean + 1)), 1)
            key = (g, Fq)
            tail = self.tails.get(key)
            if tail is None:
                # expected number of further visits (after the next one) until use, truncated at H
                S, tail, gg = 1.0, 0.0, g
                for n in range(64):
                    gg = min(gg + 1, GMAX)
                    pn = 1 / (1 + math.exp(-(self.lb + self.r * self.m.R[gg] + Fq)))
                    tail += S
                    S *= (1 - pn)
                tail += S / pn
                self.tails[key] = tail
            return p, d, 1.0 / tail
        if self.score == 'ent2':
            g2 = min(g + 1, GMAX)
            z2 = self.lb + self.r * self.m.R[g2]
            if self.f:
                z2 += self.f * math.log((self.cnt[k] + 1) / (mean + 1))
            p2 = 1 / (1 + math.exp(-z2))
            return p, d, p2
        return p, d, p

    def choose_victim(self, cands, inc):
        self.c = inc // self.E
        self._learn(inc)
        L = self.L
        best, bs, bt = 0, None, None
        for i, k in enumerate(cands):
            p, d, p2 = self.prob(k)
            if self.score == 'ent':
                s = d + L * (1 - p) / p
            elif self.score in ('ent2', 'ent3'):
                s = d + L * (1 - p) / p2
            else:  # 'p': lowest probability of use at next visit
                s = -p
            tt = self.touch[k]
            if bs is None or s > bs or (s == bs and tt < bt):
                best, bs, bt = i, s, tt
        return best


class LookNBP(NBP):
    """Clairvoyant bound: perfect knowledge of the rest of the current token and the next `window`
    tokens; candidates not used within it are ranked by the NBP score (instead of LRU)."""

    def __init__(self, model, seq, window, **kw):
        super().__init__(model, **kw)
        from sim import Belady
        self.bel = Belady(seq, window)
        self.window = window

    def reset(self, L, E, K, C):
        super().reset(L, E, K, C)
        self.bel.reset(L, E, K, C)

    def on_access(self, k, hit):
        super().on_access(k, hit)
        self.bel.on_access(k, hit)

    def choose_victim(self, cands, inc):
        b = self.bel
        hor = (b.pos // b.apt + 1 + self.window) * b.apt
        unseen = [k for k in cands if b.nextuse(k) >= hor]
        if not unseen:
            return max(range(len(cands)), key=lambda i: b.nextuse(cands[i]))
        j = super().choose_victim(unseen, inc)
        return cands.index(unseen[j])
