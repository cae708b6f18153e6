/* A 2-d convolution (stride 1, no padding) followed by a 2x2 max-pool (stride 2) and a ReLU,
 * forward and backward, on a CPU: MultiLeNet's two blocks (fedmoo/engine/conv_pool.py calls
 * these through ctypes; fedmoo/engine/native.py compiles this file once per machine).
 *
 * Why hand-written: on the 1-20 channels of these blocks oneDNN reaches a small fraction of a
 * core's peak (docs/PERFORMANCE.md), and the max-pool makes three quarters of the convolution's
 * output gradient zero. The backward here visits only the pooled maxima: the weight, bias and
 * input gradients cost a quarter of the dense ones, with no zero-filled buffers.
 *
 * Layouts (all C-contiguous):
 *   x    [B][H][W][CI]   the block's input, channels last (MultiLeNet's first block: CI = 1)
 *   w    [C][K][K][CI]   the convolution's weight, channels last (forward with CI = 1: [C][K][K])
 *   y    [B][HC][WC][C]  a convolution's output, channels last, HC = H - K + 1, WC = W - K + 1
 *   out  [B][HP][WP][C]  relu(maxpool(y)), HP = HC / 2, WP = WC / 2 (floor, as torch)
 *   arg  [B][HP][WP][C]  which of the 2x2 window's entries was the maximum, 2 * row + column
 *
 * The maximum follows torch's max_pool2d: the first maximum in row-major order wins ties, and a
 * NaN wins over every number (a later NaN over an earlier one). relu keeps NaN; its gradient is
 * the output's gradient where the output is > 0, else 0 (torch's threshold_backward).
 * Every function is single-threaded with a fixed order of sums, so results do not depend on
 * threads; fedmoo runs independent rows side by side instead (cpu_layout.each_row).
 *
 * The file is compiled twice, for float (suffix _f32) and double (_f64).
 */
#ifndef T
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* the lanes i, j, ... of the concatenation of vectors a and b */
#if defined(__clang__)
#define SHUFFLE(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define SHUFFLE(a, b, ...) __builtin_shuffle(a, b, (VI){__VA_ARGS__})
#endif

#define T float
#define IT int32_t
#define EVEN(a, b) SHUFFLE(a, b, 0, 2, 4, 6, 8, 10, 12, 14)
#define ODD(a, b) SHUFFLE(a, b, 1, 3, 5, 7, 9, 11, 13, 15)
#define NAME(f) f##_f32
#include "conv_pool.c"

#define T double
#define IT int64_t
#define EVEN(a, b) SHUFFLE(a, b, 0, 2, 4, 6)
#define ODD(a, b) SHUFFLE(a, b, 1, 3, 5, 7)
#define NAME(f) f##_f64
#include "conv_pool.c"

#else

#define L ((long)(32 / sizeof(T)))       /* lanes of a 32-byte vector */
#define VEC NAME(vec)
#define VI NAME(mask)
#define VZERO ((VEC){0})
typedef T VEC __attribute__((vector_size(32)));
typedef IT VI __attribute__((vector_size(32)));

static inline VEC NAME(load)(const T *p)
{
    VEC v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void NAME(store)(T *p, VEC v)
{
    memcpy(p, &v, sizeof v);
}

/* The first n <= L entries of p as a vector (the rest 0), and back. */
static inline VEC NAME(load_n)(const T *p, long n)
{
    VEC v = VZERO;
    memcpy(&v, p, n == L ? sizeof v : (size_t)n * sizeof(T));
    return v;
}

static inline void NAME(store_n)(T *p, VEC v, long n)
{
    memcpy(p, &v, n == L ? sizeof v : (size_t)n * sizeof(T));
}

/* b where mask, else a (mask lanes are all ones or all zeros) */
static inline VEC NAME(select)(VI mask, VEC b, VEC a)
{
    return (VEC)(((VI)b & mask) | ((VI)a & ~mask));
}

/* Pools one pair of rows y0, y1 [WC][C] of a convolution's output into out, arg [WC / 2][C],
 * vectorised over channels and branch-free: the maxima are data-dependent, and branches on them
 * would be mispredicted half the time. */
static void NAME(pool_rows)(const T *y0, const T *y1, T *out, uint8_t *arg, long WP, long C)
{
    for (long j = 0; j < WP; j++)
        for (long o = 0; o < C; o += L) {
            const long n = C - o < L ? C - o : L, at = 2 * j * C + o;
            const VEC a = NAME(load_n)(y0 + at, n), b = NAME(load_n)(y0 + at + C, n),
                      c = NAME(load_n)(y1 + at, n), d = NAME(load_n)(y1 + at + C, n);
            VEC m = a;
            VI k = (VI){0}, u;
            u = (b > m) | (b != b); m = NAME(select)(u, b, m); k = (u & 1) | (k & ~u);
            u = (c > m) | (c != c); m = NAME(select)(u, c, m); k = (u & 2) | (k & ~u);
            u = (d > m) | (d != d); m = NAME(select)(u, d, m); k = (u & 3) | (k & ~u);
            NAME(store_n)(out + j * C + o, (VEC)((VI)m & ((m > 0) | (m != m))), n);
            for (long l = 0; l < n; l++)
                arg[j * C + o + l] = (uint8_t)k[l];
        }
}

/* relu(max of a window in row-major order a, b, c, d) and which entry it was, for the odd
 * columns left over by the vectorised forward. */
static inline T NAME(pool4)(T a, T b, T c, T d, uint8_t *which)
{
    T m = a;
    uint8_t k = 0;
    if (b > m || b != b) { m = b; k = 1; }
    if (c > m || c != c) { m = c; k = 2; }
    if (d > m || d != d) { m = d; k = 3; }
    *which = k;
    return (m > 0 || m != m) ? m : 0;
}

/* Pools 2 x 2L columns (row 0: r0a, r0b; row 1: r1a, r1b) of one channel into L windows and
 * stores the first n, C apart. Row by row first, then the rows' winners: the same maximum and
 * index as torch's row-major scan, ties and NaN included. */
static inline void NAME(pool_lanes)(VEC r0a, VEC r0b, VEC r1a, VEC r1b, T *out, uint8_t *arg,
                                    long n, long C)
{
    VEC e = EVEN(r0a, r0b), d = ODD(r0a, r0b);
    VI u = (d > e) | (d != d);
    const VEC m0 = NAME(select)(u, d, e);
    const VI k0 = u & 1;
    e = EVEN(r1a, r1b);
    d = ODD(r1a, r1b);
    u = (d > e) | (d != d);
    const VEC m1 = NAME(select)(u, d, e);
    const VI k1 = (u & 1) | 2;
    u = (m1 > m0) | (m1 != m1);
    const VEC m = NAME(select)(u, m1, m0);
    const VI k = (k1 & u) | (k0 & ~u);
    const VEC r = (VEC)((VI)m & ((m > 0) | (m != m)));
    for (long l = 0; l < n; l++) {
        out[l * C] = r[l];
        arg[l * C] = (uint8_t)k[l];
    }
}

/* Forward of a block with one input channel (x [B][H][W], w [C][K][K]): the convolution is
 * computed only on the rows and columns the pool reads, two rows at a time (each input row
 * feeds both) and 3 vectors of columns at a time, held in registers, then pooled. */
void NAME(conv1_pool_relu)(const T *x, const T *w, const T *bias, T *out, uint8_t *arg,
                           long B, long H, long W, long C, long K)
{
    const long HP = (H - K + 1) / 2, WP = (W - K + 1) / 2, WC = 2 * WP, G = 3 * L;
    for (long b = 0; b < B; b++) {
        const T *xb = x + b * H * W;
        for (long i = 0; i < HP; i++) {
            T *ob = out + (b * HP + i) * WP * C;
            uint8_t *ab = arg + (b * HP + i) * WP * C;
            for (long o = 0; o < C; o++) {
                const T *wo = w + o * K * K;
                long j0 = 0;
                for (; j0 + G <= WC; j0 += G) {
                    VEC a0 = VZERO + bias[o], a1 = a0, a2 = a0, c0 = a0, c1 = a0, c2 = a0;
                    for (long t = 0; t <= K; t++) {
                        const T *xr = xb + (2 * i + t) * W + j0;
                        for (long q = 0; q < K; q++) {
                            const VEC x0 = NAME(load)(xr + q), x1 = NAME(load)(xr + q + L),
                                      x2 = NAME(load)(xr + q + 2 * L);
                            if (t < K) {
                                const T v = wo[t * K + q];
                                a0 += v * x0; a1 += v * x1; a2 += v * x2;
                            }
                            if (t > 0) {
                                const T v = wo[(t - 1) * K + q];
                                c0 += v * x0; c1 += v * x1; c2 += v * x2;
                            }
                        }
                    }
                    const long at = j0 / 2 * C + o;
                    NAME(pool_lanes)(a0, a1, c0, c1, ob + at, ab + at, L, C);
                    NAME(pool_lanes)(a2, a2, c2, c2, ob + at + L * C, ab + at + L * C, L / 2, C);
                }
                for (long j = j0; j < WC; j += 2) {       /* columns left over: plain loops */
                    T v[2][2];
                    for (long r = 0; r < 2; r++)
                        for (long s = 0; s < 2; s++) {
                            T a = bias[o];
                            for (long p = 0; p < K; p++)
                                for (long q = 0; q < K; q++)
                                    a += wo[p * K + q] * xb[(2 * i + r + p) * W + j + s + q];
                            v[r][s] = a;
                        }
                    const long at = j / 2 * C + o;
                    ob[at] = NAME(pool4)(v[0][0], v[0][1], v[1][0], v[1][1], &ab[at]);
                }
            }
        }
    }
}

/* relu(maxpool(y)) of a convolution's output y [B][HC][WC][C]. */
void NAME(pool_relu)(const T *y, T *out, uint8_t *arg, long B, long HC, long WC, long C)
{
    const long HP = HC / 2, WP = WC / 2;
    for (long b = 0; b < B; b++)
        for (long i = 0; i < HP; i++) {
            const T *y0 = y + (b * HC + 2 * i) * WC * C;
            const long at = (b * HP + i) * WP * C;
            NAME(pool_rows)(y0, y0 + WC * C, out + at, arg + at, WP, C);
        }
}

/* as[p][v] += gv * the patch's row p (K rows, stride apart, read as KV whole vectors). */
static inline void NAME(patch)(VEC *as, const T *xs, T gv, long K, long KV, long stride)
{
    for (long p = 0; p < K; p++)
        for (long v = 0; v < KV; v++)
            as[p * KV + v] += gv * NAME(load)(xs + p * stride + v * L);
}

/* The same for a patch at the end of x, where whole vectors would read past it. */
static void NAME(patch_tail)(VEC *as, const T *xs, T gv, long K, long KC, long KV, long stride)
{
    for (long p = 0; p < K; p++)
        for (long t = 0; t < KC; t++)
            as[p * KV + t / L][t % L] += gv * xs[p * stride + t];
}

/* dxs's patch (K rows of KC values, stride apart) += gv * the weight's rows ws [K][KC]. */
static inline void NAME(patch_input)(T *dxs, const T *ws, T gv, long K, long KC, long stride)
{
    for (long p = 0; p < K; p++) {
        T *d = dxs + p * stride;
        const T *v = ws + p * KC;
        long t = 0;
        for (; t + L <= KC; t += L)
            NAME(store)(d + t, NAME(load)(d + t) + gv * NAME(load)(v + t));
        for (; t < KC; t++)
            d[t] += gv * v[t];
    }
}

/* Backward of a block: g is the gradient of out. Adds the weight's gradient to dw [C][K][K][CI],
 * the bias's to db [C] and, unless dx is NULL, the input's to dx [B][H][W][CI]: each pooled
 * maximum contributes its K x K x CI patch, K rows of K * CI contiguous values. The weight's
 * gradient is summed in rows padded to whole vectors (reading a few values past a patch's row,
 * except at the end of x). With short rows a maximum relu stops is summed too, into a spare
 * row that is thrown away (so a NaN it reads stays there), since a branch on the sign would
 * be mispredicted half the time. */
int NAME(conv_pool_relu_backward)(const T *g, const T *out, const uint8_t *arg, const T *x,
                                  const T *w, T *dw, T *db, T *dx,
                                  long B, long H, long W, long CI, long C, long K,
                                  long HP, long WP)
{
    const long KC = K * CI, KV = (KC + L - 1) / L, end = B * H * W * CI;
    const int branch = KV > 2;
    const size_t bytes = (size_t)((C + 1) * K * KV) * sizeof(VEC);
    VEC *acc = aligned_alloc(sizeof(VEC), bytes);
    T *bias = calloc((size_t)(C + 1), sizeof(T));
    if (!acc || !bias) {
        free(acc);
        free(bias);
        return 1;
    }
    memset(acc, 0, bytes);
    for (long b = 0; b < B; b++)
        for (long i = 0; i < HP; i++)
            for (long j = 0; j < WP; j++)
                for (long o = 0; o < C; o++) {
                    const long at = ((b * HP + i) * WP + j) * C + o;
                    const int live = out[at] > 0;
                    if (branch && !live)
                        continue;
                    const long into = live ? o : C;           /* C: the spare row */
                    const T gv = g[at];
                    const long r = 2 * i + (arg[at] >> 1), s = 2 * j + (arg[at] & 1);
                    bias[into] += gv;
                    const long from = ((b * H + r) * W + s) * CI;
                    VEC *as = acc + into * K * KV;
                    if (from + (K - 1) * W * CI + KV * L > end)
                        NAME(patch_tail)(as, x + from, gv, K, KC, KV, W * CI);
                    else if (K == 5 && KV == 1)    /* MultiLeNet's blocks: unrolled */
                        NAME(patch)(as, x + from, gv, 5, 1, W * CI);
                    else if (K == 5 && KC == 50)
                        NAME(patch)(as, x + from, gv, 5, (50 + L - 1) / L, W * CI);
                    else
                        NAME(patch)(as, x + from, gv, K, KV, W * CI);
                    if (dx && live && K == 5 && KC == 50)
                        NAME(patch_input)(dx + from, w + o * K * KC, gv, 5, 50, W * CI);
                    else if (dx && live)
                        NAME(patch_input)(dx + from, w + o * K * KC, gv, K, KC, W * CI);
                }
    for (long o = 0; o < C; o++) {
        db[o] += bias[o];
        for (long p = 0; p < K; p++)
            for (long t = 0; t < KC; t++)
                dw[(o * K + p) * KC + t] += acc[(o * K + p) * KV + t / L][t % L];
    }
    free(acc);
    free(bias);
    return 0;
}

/* the next type's pass defines them anew */
#undef T
#undef IT
#undef EVEN
#undef ODD
#undef NAME
#undef L
#undef VEC
#undef VI
#undef VZERO

#endif
