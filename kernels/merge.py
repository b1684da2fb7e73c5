"""Merge two sorted arrays into one (PMPP ch. 12), in parallel with co-rank.

Thread t writes the output positions [k0, k1) of C. Which elements of A and B land there? The
*co-rank* of k is the i such that C[0:k] is the merge of A[0:i] and B[0:k-i]; a binary search finds
it in about log2(k) steps, from k alone, so every thread finds its own slice of A and B with no
coordination, then merges those slices sequentially.
"""

from numba import cuda


@cuda.jit(device=True)
def co_rank(k, a, m, b, n):
    """i such that the first k outputs are A[0:i] merged with B[0:k-i] (binary search on i)."""
    i = min(k, m)
    j = k - i
    i_low = max(0, k - n)
    j_low = max(0, k - m)
    while True:
        if i > 0 and j < n and a[i - 1] > b[j]:  # i too high: take fewer from A
            delta = (i - i_low + 1) // 2
            j_low = j
            i -= delta
            j += delta
        elif j > 0 and i < m and b[j - 1] >= a[i]:  # j too high: take fewer from B
            delta = (j - j_low + 1) // 2
            i_low = i
            i += delta
            j -= delta
        else:
            return i


def merge_corank(a, b, c, m, n, per_thread):
    t = cuda.grid(1)
    k0 = min(t * per_thread, m + n)
    k1 = min(k0 + per_thread, m + n)
    i0 = co_rank(k0, a, m, b, n)
    i1 = co_rank(k1, a, m, b, n)
    i = i0
    j = k0 - i0
    j1 = k1 - i1
    for k in range(k0, k1):  # a sequential merge of A[i0:i1] and B[k0-i0:k1-i1]
        if j >= j1 or (i < i1 and a[i] <= b[j]):
            c[k] = a[i]
            i += 1
        else:
            c[k] = b[j]
            j += 1
