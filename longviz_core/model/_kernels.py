"""Compiled loops over one head's attention band (numba: no Python objects, the GIL released, so two threads
work on two heads at once). Band row i, column c = attention of query i to key i - w + c.

- Received attention and pooled block sums (`bands.received_per_head`, `views.pooling`): one pass over the
  band adding whole rows into a shifted accumulator.
- Top-k lists (`views.counts.topk_indices`): numpy needed a full boolean mask and a `flatnonzero` over every
  band entry to find the few candidates of each row (4 % of the entries at k = 20), and a skewed copy of the
  band for the attending lists: 2.2 of the 5.8 ms per head at 1,024 tokens. Here a row (or a key's column)
  visits only the chunks whose maximum reaches its threshold, and the band is never copied.
  Each row's threshold (numpy's SIMD partition) and the sort of the candidate keys (numpy's SIMD sort) stay
  in numpy: both are faster than anything written here.
- Counts (`views.counts`, Algorithm 2): one pass over the owners' lists with a stamp per position and per
  type, so that each owner counts a position or type once over all the selected heads, without building any
  per-owner set or per-type table.

Sort keys, one int64 per candidate: row << (31 + col_bits) | (2^31 - 1 - float bits) << col_bits | column.
For positive float32 the bit pattern orders like the value, so ascending keys mean: row, then value
descending, then column (= position) ascending.
"""
from __future__ import annotations

import os

import numpy as np

from .._disk import cache_folder

# numba caches compiled code next to this file, else in the user's cache folder, and fails on import when
# neither is writable ("no locator available", numba issue #4908: read-only installs on lab servers);
# longviz's own cache folder is writable by design.
os.environ.setdefault("NUMBA_CACHE_DIR", str(cache_folder("numba")))

import numba  # noqa: E402  (reads NUMBA_CACHE_DIR when first imported)

_MAX_BITS = 0x7FFFFFFF


@numba.njit(nogil=True, cache=True, boundscheck=False)
def column_sums(band, w, out):
    """out[j] = attention key j receives from all queries through the band, (n,). Accumulated in float64,
    which also tells the compiler the accumulator and the band never overlap, so the row adds vectorise."""
    n, width = band.shape
    acc = np.zeros(n + 2 * w, np.float64)  # key j at j + w
    for i in range(n):
        row = band[i]
        for c in range(width):
            acc[i + c] += row[c]
    for j in range(n):
        out[j] = acc[j + w]


@numba.njit(nogil=True, cache=True, boundscheck=False)
def block_sums(band, w, block, out):
    """out[a, b] = attention from query block a to key block b through the band (blocks of `block` tokens),
    (g, g) float64. A query block's rows are added into an accumulator shifted by one column per row, so that
    acc[x] holds the block's attention to key a * block + x - w."""
    n, width = band.shape
    acc = np.empty(width + block - 1, np.float64)
    out[:] = 0.0
    for a in range(out.shape[0]):
        first = a * block
        acc[:] = 0.0
        for t in range(min(block, n - first)):
            row = band[first + t]
            for c in range(width):
                acc[c + t] += row[c]
        for x in range(max(0, w - first), min(width + block - 1, n + w - first)):  # keys inside the document
            out[a, (first + x - w) // block] += acc[x]


@numba.njit(nogil=True, cache=True, boundscheck=False)
def chunk_maxima(band, chunks, out):
    """out[i, c] = max of band[i, c::chunks]: maxima of interleaved column chunks, (n, chunks)."""
    n, width = band.shape
    for i in range(n):
        vals, row = band[i], out[i]
        for c in range(chunks):
            row[c] = vals[c]
        start = chunks
        while start < width:
            for c in range(min(chunks, width - start)):
                row[c] = max(row[c], vals[start + c])
            start += chunks


@numba.njit(nogil=True, cache=True, boundscheck=False)
def collect(band, bits, maxima, threshold, col_bits, keys, counts):
    """Sort keys of every entry >= its row's threshold, row after row, into keys[:m]; counts[i] = row i's
    candidates; returns m. Only chunks whose maximum reaches the threshold are read. `keys` holds n x width."""
    n, width = band.shape
    chunks = maxima.shape[1]
    full = width // chunks  # entries c + t * chunks exist for every chunk c when t < full
    tail = width - full * chunks  # chunks c < tail have one entry more
    passing = np.empty(chunks, np.int64)
    m = 0
    for i in range(n):
        vals, vbits, thr, start = band[i], bits[i], threshold[i], m
        s = 0
        for c in range(chunks):  # branch-free: the passing chunks are a random ~30 % of them
            passing[s] = c
            s += maxima[i, c] >= thr
        row_key = np.int64(i) << (31 + col_bits)
        for q in range(s):
            c = passing[q]
            for t in range(full + (c < tail)):
                col = c + t * chunks
                keys[m] = row_key | ((_MAX_BITS - np.int64(vbits[col])) << col_bits) | col
                m += vals[col] >= thr
        counts[i] = m - start
    return m


@numba.njit(nogil=True, cache=True, boundscheck=False)
def first_k(keys, counts, col_bits, w, extra, extra_bits, extra_pos, out):
    """out[i] = row i's first k band candidates (`keys` sorted) merged with its `extra` entries (value
    extra[i, e], float bits extra_bits[i, e], at position extra_pos[e]) by value descending, then position
    ascending; positive values only; -1 after the last. Band column c of row i is position i - w + c."""
    n, k = out.shape
    g = extra.shape[1]
    col_mask = (np.int64(1) << col_bits) - 1
    order = np.empty(g, np.int64)  # row i's positive extra entries, best first
    inverted = np.empty(g, np.int64)
    start, band_inverted, pos = 0, np.int64(0), np.int64(0)
    for i in range(n):
        s = 0
        for e in range(g):
            if extra[i, e] > 0:
                inv, j = _MAX_BITS - np.int64(extra_bits[i, e]), s
                while j > 0 and _before(inv, extra_pos[e], inverted[j - 1], extra_pos[order[j - 1]]):
                    order[j], inverted[j] = order[j - 1], inverted[j - 1]
                    j -= 1
                order[j], inverted[j] = e, inv
                s += 1
        a, b, stop = start, 0, start + counts[i]
        for r in range(k):
            in_band, in_extra = a < stop, b < s
            if in_band:
                key = keys[a]
                band_inverted, pos = (key >> col_bits) & _MAX_BITS, i - w + (key & col_mask)
            if in_extra and (not in_band or _before(inverted[b], extra_pos[order[b]], band_inverted, pos)):
                out[i, r] = extra_pos[order[b]]
                b += 1
            elif in_band:
                out[i, r] = pos
                a += 1
            else:
                out[i, r] = -1
        start += counts[i]


@numba.njit(nogil=True, cache=True, inline="always")
def _before(inverted, pos, other_inverted, other_pos):
    """(value, position) sorts before the other: larger value (smaller inverted bits), then lower position."""
    return inverted < other_inverted or (inverted == other_inverted and pos < other_pos)


@numba.njit(nogil=True, cache=True, boundscheck=False)
def block_maxima(band, block, out):
    """out[b, x] = max over t < block with 0 <= x - t < width of band[b * block + t, x - t]: for key
    j = b * block + x - w, the largest attention it gets from the queries b * block ... b * block + block - 1.
    Row after row of the band, shifted by t: contiguous and vectorised, with no transposed copy."""
    n, width = band.shape
    for b in range(out.shape[0]):
        acc = out[b]
        acc[:] = 0.0
        for t in range(min(block, n - b * block)):
            row = band[b * block + t]
            for col in range(width):
                acc[col + t] = max(acc[col + t], row[col])


@numba.njit(nogil=True, cache=True, boundscheck=False)
def key_maxima(blocks, block, w, out):
    """out[j, m] = key j's maximum over its m-th block of queries (`block_maxima`), 0 past the document."""
    n, chunks = out.shape
    nb, span = blocks.shape
    for j in range(n):
        first = (j - w) // block
        for m in range(chunks):
            b, x = first + m, j + w - (first + m) * block
            out[j, m] = blocks[b, x] if 0 <= b < nb and 0 <= x < span else 0.0


@numba.njit(nogil=True, cache=True, boundscheck=False)
def collect_keys(band, bits, blocks, block, w, threshold, col_bits, keys, counts):
    """`collect` for the band's columns, read in place: sort keys (key j, value, c' = query - j + w) of
    every entry >= its key's threshold, into keys[:m] in no particular order; counts[j] = key j's candidates.
    A block of queries is read for key j only where `blocks` says it reaches j's threshold."""
    n, width = band.shape
    nb, span = blocks.shape
    counts[:] = 0
    passing = np.empty(span, np.int64)
    m = 0
    for b in range(nb):
        first, acc = b * block, blocks[b]
        s = 0
        for x in range(max(0, w - first), min(span, n + w - first)):  # keys inside the document
            passing[s] = x
            s += acc[x] >= threshold[first + x - w]
        for q in range(s):
            x = passing[q]
            j = first + x - w
            thr, row_key, start = threshold[j], np.int64(j) << (31 + col_bits), m
            for t in range(max(0, x - width + 1), min(block, n - first, x + 1)):
                col = x - t
                keys[m] = row_key | ((_MAX_BITS - np.int64(bits[first + t, col])) << col_bits) | (2 * w - col)
                m += band[first + t, col] >= thr
            counts[j] += m - start
    return m


@numba.njit(nogil=True, cache=True, boundscheck=False)
def count_sets(lists, layers, heads, k, owners, pos_bin, type_bin, per_head, lo, hi, positions, types):
    """Algorithm 2 for the owners lo <= i < hi with owners[i] true: positions[p] += 1 for every owner whose
    lists[i, layers[a], heads[b]] (owner-major: (n, layers, heads, k)), first k entries, contain p, and
    types[t] += 1 for every owner whose lists contain a position of type t; with `per_head`, once per (owner,
    head) list instead. -1 ends a list.
    Entry p is counted in bin pos_bin[p] and type_bin[p]: a masked position goes to a last, dropped bin of each.
    A stamp per bin holds the last owner (or owner and head) that counted it, so a position or type met again
    in the same set is not counted twice: owners x heads x k steps, no per-owner set is ever built. Branch-free
    (the stamp tests are unpredictable): the stamp comparison is added to the count."""
    pos_stamp = np.full(positions.shape[0], -1, np.int64)
    type_stamp = np.full(types.shape[0], -1, np.int64)
    scope = layers.shape[0] * heads.shape[0]
    for i in range(lo, hi):
        if not owners[i]:
            continue
        s = 0
        for a in layers:
            for b in heads:
                stamp = i * scope + s if per_head else np.int64(i)
                s += 1
                row = lists[i, a, b]
                for r in range(k):
                    p = row[r]
                    if p < 0:
                        break
                    x = pos_bin[p]
                    positions[x] += pos_stamp[x] != stamp
                    pos_stamp[x] = stamp
                    t = type_bin[p]
                    types[t] += type_stamp[t] != stamp
                    type_stamp[t] = stamp
