"""Runs every policy tried, FLAME-MoE and Mixtral at 25% budget, leave-one-sequence-out.
Usage: nice -n 19 python3 scripts/policy_study/final.py (about 5 minutes; the figures quoted in the
README's `sluice tune` paragraph and in issue #8 come from it)."""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sim import *
from nbp import Model, NBP, LookNBP
import time

BEST = dict(a=0, b=1, f=0.5, score='ent2')   # recommended policy "NBP" (see README in report)
POLICIES = [
    ('lru', None),
    ('nbp recency only, E=d+L(1-p)/p', dict(a=0, b=0, f=0, score='ent')),
    ('nbp within+cross, one p (E=d+L(1-p)/p)', dict(a=1, b=1, f=0, score='ent')),
    ('nbp within+cross, lowest p1', dict(a=1, b=1, f=0, score='p')),
    ('nbp cross only, ent2', dict(a=0, b=1, f=0, score='ent2')),
    ('nbp within+cross, ent2', dict(a=1, b=1, f=0, score='ent2')),
    ('nbp recency+freq(0.5), ent2', dict(a=0, b=0, f=0.5, score='ent2')),
    ('nbp within+cross+freq(0.5), ent2', dict(a=1, b=1, f=0.5, score='ent2')),
    ('NBP BEST: cross+freq(0.5), ent2', BEST),
    ('nbp cross+freq(0.25), ent2', dict(a=0, b=1, f=0.25, score='ent2')),
    ('nbp within(0.5)+cross+freq(0.25), ent2', dict(a=0.5, b=1, f=0.25, score='ent2')),
    ('nbp cross+freq(0.5,half-life 64), ent2', dict(a=0, b=1, f=0.5, score='ent2', hl=64)),
    ('nbp cross+freq(0.5), ent3 (survival)', dict(a=0, b=1, f=0.5, score='ent3')),
]
for path in (FLAME, MIXTRAL):
    seqs, L, E, K = load(path); C = budget(L, E)
    print('==', path.split('/')[-1], 'C =', C, flush=True)
    models = {}
    def model(tr, te):
        if id(te) not in models: models[id(te)] = Model(tr, L, E, K)
        return models[id(te)]
    for name, kw in POLICIES:
        t0 = time.time()
        if kw is None:
            f = lambda tr, te: LRU()
        else:
            f = lambda tr, te, kw=kw: NBP(model(tr, te), **kw)
        hr, per = evaluate(seqs, L, E, K, f, C)
        print('  %-45s %.4f  per-seq %s  (%.0fs)' % (name, hr, ' '.join('%.3f' % x for x in per), time.time() - t0), flush=True)
    print('  -- clairvoyant bounds', flush=True)
    print('  %-45s %.4f' % ('belady', evaluate(seqs, L, E, K, lambda tr, te: Belady(te), C)[0]), flush=True)
    for N in (0, 1, 2):
        print('  %-45s %.4f' % ('lookahead %d, LRU fallback' % N, evaluate(seqs, L, E, K, lambda tr, te: Belady(te, N), C)[0]), flush=True)
        print('  %-45s %.4f' % ('lookahead %d, NBP-BEST fallback' % N,
              evaluate(seqs, L, E, K, lambda tr, te: LookNBP(model(tr, te), te, N, **BEST), C)[0]), flush=True)
