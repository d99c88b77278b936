/* dist/shm.c: the shared-memory communicator, for data-parallel training on
 * the CPU (and for testing the data-parallel logic without a GPU).
 *
 * One file, mapped by every rank: a header (magic, world, the abort mark,
 * one arrival counter per rank) and one slot of SLOT_BYTES per rank. A
 * collective moves its data through the slots a chunk at a time: each rank
 * copies its chunk into its slot, all meet at a barrier, each reads what it
 * needs (an all-reduce sums every slot in rank order, in double, so every
 * rank gets the same bits), and all meet again before the slots are reused.
 * A barrier is a counter per rank that each raises to its barrier number;
 * waiting polls the counters, the abort mark and the clock.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dist/dist.h"

#define SHM_MAGIC 0x707269736d73686dULL /* "prismshm" */
#define SLOT_BYTES ((size_t)1 << 20)

typedef struct {
    _Atomic uint64_t magic;
    int32_t world;
    _Atomic int32_t aborted_by;          /* 0, or the rank that gave up + 1 */
    _Atomic uint64_t arrived[];          /* per rank: the last barrier it reached */
} shm_header;

typedef struct {
    shm_header *h;
    size_t map_bytes;
    unsigned char *slots;                /* world * SLOT_BYTES */
    uint64_t barriers;                   /* this rank's barrier count */
    char path[1024];
    double *sum;                         /* SLOT_BYTES / 4 doubles of scratch */
} shm_comm;

static void nap(void)
{
    struct timespec ts = {0, 50000};
    nanosleep(&ts, NULL);
}

static size_t header_bytes(int world)
{
    size_t n = sizeof(shm_header) + sizeof(uint64_t) * (size_t)world;
    return (n + 63) / 64 * 64;
}

static unsigned char *slot(shm_comm *s, int rank) { return s->slots + (size_t)rank * SLOT_BYTES; }

static int shm_barrier_named(pr_comm *c, const char *what, pr_err *err)
{
    shm_comm *s = c->impl;
    uint64_t mine = ++s->barriers;
    atomic_store(&s->h->arrived[c->rank], mine);
    double t0 = pr_now_s();
    for (int r = 0; r < c->world; r++) {
        while (atomic_load(&s->h->arrived[r]) < mine) {
            int by = atomic_load(&s->h->aborted_by);
            if (by) return pr_errf(err, "rank %d: shm %s: rank %d gave up", c->rank, what, by - 1);
            if (pr_now_s() - t0 > c->timeout_s)
                return pr_errf(err, "rank %d: shm %s: timed out after %.0f s waiting for rank %d (--dist-timeout)",
                               c->rank, what, c->timeout_s, r);
            nap();
        }
    }
    return 0;
}

static int shm_barrier(pr_comm *c, pr_err *err) { return shm_barrier_named(c, "barrier", err); }

/* one chunk of n elements of size `size` (4: f32, 8: f64) at data: the mean over ranks, in place */
static int reduce_chunk(pr_comm *c, void *data, int64_t n, size_t size, pr_err *err)
{
    shm_comm *s = c->impl;
    memcpy(slot(s, c->rank), data, (size_t)n * size);
    if (shm_barrier_named(c, "all-reduce", err)) return -1;
    for (int64_t i = 0; i < n; i++) s->sum[i] = 0;
    for (int r = 0; r < c->world; r++) {
        const unsigned char *src = slot(s, r);
        if (size == 4)
            for (int64_t i = 0; i < n; i++) s->sum[i] += ((const float *)src)[i];
        else
            for (int64_t i = 0; i < n; i++) s->sum[i] += ((const double *)src)[i];
    }
    for (int64_t i = 0; i < n; i++) {
        double mean = s->sum[i] / c->world;
        if (size == 4) ((float *)data)[i] = (float)mean;
        else ((double *)data)[i] = mean;
    }
    return shm_barrier_named(c, "all-reduce", err);
}

static int reduce_array(pr_comm *c, void *data, int64_t n, size_t size, pr_err *err)
{
    int64_t per = (int64_t)(SLOT_BYTES / 8);   /* the scratch holds this many doubles */
    for (int64_t at = 0; at < n; at += per) {
        int64_t k = n - at < per ? n - at : per;
        if (reduce_chunk(c, (unsigned char *)data + (size_t)at * size, k, size, err)) return -1;
    }
    return 0;
}

static int check_cpu_f32(const pr_comm *c, const pr_tensor *t, const char *what, pr_err *err)
{
    if (t->device != PR_CPU || t->dtype != PR_F32)
        return pr_errf(err, "rank %d: shm %s: %s is %s on %s; the shm backend takes f32 CPU tensors", c->rank,
                       what, t->name ? t->name : "a tensor", pr_dtype_name(t->dtype), pr_device_name(t->device));
    return 0;
}

static int shm_allreduce_avg(pr_comm *c, pr_tensor *const *ts, int n, pr_err *err)
{
    for (int i = 0; i < n; i++)
        if (check_cpu_f32(c, ts[i], "all-reduce", err) || reduce_array(c, ts[i]->data, ts[i]->numel, 4, err))
            return -1;
    return 0;
}

static int shm_avg_host(pr_comm *c, double *v, int n, pr_err *err) { return reduce_array(c, v, n, 8, err); }

static int shm_broadcast(pr_comm *c, pr_tensor *const *ts, int n, int root, pr_err *err)
{
    shm_comm *s = c->impl;
    for (int i = 0; i < n; i++) {
        if (check_cpu_f32(c, ts[i], "broadcast", err)) return -1;
        size_t bytes = pr_nbytes(ts[i]);
        for (size_t at = 0; at < bytes; at += SLOT_BYTES) {
            size_t k = bytes - at < SLOT_BYTES ? bytes - at : SLOT_BYTES;
            unsigned char *data = (unsigned char *)ts[i]->data + at;
            if (c->rank == root) memcpy(slot(s, root), data, k);
            if (shm_barrier_named(c, "broadcast", err)) return -1;
            if (c->rank != root) memcpy(data, slot(s, root), k);
            if (shm_barrier_named(c, "broadcast", err)) return -1;
        }
    }
    return 0;
}

static int shm_wait(pr_comm *c, pr_err *err)
{
    (void)c, (void)err;
    return 0;   /* every shm collective is complete when it returns */
}

static void shm_abort(pr_comm *c)
{
    shm_comm *s = c->impl;
    int32_t none = 0;
    atomic_compare_exchange_strong(&s->h->aborted_by, &none, c->rank + 1);
}

static void shm_free(pr_comm *c)
{
    shm_comm *s = c->impl;
    if (c->rank == 0) unlink(s->path);
    munmap(s->h, s->map_bytes);
    free(s->sum);
    free(s);
    free(c);
}

/* rank 0: a new file under a temporary name, sized and stamped, then renamed into place */
static int create_segment(shm_comm *s, int world, pr_err *err)
{
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp%ld", s->path, (long)getpid());
    int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return pr_errf(err, "%s: cannot create the shm file: %s", tmp, strerror(errno));
    if (ftruncate(fd, (off_t)s->map_bytes) != 0) {
        close(fd);
        unlink(tmp);
        return pr_errf(err, "%s: cannot size the shm file to %zu bytes: %s", tmp, s->map_bytes, strerror(errno));
    }
    s->h = mmap(NULL, s->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (s->h == MAP_FAILED) return unlink(tmp), pr_errf(err, "%s: cannot map: %s", tmp, strerror(errno));
    s->h->world = world;
    atomic_store(&s->h->magic, SHM_MAGIC);
    if (rename(tmp, s->path) != 0) {
        unlink(tmp);
        return pr_errf(err, "%s: cannot rename %s into place: %s", s->path, tmp, strerror(errno));
    }
    return 0;
}

/* the other ranks: wait for rank 0's file, then map it */
static int attach_segment(shm_comm *s, int rank, int world, double timeout_s, pr_err *err)
{
    double t0 = pr_now_s();
    for (;;) {
        int fd = open(s->path, O_RDWR);
        struct stat st;
        if (fd >= 0 && fstat(fd, &st) == 0 && (size_t)st.st_size == s->map_bytes) {
            s->h = mmap(NULL, s->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            close(fd);
            if (s->h == MAP_FAILED) return pr_errf(err, "%s: cannot map: %s", s->path, strerror(errno));
            if (atomic_load(&s->h->magic) == SHM_MAGIC && s->h->world == world) return 0;
            return pr_errf(err, "rank %d: %s is not a shm file for %d ranks (a stale one? remove it)", rank,
                           s->path, world);
        }
        if (fd >= 0) close(fd);
        if (pr_now_s() - t0 > timeout_s)
            return pr_errf(err, "rank %d: timed out after %.0f s waiting for rank 0 to create %s", rank, timeout_s,
                           s->path);
        nap();
    }
}

int pr_comm_shm_open(pr_comm **out, const pr_dist_env *e, double timeout_s, pr_err *err)
{
    *out = NULL;
    if (!e->file[0]) return pr_errf(err, "shm: no rendezvous file (PRISM_DIST_FILE or --dist-file)");
    shm_comm *s = calloc(1, sizeof *s);
    pr_comm *c = calloc(1, sizeof *c);
    PR_CHECK(s && c, "shm: out of host memory");
    snprintf(s->path, sizeof s->path, "%s", e->file);
    s->map_bytes = header_bytes(e->world) + (size_t)e->world * SLOT_BYTES;
    int rc = e->rank == 0 ? create_segment(s, e->world, err) : attach_segment(s, e->rank, e->world, timeout_s, err);
    if (rc) {
        free(s), free(c);
        return -1;
    }
    s->slots = (unsigned char *)s->h + header_bytes(e->world);
    s->sum = malloc(SLOT_BYTES);   /* SLOT_BYTES / 8 doubles: one chunk of either width */
    PR_CHECK(s->sum, "shm: out of host memory");
    *c = (pr_comm){.rank = e->rank, .world = e->world, .backend = "shm", .timeout_s = timeout_s,
                   .allreduce_avg = shm_allreduce_avg, .broadcast = shm_broadcast, .avg_host = shm_avg_host,
                   .wait = shm_wait, .barrier = shm_barrier, .abort = shm_abort, .free = shm_free, .impl = s};
    *out = c;
    return 0;
}

void pr_comm_free(pr_comm *c)
{
    if (c) c->free(c);
}
