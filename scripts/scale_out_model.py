#!/usr/bin/env python3
"""Decode tok/s against the number of nodes N for expert parallelism (docs/scale-out.md).

Per token, every node computes the dense part (attention, router, shared expert, output head)
redundantly, its share of the routed experts, reads its share of the misses from its own disk and
takes part in one allgather of the per-slot expert outputs per MoE layer:

  t(N) = t_dense + t_routed / N + (1 - h(N)) * B_routed / (N * D) + L * (a * (N - 1) + (N - 1) / N * K * E * 4 / W)

  t_dense   dense bytes per token / memory bandwidth M (CPU decode is bandwidth-bound)
  t_routed  routed expert bytes per token (K experts x L layers) / M, split N ways
  h(N)      expert cache hit rate with N times one node's RAM for experts; h = min(1, N * R / X) is
            the uniform-routing bound (real routing is skewed and hits more)
  D         disk rate per node; W link bandwidth; a per-message latency of one allgather step
            (ring: N - 1 steps); K experts per token, E = n_embd, L MoE layers

Usage: scripts/scale_out_model.py            (prints the Kimi K2 / K3 projection table)
"""

import sys

GB = 1e9


def tok_s(n, m):
    h = min(1.0, n * m["ram_for_experts"] / m["expert_bytes"])
    dense = m["dense_bytes"] / m["mem_bw"]
    routed = m["routed_bytes"] / m["mem_bw"] / n
    io = (1 - h) * m["routed_bytes"] / (n * m["disk"])
    comm = 0.0
    if n > 1:
        comm = m["layers"] * (m["latency"] * (n - 1) + (n - 1) / n * m["k"] * m["n_embd"] * 4 / m["link"])
    t = dense + routed + io + comm
    return 1 / t, h, dense, routed, io, comm


def model(name, total_expert_bytes, routed_per_token, dense_per_token, layers, k, n_embd):
    return {"name": name, "expert_bytes": total_expert_bytes, "routed_bytes": routed_per_token,
            "dense_bytes": dense_per_token, "layers": layers, "k": k, "n_embd": n_embd}


def main():
    # Kimi K2 at Q4_K_M-like 4.5 bits: 384 experts x 60 MoE layers of 3 x 7168 x 2048 weights
    # (24.8 MB each), 8 used per token; ~11 B non-routed weights active per token (6.2 GB).
    expert = 3 * 7168 * 2048 * 4.5 / 8
    k2 = model("Kimi K2 (Q4_K_M)", 384 * 60 * expert, 8 * 60 * expert, 6.2 * GB, 60, 8, 7168)
    # Kimi K3 (synth/synth_preset.cpp, from the published config): 896 experts x 92 MoE layers of
    # 3 x 3584 x 3072 weights in MXFP4 (4.25 bits, 17.5 MB), 16 used per token; experts work in
    # the 3584-wide latent space, which is what the exchange moves. Non-routed bytes per token
    # are not measured here: 10 GB is an assumption (93 layers, 2 shared experts, KDA + MLA).
    expert3 = 3 * 3584 * 3072 * 4.25 / 8
    k3 = model("Kimi K3 (MXFP4)", 896 * 92 * expert3, 16 * 92 * expert3, 10 * GB, 92, 16, 3584)
    node = {"mem_bw": 100 * GB, "disk": 7 * GB, "ram_for_experts": 96 * GB}
    print("| model | link | N | hit | dense ms | routed ms | io ms | comm ms | tok/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for m in (k2, k3):
        for gbit, lat in ((25, 20e-6), (100, 10e-6)):
            for n in (1, 2, 3, 4, 6, 8):
                p = dict(m, **node, link=gbit / 8 * GB, latency=lat)
                r, h, d, ro, io, c = tok_s(n, p)
                print(f"| {m['name']} | {gbit} Gb/s | {n} | {h:.2f} | {d*1e3:.0f} | {ro*1e3:.0f} | {io*1e3:.0f} | {c*1e3:.1f} | {r:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
