/* dist/nccl.c: the NCCL communicator, with NCCL loaded by dlopen at run time.
 *
 * Only the handful of entry points used here are declared, with NCCL's ABI
 * (an int result, an opaque comm pointer, a 128-byte unique id passed by
 * value, the enum values of nccl.h), so neither NCCL's headers nor its
 * library are needed to build. Collectives run on a stream of their own
 * (non-blocking), ordered after stream 0's work by an event; pr_comm_wait
 * polls their completion event and ncclCommGetAsyncError against the
 * timeout, aborting the communicator (and naming the rank and operation)
 * when it runs out, then makes stream 0 wait for the collectives.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dist/dist.h"

/* ---- finding the library ------------------------------------------------------------ */
static void note(char *tried, size_t n, const char *where, const char *why)
{
    size_t at = strlen(tried);
    if (at + 1 < n && snprintf(tried + at, n - at, "\n  %s: %s", where, why) < 0) tried[at] = '\0';
}

/* dlopen path and check that it is NCCL; *handle on success */
static bool try_open(const char *path, void **handle, char *tried, size_t n)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        note(tried, n, path, why ? why : "cannot be loaded");
        return false;
    }
    if (!dlsym(h, "ncclGetVersion") || !dlsym(h, "ncclCommInitRank")) {
        note(tried, n, path, "loads, but is not NCCL (no ncclGetVersion / ncclCommInitRank)");
        dlclose(h);
        return false;
    }
    *handle = h;
    return true;
}

/* dir_pattern/nvidia/nccl/lib/libnccl.so.2 for every directory the pattern matches */
static bool try_glob(const char *dir_pattern, void **handle, char *found, size_t nfound, char *tried, size_t n)
{
    char pattern[1300];
    glob_t g;
    if (snprintf(pattern, sizeof pattern, "%s/nvidia/nccl/lib/libnccl.so.2", dir_pattern) >= (int)sizeof pattern)
        return false;
    if (glob(pattern, 0, NULL, &g) != 0) {
        note(tried, n, dir_pattern, "none");
        return false;
    }
    bool ok = false;
    for (size_t i = 0; i < g.gl_pathc && !ok; i++)
        if ((ok = try_open(g.gl_pathv[i], handle, tried, n))) snprintf(found, nfound, "%s", g.gl_pathv[i]);
    globfree(&g);
    return ok;
}

/* the library path: a miss is noted briefly (dlerror's text repeats the name) */
static bool dlopen_quiet_miss(const char *name, void **handle, char *tried, size_t n)
{
    char mine[600] = "";
    if (try_open(name, handle, mine, sizeof mine)) return true;
    note(tried, n, name, strstr(mine, "cannot open shared object") ? "not on the library path" : mine + 3);
    return false;
}

int pr_nccl_load(const pr_nccl_search *where, void **handle, char *found, size_t nfound, pr_err *err)
{
    setenv("NCCL_NVLS_ENABLE", "0", 1);   /* forced, whatever was set: multicast stays off */
    *handle = NULL;
    char tried[4096] = "";
    const char *own = where->lib;
    if (own && *own) {   /* the user's choice is the only one tried */
        if (try_open(own, handle, tried, sizeof tried)) return snprintf(found, nfound, "%s", own), 0;
        return pr_errf(err, "NCCL: PRISM_NCCL_LIB=%s cannot be used (no other place is tried while it is set):%s",
                       own, tried);
    }
    if (dlopen_quiet_miss("libnccl.so.2", handle, tried, sizeof tried)) return snprintf(found, nfound, "libnccl.so.2"), 0;
    const char *home = where->home, *venv = where->venv, *conda = where->conda;
    char dirs[8][1100];
    int nd = 0;
    snprintf(dirs[nd++], sizeof dirs[0], "/usr/local/lib/python3*/dist-packages");
    snprintf(dirs[nd++], sizeof dirs[0], "/usr/local/lib/python3*/site-packages");
    snprintf(dirs[nd++], sizeof dirs[0], "/usr/lib/python3*/dist-packages");
    if (home) snprintf(dirs[nd++], sizeof dirs[0], "%.1000s/.local/lib/python3*/site-packages", home);
    if (venv) snprintf(dirs[nd++], sizeof dirs[0], "%.1000s/lib/python3*/site-packages", venv);
    if (conda) snprintf(dirs[nd++], sizeof dirs[0], "%.1000s/lib/python3*/site-packages", conda);
    for (int i = 0; i < nd; i++)
        if (try_glob(dirs[i], handle, found, nfound, tried, sizeof tried)) return 0;
    return pr_errf(err, "NCCL: libnccl.so.2 not found (set PRISM_NCCL_LIB=FILE); looked on the library path "
                        "and for nvidia/nccl/lib/libnccl.so.2 under Python's package directories:%s", tried);
}

#ifndef PRISM_HAVE_CUDA
int pr_comm_nccl_open(pr_comm **out, const pr_dist_env *e, double timeout_s, pr_err *err)
{
    (void)e, (void)timeout_s;
    *out = NULL;
    return pr_errf(err, "NCCL: this prism was built without CUDA (the nccl backend needs GPUs)");
}
#else
#include <cuda_runtime.h>

/* ---- the ABI used (nccl.h's values) ----------------------------------------------------- */
typedef int nccl_result;
typedef struct nccl_comm *nccl_comm_t;
typedef struct { char internal[128]; } nccl_unique_id;
enum { NCCL_SUCCESS = 0, NCCL_IN_PROGRESS = 7 };
enum { NCCL_FLOAT32 = 7, NCCL_FLOAT64 = 8 };
enum { NCCL_SUM = 0, NCCL_AVG = 4 };   /* avg: NCCL >= 2.10 */

typedef struct {
    nccl_result (*get_version)(int *);
    nccl_result (*get_unique_id)(nccl_unique_id *);
    nccl_result (*comm_init_rank)(nccl_comm_t *, int, nccl_unique_id, int);
    nccl_result (*all_reduce)(const void *, void *, size_t, int, int, nccl_comm_t, cudaStream_t);
    nccl_result (*broadcast)(const void *, void *, size_t, int, int, nccl_comm_t, cudaStream_t);
    nccl_result (*group_start)(void);
    nccl_result (*group_end)(void);
    nccl_result (*get_async_error)(nccl_comm_t, nccl_result *);
    nccl_result (*comm_abort)(nccl_comm_t);
    nccl_result (*comm_destroy)(nccl_comm_t);
    const char *(*error_string)(nccl_result);
} nccl_api;

typedef struct {
    void *lib;
    nccl_api api;
    nccl_comm_t comm;
    cudaStream_t stream;
    cudaEvent_t ready, done;  /* stream 0 reached the collective; the collectives finished */
    double *scratch;          /* avg_host's 64 doubles on the device */
    double *pinned;           /* and in pinned host memory, so no copy blocks the wait's timeout */
    bool aborted;
    const char *last_op;      /* what a wait is waiting for, for its messages */
    char path[1024];
} nccl_state;

static int load_api(nccl_state *s, const pr_nccl_search *where, pr_err *err)
{
    char found[1024];
    if (pr_nccl_load(where, &s->lib, found, sizeof found, err)) return -1;
    struct { void **slot; const char *name; } syms[] = {
        {(void **)&s->api.get_version, "ncclGetVersion"}, {(void **)&s->api.get_unique_id, "ncclGetUniqueId"},
        {(void **)&s->api.comm_init_rank, "ncclCommInitRank"}, {(void **)&s->api.all_reduce, "ncclAllReduce"},
        {(void **)&s->api.broadcast, "ncclBroadcast"}, {(void **)&s->api.group_start, "ncclGroupStart"},
        {(void **)&s->api.group_end, "ncclGroupEnd"}, {(void **)&s->api.get_async_error, "ncclCommGetAsyncError"},
        {(void **)&s->api.comm_abort, "ncclCommAbort"}, {(void **)&s->api.comm_destroy, "ncclCommDestroy"},
        {(void **)&s->api.error_string, "ncclGetErrorString"},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++)
        if (!(*syms[i].slot = dlsym(s->lib, syms[i].name)))
            return pr_errf(err, "NCCL: %s has no %s (too old?)", found, syms[i].name);
    int v = 0;
    s->api.get_version(&v);
    if (v < 21000) return pr_errf(err, "NCCL: %s is version code %d; prism needs NCCL >= 2.10 (ncclAvg)", found, v);
    return 0;
}

static int check(pr_comm *c, nccl_result r, const char *what, pr_err *err)
{
    nccl_state *s = c->impl;
    if (r == NCCL_SUCCESS || r == NCCL_IN_PROGRESS) return 0;
    return pr_errf(err, "rank %d: NCCL %s failed: %s", c->rank, what, s->api.error_string(r));
}

static int check_cuda(const pr_comm *c, cudaError_t e, const char *what, pr_err *err)
{
    if (e == cudaSuccess) return 0;
    return pr_errf(err, "rank %d: %s failed: %s", c->rank, what, cudaGetErrorString(e));
}

/* ---- the unique id, through a file ------------------------------------------------------ */
static int write_id(const char *path, const nccl_unique_id *id, pr_err *err)
{
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return pr_errf(err, "%s: cannot create the NCCL id file: %s", tmp, strerror(errno));
    bool ok = write(fd, id, sizeof *id) == (ssize_t)sizeof *id && fsync(fd) == 0;
    close(fd);
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return pr_errf(err, "%s: cannot write the NCCL id: %s", path, strerror(errno));
    }
    return 0;
}

static int read_id(const char *path, int rank, double timeout_s, nccl_unique_id *id, pr_err *err)
{
    double t0 = pr_now_s();
    for (;;) {
        int fd = open(path, O_RDONLY);
        if (fd >= 0) {
            ssize_t got = read(fd, id, sizeof *id);
            close(fd);
            if (got == (ssize_t)sizeof *id) return 0;
        }
        if (pr_now_s() - t0 > timeout_s)
            return pr_errf(err, "rank %d: timed out after %.0f s waiting for rank 0 to write the NCCL id to %s "
                                "(--dist-file must be on a filesystem every rank sees)", rank, timeout_s, path);
        struct timespec ts = {0, 20000000};
        nanosleep(&ts, NULL);
    }
}

/* ---- waiting with a timeout ---------------------------------------------------------------- */
static void nccl_abort(pr_comm *c)
{
    nccl_state *s = c->impl;
    if (s->aborted) return;
    s->aborted = true;
    s->api.comm_abort(s->comm);
}

static int wait_named(pr_comm *c, const char *what, pr_err *err)
{
    nccl_state *s = c->impl;
    double t0 = pr_now_s();
    for (;;) {
        cudaError_t e = cudaEventQuery(s->done);
        if (e == cudaSuccess) break;
        if (e != cudaErrorNotReady) return check_cuda(c, e, what, err);
        nccl_result async = NCCL_SUCCESS;
        s->api.get_async_error(s->comm, &async);
        if (async != NCCL_SUCCESS && async != NCCL_IN_PROGRESS) {
            pr_errf(err, "rank %d: NCCL %s failed: %s (another rank died?)", c->rank, what, s->api.error_string(async));
            nccl_abort(c);
            return -1;
        }
        if (pr_now_s() - t0 > c->timeout_s) {
            pr_errf(err, "rank %d: NCCL %s: no progress for %.0f s (a rank died or hangs; --dist-timeout); "
                         "communicator aborted", c->rank, what, c->timeout_s);
            nccl_abort(c);
            return -1;
        }
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    return check_cuda(c, cudaStreamWaitEvent(0, s->done, 0), "cudaStreamWaitEvent", err);
}

static int nccl_wait(pr_comm *c, pr_err *err)
{
    nccl_state *s = c->impl;
    return wait_named(c, s->last_op ? s->last_op : "collective", err);
}

/* ---- collectives ------------------------------------------------------------------------- */
static int check_tensors(const pr_comm *c, pr_tensor *const *ts, int n, const char *what, pr_err *err)
{
    for (int i = 0; i < n; i++)
        if (ts[i]->device != PR_CUDA || ts[i]->dtype != PR_F32)
            return pr_errf(err, "rank %d: NCCL %s: %s is %s on %s; the nccl backend takes f32 CUDA tensors", c->rank,
                           what, ts[i]->name ? ts[i]->name : "a tensor", pr_dtype_name(ts[i]->dtype),
                           pr_device_name(ts[i]->device));
    return 0;
}

/* the comm stream waits for stream 0's work so far */
static int after_stream0(pr_comm *c, pr_err *err)
{
    nccl_state *s = c->impl;
    return check_cuda(c, cudaEventRecord(s->ready, 0), "cudaEventRecord", err) ||
                   check_cuda(c, cudaStreamWaitEvent(s->stream, s->ready, 0), "cudaStreamWaitEvent", err)
               ? -1
               : 0;
}

static int nccl_allreduce_avg(pr_comm *c, pr_tensor *const *ts, int n, pr_err *err)
{
    nccl_state *s = c->impl;
    if (check_tensors(c, ts, n, "all-reduce", err) || after_stream0(c, err)) return -1;
    s->last_op = "all-reduce (gradients)";
    int rc = check(c, s->api.group_start(), "group start", err);
    for (int i = 0; i < n && !rc; i++)
        rc = check(c, s->api.all_reduce(ts[i]->data, ts[i]->data, (size_t)ts[i]->numel, NCCL_FLOAT32, NCCL_AVG,
                                        s->comm, s->stream), "all-reduce", err);
    rc |= check(c, s->api.group_end(), "group end", err);
    return rc || check_cuda(c, cudaEventRecord(s->done, s->stream), "cudaEventRecord", err) ? -1 : 0;
}

static int nccl_broadcast(pr_comm *c, pr_tensor *const *ts, int n, int root, pr_err *err)
{
    nccl_state *s = c->impl;
    if (check_tensors(c, ts, n, "broadcast", err) || after_stream0(c, err)) return -1;
    s->last_op = "broadcast";
    int rc = check(c, s->api.group_start(), "group start", err);
    for (int i = 0; i < n && !rc; i++)
        rc = check(c, s->api.broadcast(ts[i]->data, ts[i]->data, (size_t)ts[i]->numel, NCCL_FLOAT32, root, s->comm,
                                       s->stream), "broadcast", err);
    rc |= check(c, s->api.group_end(), "group end", err);
    return rc || check_cuda(c, cudaEventRecord(s->done, s->stream), "cudaEventRecord", err) ? -1 : 0;
}

static int nccl_avg_host(pr_comm *c, double *v, int n, pr_err *err)
{
    nccl_state *s = c->impl;
    s->last_op = "all-reduce (host values)";
    for (int at = 0; at < n; at += 64) {
        int k = n - at < 64 ? n - at : 64;
        size_t bytes = sizeof(double) * (size_t)k;
        memcpy(s->pinned, v + at, bytes);
        if (check_cuda(c, cudaMemcpyAsync(s->scratch, s->pinned, bytes, cudaMemcpyHostToDevice, s->stream),
                       "cudaMemcpyAsync", err) ||
            check(c, s->api.all_reduce(s->scratch, s->scratch, (size_t)k, NCCL_FLOAT64, NCCL_AVG, s->comm, s->stream),
                  s->last_op, err) ||
            check_cuda(c, cudaMemcpyAsync(s->pinned, s->scratch, bytes, cudaMemcpyDeviceToHost, s->stream),
                       "cudaMemcpyAsync", err) ||
            check_cuda(c, cudaEventRecord(s->done, s->stream), "cudaEventRecord", err) ||
            wait_named(c, s->last_op, err))
            return -1;
        memcpy(v + at, s->pinned, bytes);
    }
    return 0;
}

static int nccl_barrier(pr_comm *c, pr_err *err)
{
    double one = 1;
    return nccl_avg_host(c, &one, 1, err);
}

static void nccl_free(pr_comm *c)
{
    nccl_state *s = c->impl;
    if (s->aborted) {
        /* the comm is gone; the rest is released with the process */
    } else {
        cudaStreamSynchronize(s->stream);
        s->api.comm_destroy(s->comm);
        cudaFree(s->scratch);
        cudaFreeHost(s->pinned);
        cudaEventDestroy(s->ready);
        cudaEventDestroy(s->done);
        cudaStreamDestroy(s->stream);
    }
    free(s);
    free(c);
}

int pr_comm_nccl_open(pr_comm **out, const pr_dist_env *e, double timeout_s, pr_err *err)
{
    *out = NULL;
    nccl_state *s = calloc(1, sizeof *s);
    pr_comm *c = calloc(1, sizeof *c);
    PR_CHECK(s && c, "nccl: out of host memory");
    *c = (pr_comm){.rank = e->rank, .world = e->world, .backend = "nccl", .timeout_s = timeout_s,
                   .allreduce_avg = nccl_allreduce_avg, .broadcast = nccl_broadcast, .avg_host = nccl_avg_host,
                   .wait = nccl_wait, .barrier = nccl_barrier, .abort = nccl_abort, .free = nccl_free, .impl = s};
    snprintf(s->path, sizeof s->path, "%s", e->file);
    nccl_unique_id id;
    int rc = load_api(s, &e->nccl, err);
    if (!rc && e->rank == 0) rc = check(c, s->api.get_unique_id(&id), "get unique id", err) || write_id(s->path, &id, err);
    if (!rc && e->rank != 0) rc = read_id(s->path, e->rank, timeout_s, &id, err);
    if (!rc) rc = check(c, s->api.comm_init_rank(&s->comm, e->world, id, e->rank), "comm init", err);
    if (!rc) rc = check_cuda(c, cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking), "cudaStreamCreate", err) ||
                  check_cuda(c, cudaEventCreateWithFlags(&s->ready, cudaEventDisableTiming), "cudaEventCreate", err) ||
                  check_cuda(c, cudaEventCreateWithFlags(&s->done, cudaEventDisableTiming), "cudaEventCreate", err) ||
                  check_cuda(c, cudaMalloc((void **)&s->scratch, 64 * sizeof(double)), "cudaMalloc", err) ||
                  check_cuda(c, cudaMallocHost((void **)&s->pinned, 64 * sizeof(double)), "cudaMallocHost", err);
    /* every rank has read the id once the first collective is through: the file can go */
    if (!rc) rc = nccl_barrier(c, err);
    if (e->rank == 0) unlink(s->path);
    if (rc) {
        free(s), free(c);
        return -1;
    }
    *out = c;
    return 0;
}
#endif

int pr_dist_set_device(int local_rank, pr_err *err)
{
#ifdef PRISM_HAVE_CUDA
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return pr_errf(err, "rank: no CUDA device is visible");
    if (local_rank >= n)
        return pr_errf(err, "local rank %d: only %d CUDA devices are visible (--gpus wants one per rank)", local_rank, n);
    cudaError_t e = cudaSetDevice(local_rank);
    if (e != cudaSuccess) return pr_errf(err, "cudaSetDevice(%d) failed: %s", local_rank, cudaGetErrorString(e));
    return 0;
#else
    (void)local_rank;
    return pr_errf(err, "this prism was built without CUDA");
#endif
}
