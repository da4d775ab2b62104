#!/usr/bin/env python3
"""Small GGUF fuzz seeds: the header of each reference model without its vocabulary arrays.

scripts/fuzz seeds libFuzzer with these (a few KiB each instead of the tokenizer-sized
headers), so an execution takes microseconds and mutations reach the tensor directory and the
model checks. Usage: fuzz_seeds.py OUT_DIR MODEL.gguf...
"""
import os
import struct
import sys

SCALARS = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # type -> bytes
STRING, ARRAY = 8, 9
DROP = ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type", "tokenizer.ggml.merges")


def skip_value(b, off, vtype):
    if vtype in SCALARS:
        return off + SCALARS[vtype]
    if vtype == STRING:
        (n,) = struct.unpack_from("<Q", b, off)
        return off + 8 + n
    if vtype == ARRAY:
        etype, n = struct.unpack_from("<IQ", b, off)
        off += 12
        if etype in SCALARS:
            return off + n * SCALARS[etype]
        for _ in range(n):
            off = skip_value(b, off, etype)
        return off
    raise ValueError(f"bad type {vtype}")


def shrink(b):
    magic, version, n_tensors, n_kv = struct.unpack_from("<4sIQQ", b, 0)
    if magic != b"GGUF" or version < 2:
        return None
    off, kvs, alignment = 24, [], 32
    for _ in range(n_kv):
        start = off
        (klen,) = struct.unpack_from("<Q", b, off)
        key = b[off + 8 : off + 8 + klen].decode()
        off += 8 + klen
        (vtype,) = struct.unpack_from("<I", b, off)
        if key == "general.alignment":
            (alignment,) = struct.unpack_from("<I", b, off + 4)
        off = skip_value(b, off + 4, vtype)
        if key not in DROP:
            kvs.append(b[start:off])
    tstart = off
    for _ in range(n_tensors):
        (nlen,) = struct.unpack_from("<Q", b, off)
        off += 8 + nlen
        (n_dims,) = struct.unpack_from("<I", b, off)
        off += 4 + 8 * n_dims + 4 + 8
    out = struct.pack("<4sIQQ", magic, version, n_tensors, len(kvs)) + b"".join(kvs) + b[tstart:off]
    out += b"\0" * (-len(out) % alignment)
    # Odd length: the fuzz target serves it as the head of a large file (see fuzz_gguf.cpp), so
    # the tensor ranges fit and parsing goes on to the model checks.
    return out + b"\0"


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    for path in sys.argv[2:]:
        with open(path, "rb") as f:
            head = f.read(64 << 20)
        try:
            seed = shrink(head)
        except (struct.error, ValueError, UnicodeDecodeError):
            seed = None
        if seed:
            with open(os.path.join(out_dir, os.path.basename(path) + ".small"), "wb") as f:
                f.write(seed)


if __name__ == "__main__":
    main()
