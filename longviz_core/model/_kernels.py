"""Compiled loops over one head's attention: its band, or a streamed layer's rows (numba: no Python objects,
the GIL released, so two threads work on two heads at once). Band row i, column c = attention of query i to key
i - w + c.

- Received attention and pooled block sums (`bands.received_per_head`, `views.pooling`): one pass over the
  band adding whole rows into a shifted accumulator.
- Top-k lists (`views.counts.topk_indices`): numpy needed a full boolean mask and a `flatnonzero` over every
  band entry to find the few candidates of each row (4 % of the entries at k = 20), and a skewed copy of the
  band for the attending lists: 2.2 of the 5.8 ms per head at 1,024 tokens. Here a row (or a key's column)
  visits only the chunks whose maximum reaches its threshold, and the band is never copied.
  Each row's threshold (numpy's SIMD partition) and the sort of the candidate keys (numpy's SIMD sort) stay
  in numpy: both are faster than anything written here.
- A band as wide as three k or less (ModernBERT's 129 columns at k = 64): every entry is a candidate, each row's
  (`row_keys`) or column's (`column_keys`) keys sorted on their own by numpy.
- A full layer's views (`streamed.StreamedLayer.summary`) in one pass over its rows: each chunk of exact softmax
  rows read once for the sums and the rows' and keys' chunk maxima (`stream_rows`), then the entries at or above
  the thresholds (`band_candidates`), sorted, into the rows' lists (`first_of_rows`) and merged into each key's
  best so far (`merge_keys`); a block-sparse layer's sums (`grouped_sums`) and lists (`row_maxima`,
  `row_candidates`).
- Counts (`views.counts`, Algorithm 2): one pass over the owners' lists with a stamp per position and per
  type, so that each owner counts a position or type once over all the selected heads, without building any
  per-owner set or per-type table.

Sort keys, one int64 per candidate: row << (31 + col_bits) | (2^31 - 1 - float bits) << col_bits | column.
For positive float32 the bit pattern orders like the value, so ascending keys mean: row, then value
descending, then column (= position) ascending.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Callable

import numpy as np

from .._disk import cache_folder

_MAX_BITS = 0x7FFFFFFF
_LAST = np.iinfo(np.int64).max  # a sort key after every candidate's


# ------------------------------------------------------------------------------- compiled on first use
# numba caches compiled code next to this file, else in the user's cache folder, and fails when neither is
# writable ("no locator available", numba issue #4908: read-only installs on lab servers); longviz's own cache
# folder ($LONGVIZ_CACHE_DIR/numba) is writable by design. numba fixes a function's cache folder when the
# function is decorated, so the loops are decorated at their first call, not at import: by then a hosted
# configuration's cache_dir (which reaches the core as LONGVIZ_CACHE_DIR) is in the environment, whenever
# this module was imported. An explicit NUMBA_CACHE_DIR wins.
_SOURCES: dict[str, tuple[Callable, dict]] = {}
_COMPILED: dict[str, Callable] = {}
_LOCK = threading.Lock()


def _loop(**options):
    """Register a loop for numba.njit(nogil=True, cache=True, **options), applied on first use (`compiled`)."""
    def register(fn):
        _SOURCES[fn.__name__] = (fn, options)
        return _Deferred(fn.__name__)
    return register


class _Deferred:
    """A loop's module attribute until the first call of any loop; then the attribute is numba's dispatcher."""

    def __init__(self, name: str):
        self.name = name

    def __call__(self, *args):
        return compiled()[self.name](*args)


def compiled() -> dict[str, Callable]:
    """The loops as numba dispatchers, caching under $NUMBA_CACHE_DIR, else $LONGVIZ_CACHE_DIR/numba as it is
    now. Decorates every loop once per process and puts the dispatchers in this module's namespace, where the
    loops that call one another find them when they compile."""
    with _LOCK:
        if not _COMPILED:
            os.environ.setdefault("NUMBA_CACHE_DIR", str(cache_folder("numba")))
            import numba
            from numba.core import config

            config.reload_config()  # numba may have been imported (and read the environment) before
            for name, (fn, options) in _SOURCES.items():
                _COMPILED[name] = numba.njit(nogil=True, cache=True, **options)(fn)
            globals().update(_COMPILED)
    return _COMPILED


@_loop(boundscheck=False)
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


@_loop(boundscheck=False)
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


@_loop(boundscheck=False)
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


@_loop(boundscheck=False)
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


@_loop(boundscheck=False)
def first_k(keys, counts, stride, col_bits, w, extra, extra_bits, extra_pos, out):
    """out[i] = row i's first k band candidates (`keys` sorted; row i's counts[i] of them from i * stride, or
    after the previous row's when stride is 0) merged with its `extra` entries (value extra[i, e], float bits
    extra_bits[i, e], at position extra_pos[i, e]) by value descending, then position ascending; positive values
    only; -1 after the last. Band column c of row i is position i - w + c."""
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
                while j > 0 and _before(inv, extra_pos[i, e], inverted[j - 1], extra_pos[i, order[j - 1]]):
                    order[j], inverted[j] = order[j - 1], inverted[j - 1]
                    j -= 1
                order[j], inverted[j] = e, inv
                s += 1
        if stride:
            start = i * stride
        a, b, stop = start, 0, start + counts[i]
        for r in range(k):
            in_band, in_extra = a < stop, b < s
            if in_band:
                key = keys[a]
                band_inverted, pos = (key >> col_bits) & _MAX_BITS, i - w + (key & col_mask)
            if in_extra and (not in_band or _before(inverted[b], extra_pos[i, order[b]], band_inverted, pos)):
                out[i, r] = extra_pos[i, order[b]]
                b += 1
            elif in_band:
                out[i, r] = pos
                a += 1
            else:
                out[i, r] = -1
        start += counts[i]


@_loop(inline="always")
def _before(inverted, pos, other_inverted, other_pos):
    """(value, position) sorts before the other: larger value (smaller inverted bits), then lower position."""
    return inverted < other_inverted or (inverted == other_inverted and pos < other_pos)


@_loop(boundscheck=False)
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


@_loop(boundscheck=False)
def key_maxima(blocks, block, w, out):
    """out[j, m] = key j's maximum over its m-th block of queries (`block_maxima`), 0 past the document."""
    n, chunks = out.shape
    nb, span = blocks.shape
    for j in range(n):
        first = (j - w) // block
        for m in range(chunks):
            b, x = first + m, j + w - (first + m) * block
            out[j, m] = blocks[b, x] if 0 <= b < nb and 0 <= x < span else 0.0


@_loop(boundscheck=False)
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


@_loop(boundscheck=False)
def row_keys(band, bits, col_bits, keys, counts):
    """keys[i] = sort keys (2^31 - 1 - value bits) << col_bits | column c of band row i's entries c < len(keys[i])
    (`topk._first_k`: the last column, if left out, merged apart), the largest int64 (sorted last) where not
    positive; counts[i] = how many are positive. For a band whose rows' top-k hold a third of it or more: every
    entry a candidate, each row sorted on its own (`topk._Buffers`)."""
    n, width = keys.shape
    for i in range(n):
        s = 0
        for c in range(width):
            positive = band[i, c] > 0
            keys[i, c] = ((_MAX_BITS - np.int64(bits[i, c])) << col_bits) | c if positive else _LAST
            s += positive
        counts[i] = s
    return n


@_loop(boundscheck=False)
def column_keys(band, bits, w, col_bits, keys, counts):
    """`row_keys` for the band's columns, read in place: keys[j, u] for query i = j - w + u, the entry band[i,
    2w - u] (the column field is u: query j - w + u, as `collect_keys` writes it), u < len(keys[j])."""
    n, width = keys.shape
    for j in range(n):
        s = 0
        for u in range(width):
            i = j - w + u
            positive = 0 <= i < n and band[i, 2 * w - u] > 0
            keys[j, u] = ((_MAX_BITS - np.int64(bits[i, 2 * w - u])) << col_bits) | u if positive else _LAST
            s += positive
        counts[j] = s
    return n


@_loop(boundscheck=False)
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


# ------------------------------------------------------------------ a streamed layer's band of query rows
_POSITION = 0xFFFFFFFF  # the low 32 bits of a key's list entry: its query's position


@_loop(boundscheck=False)
def stream_rows(p, bits, row0, key0, block, acc, received, sums, maxima, key_maxima, t0, band, band_key0):
    """One head's chunk of exact softmax rows p (rows, m) (float bits `bits`: values >= 0 order as their bits),
    queries row0 + t over keys key0 + x, rows t0 + t of the current band of rows (`streamed.StreamedLayer`),
    read once while in cache:
    - received attention and block sums: with `block`, each row is added into acc (n,), the column sums of the
      current query block, which go into received (n,) and sums (g, g) when that block ends (float64);
    - maxima (rows, chunks) int32: each row's maxima of its interleaved column chunks (columns c, c + chunks,
      ...), for the row's threshold (`band_candidates`);
    - key_maxima (chunks', band keys) int32: each key's maxima over the band's interleaved row chunks (rows
      c, c + chunks', ...), for the key's threshold (`band_candidates`);
    - band (band rows, band keys) float32: where the band is not p itself (a causal layer's rows reach fewer
      keys than the band's), the rows are copied into it at key0 - band_key0 (the band holds zeros elsewhere)."""
    c, m = p.shape
    n = received.shape[0]
    chunks, key_chunks = maxima.shape[1], key_maxima.shape[0]
    into = acc[key0 : key0 + m] if block else received[key0 : key0 + m]
    copy = band.shape[1] > 0
    for t in range(c):
        i = row0 + t
        row, rbits = p[t], bits[t]
        for x in range(m):
            into[x] += row[x]
        if block and ((i + 1) % block == 0 or i == n - 1):
            a = i // block
            for b in range(sums.shape[1]):
                total = 0.0
                for j in range(b * block, min(n, b * block + block)):
                    total += acc[j]
                    received[j] += acc[j]
                    acc[j] = 0.0
                sums[a, b] += total
        if chunks == 0:
            continue
        _chunk_maxima(rbits, maxima[t])
        if key_chunks:
            km = key_maxima[(t0 + t) % key_chunks, key0 - band_key0 : key0 - band_key0 + m]
            for x in range(m):
                km[x] = max(km[x], rbits[x])
        if copy:
            into_band = band[t0 + t, key0 - band_key0 : key0 - band_key0 + m]
            for x in range(m):
                into_band[x] = row[x]


@_loop(inline="always")
def _chunk_maxima(rbits, mx):
    """mx[c] = the maximum of rbits[c::len(mx)] (float bits), 0 where the chunk is empty."""
    m, chunks = rbits.shape[0], mx.shape[0]
    for x in range(min(chunks, m)):
        mx[x] = rbits[x]
    for x in range(m, chunks):
        mx[x] = 0
    start = chunks
    while start + chunks <= m:
        for x in range(chunks):
            mx[x] = max(mx[x], rbits[start + x])
        start += chunks
    for x in range(max(0, m - start)):
        mx[x] = max(mx[x], rbits[start + x])


@_loop(boundscheck=False)
def row_maxima(bits, maxima):
    """maxima[r] = `_chunk_maxima` of row r of bits (rows, m) (`streamed.rows_topk`)."""
    for r in range(bits.shape[0]):
        _chunk_maxima(bits[r], maxima[r])


@_loop(boundscheck=False)
def grouped_sums(values, positions, group, query0, block, acc, received, sums):
    """Rows r of values (rows, width) float32, queries query0 + r, entry x at key positions[r // group, x] (a
    key >= n holds 0 and is skipped): each key's received attention into received (n,), and with `block`,
    query block a to key block c into sums (g, g) (float64). Rows of one group and one query block are added
    into acc (width,) first, then spread over their keys (`block_sparse.BlockSparseLayer`)."""
    rows, width = values.shape
    n = received.shape[0]
    acc[:] = 0.0
    for r in range(rows):
        row = values[r]
        for x in range(width):
            acc[x] += row[x]
        i = query0 + r
        if r + 1 == rows or (r + 1) // group != r // group or (block and (i + 1) // block != i // block):
            where = positions[r // group]
            for x in range(width):
                j = where[x]
                if j < n:
                    received[j] += acc[x]
                    if block:
                        sums[i // block, j // block] += acc[x]
                acc[x] = 0.0


@_loop(boundscheck=False)
def row_candidates(bits, threshold, positions, group, pos_bits, keys, counts):
    """Sort keys r << (31 + pos_bits) | (2^31 - 1 - value bits) << pos_bits | position of every entry of row r at
    or above its threshold (float bits), its position positions[r // group, x], into keys[:s]; counts[r] = row
    r's; returns s (`streamed.rows_topk`)."""
    rows, m = bits.shape
    s = 0
    for r in range(rows):
        rbits, thr, first, row_key, where = bits[r], threshold[r], s, np.int64(r) << (31 + pos_bits), positions[r // group]
        for x in range(m):
            if rbits[x] >= thr:
                keys[s] = row_key | ((_MAX_BITS - np.int64(rbits[x])) << pos_bits) | where[x]
                s += 1
        counts[r] = s - first
    return s


@_loop(boundscheck=False)
def band_candidates(bits, key0, t, row_threshold, key_threshold, col_bits, row_bits, rows_found, row_counts, found,
                    q0):
    """From band row t on, the candidates of the band's rows and keys (float bits (rows, keys), key key0 + x),
    each an entry at or above its row's (key's) threshold, as sort keys: t << (31 + col_bits) | (2^31 - 1 - value
    bits) << col_bits | key into rows_found, row_counts[t] of them; key << (31 + row_bits) | (2^31 - 1 - value
    bits) << row_bits | q0 + t into found. Stops before a row that might not fit; returns (rows' and keys' candidates,
    the row reached)."""
    rows, m = bits.shape
    r = s = 0
    while t < rows and r + m <= rows_found.shape[0] and s + m <= found.shape[0]:
        rbits, thr, first = bits[t], row_threshold[t], r
        row_key, query = np.int64(t) << (31 + col_bits), np.int64(q0 + t)
        for x in range(m):
            v = rbits[x]
            if v >= thr:  # about kk + 20 of a row's entries
                rows_found[r] = row_key | ((_MAX_BITS - np.int64(v)) << col_bits) | (key0 + x)
                r += 1
            if v >= key_threshold[x]:  # and of a key's in the band
                found[s] = (np.int64(key0 + x) << (31 + row_bits)) | ((_MAX_BITS - np.int64(v)) << row_bits) | query
                s += 1
        row_counts[t] = r - first
        t += 1
    return r, s, t


@_loop(boundscheck=False)
def first_of_rows(keys, counts, col_bits, out):
    """out[t, :min(k, counts[t])] = the positions in row t's sorted keys (`band_candidates`), best first."""
    c, k = out.shape
    mask = (np.int64(1) << col_bits) - 1
    start = 0
    for t in range(c):
        for r in range(min(k, counts[t])):
            out[t, r] = keys[start + r] & mask
        start += counts[t]


@_loop(boundscheck=False)
def merge_keys(found, s, base, row_bits, kept, count, floor):
    """Each key's candidates (`band_candidates`' found[:s], sorted: by key, then value descending, then row
    base + row) merged into its best queries so far, kept (n, kk) int64 entries (2^31 - 1 - value bits) << 32 |
    query, best first, count (n,) of them; the key's floor becomes its kk-th best's value bits. In place, from
    the worst end: a key's candidates mostly rank near its floor, so only the kept entries below them move."""
    n, kk = kept.shape
    row_mask = (np.int64(1) << row_bits) - 1
    a = 0
    while a < s:
        j = found[a] >> (31 + row_bits)
        b = a
        while b < s and (found[b] >> (31 + row_bits)) == j:
            b += 1
        lst = kept[j]
        u, v, w = count[j] - 1, b - 1, count[j] + b - a - 1  # the worst kept, the worst candidate, where it goes
        while v >= a:  # the kept entries before u stay where they are
            new = (((found[v] >> row_bits) & _MAX_BITS) << 32) | (base + (found[v] & row_mask))
            if u >= 0 and lst[u] > new:  # kept entry u ranks below the candidate (queries differ: never equal)
                if w < kk:
                    lst[w] = lst[u]
                u -= 1
            else:
                if w < kk:
                    lst[w] = new
                v -= 1
            w -= 1
        count[j] = min(kk, count[j] + b - a)
        if count[j] == kk:
            floor[j] = _MAX_BITS - (lst[kk - 1] >> 32)
        a = b


@_loop(boundscheck=False)
def key_lists(kept, count, out):
    """out[j, :count[j]] = the queries of key j's best kept (`merge_keys`), best first."""
    for j in range(kept.shape[0]):
        for r in range(count[j]):
            out[j, r] = kept[j, r] & _POSITION
