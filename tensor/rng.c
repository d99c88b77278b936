/* tensor/rng.c: Philox4x32-10 (Salmon et al. 2011), counter based.
 *
 * Element i of a draw keyed by (seed, stream) uses the counter
 * (lo32(i), hi32(i), stream, 0) and the 64-bit seed as key: a pure function
 * of its index, so every device and thread count yields the same numbers.
 * uniform(i) = 53 random bits of words 0,1 in [0,1); normal(i) is Box-Muller
 * on two uniforms from words 0..3. tensor/cuda.cu computes the same values. */
#include <math.h>

#include "tensor/tensor.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

static void mulhilo(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo)
{
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    *lo = (uint32_t)p;
}

void pr_philox4x32(uint64_t key, const uint32_t ctr[4], uint32_t out[4])
{
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int r = 0; r < 10; r++) {
        uint32_t hi0, lo0, hi1, lo1;
        mulhilo(PHILOX_M0, c0, &hi0, &lo0);
        mulhilo(PHILOX_M1, c2, &hi1, &lo1);
        uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0, c1 = lo1, c2 = n2, c3 = lo0;
        k0 += PHILOX_W0, k1 += PHILOX_W1;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

static void philox_at(uint64_t seed, uint32_t stream, uint64_t i, uint32_t out[4])
{
    uint32_t ctr[4] = {(uint32_t)i, (uint32_t)(i >> 32), stream, 0};
    pr_philox4x32(seed, ctr, out);
}

/* 53 bits -> [0,1) exactly representable in double */
static double bits_to_unit(uint32_t a, uint32_t b)
{
    uint64_t m = ((uint64_t)(a >> 5) << 26) | (b >> 6);
    return (double)m * (1.0 / 9007199254740992.0);
}

double pr_philox_uniform(uint64_t seed, uint32_t stream, uint64_t i)
{
    uint32_t w[4];
    philox_at(seed, stream, i, w);
    return bits_to_unit(w[0], w[1]);
}

double pr_philox_normal(uint64_t seed, uint32_t stream, uint64_t i)
{
    uint32_t w[4];
    philox_at(seed, stream, i, w);
    double u1 = 1.0 - bits_to_unit(w[0], w[1]); /* (0,1]: log is finite */
    double u2 = bits_to_unit(w[2], w[3]);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

pr_rng pr_rng_init(uint64_t seed, uint32_t stream) { return (pr_rng){seed, stream, 0}; }

static void rand_fill(pr_tensor *t, pr_rng *r, int kind, double a, double b)
{
    PR_CHECK(pr_dtype_is_float(t->dtype), "random fill: dtype %s is not a float dtype",
             pr_dtype_name(t->dtype));
    if (t->device == PR_CUDA) {
        pr_cuda_rand_fill(t, r->seed, r->stream, r->offset, kind, a, b);
    } else {
        for (int64_t i = 0; i < t->numel; i++) {
            uint64_t c = r->offset + (uint64_t)i;
            double x = kind == 0 ? a + (b - a) * pr_philox_uniform(r->seed, r->stream, c)
                                 : a + b * pr_philox_normal(r->seed, r->stream, c);
            pr_set(t, i, x);
        }
    }
    r->offset += (uint64_t)t->numel;
}

void pr_rand_uniform_(pr_tensor *t, pr_rng *r, double lo, double hi) { rand_fill(t, r, 0, lo, hi); }
void pr_rand_normal_(pr_tensor *t, pr_rng *r, double mean, double std) { rand_fill(t, r, 1, mean, std); }

pr_tensor *pr_randn(pr_arena *a, pr_dtype dt, pr_device dev, int ndim, const int64_t *shape, pr_rng *r)
{
    pr_tensor *t = pr_empty(a, dt, dev, ndim, shape);
    pr_rand_normal_(t, r, 0.0, 1.0);
    return t;
}

pr_tensor *pr_randu(pr_arena *a, pr_dtype dt, pr_device dev, int ndim, const int64_t *shape, pr_rng *r,
                    double lo, double hi)
{
    pr_tensor *t = pr_empty(a, dt, dev, ndim, shape);
    pr_rand_uniform_(t, r, lo, hi);
    return t;
}
