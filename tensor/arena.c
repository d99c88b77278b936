/* tensor/arena.c: bump allocation in host blocks, plus a list of device
 * allocations returned on reset. Releasing an arena releases everything in
 * it at once; nothing inside is freed one by one. */
#include <stdlib.h>
#include <string.h>

#include "tensor/tensor.h"

/* Under AddressSanitizer the unused space of every block is poisoned, and so
 * is the padding after each allocation up to the next 64-byte boundary: a
 * write past an allocation stops the program, where it would otherwise land
 * silently in the neighbour's bytes (malloc's redzones sit around the whole
 * block, not around our allocations inside it). */
#if defined(__SANITIZE_ADDRESS__)
#define PR_ARENA_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PR_ARENA_ASAN 1
#endif
#endif
#ifdef PR_ARENA_ASAN
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define PR_ARENA_ALIGN 64
#define PR_ARENA_BLOCK (1u << 20) /* smallest host block */

typedef struct pr_block {
    struct pr_block *next;
    size_t size, used;
    unsigned char *mem;
} pr_block;

typedef struct pr_devalloc {
    struct pr_devalloc *next;
    pr_device dev;
    void *ptr;
    size_t bytes;
} pr_devalloc;

struct pr_arena {
    char name[32];
    size_t capacity;       /* 0 = unbounded */
    pr_block *blocks;      /* newest first; one block is kept on reset */
    pr_devalloc *devallocs;
    size_t used, peak;
    size_t blocks_made;    /* host blocks allocated so far (tests: a repeated step makes none) */
};

pr_arena *pr_arena_new(const char *name, size_t capacity)
{
    pr_arena *a = calloc(1, sizeof *a);
    PR_CHECK(a, "arena %s: out of host memory", name);
    snprintf(a->name, sizeof a->name, "%s", name ? name : "arena");
    a->capacity = capacity;
    return a;
}

static void free_block(pr_block *b)
{
    UNPOISON(b->mem, b->size);   /* the allocator's own bookkeeping takes over */
    free(b->mem);
    free(b);
}

static void release_device(pr_arena *a)
{
    for (pr_devalloc *d = a->devallocs; d;) {
        pr_devalloc *next = d->next;
        pr_device_free(d->dev, d->ptr, d->bytes);
        d = next;   /* the record itself lives in a host block */
    }
    a->devallocs = NULL;
}

void pr_arena_free(pr_arena *a)
{
    if (!a) return;
    release_device(a);
    for (pr_block *b = a->blocks; b;) {
        pr_block *next = b->next;
        free_block(b);
        b = next;
    }
    free(a);
}

static pr_block *new_block(pr_arena *a, size_t size)
{
    pr_block *b = calloc(1, sizeof *b);
    PR_CHECK(b, "arena %s: out of host memory", a->name);
    b->mem = aligned_alloc(PR_ARENA_ALIGN, size);
    PR_CHECK(b->mem, "arena %s: out of host memory (%zu bytes)", a->name, size);
    b->size = size;
    POISON(b->mem, size);
    a->blocks_made++;
    return b;
}

/* Keeps one block that holds what this round used: when the round spilled
 * into several blocks they are replaced by one of their summed use, so the
 * next round of the same allocations (a training step) fits in it. Freeing
 * the extra blocks every step instead would have the C library return them
 * to the kernel and the next step fault in fresh zeroed pages again. */
void pr_arena_reset(pr_arena *a)
{
    release_device(a);
    pr_block *b = a->blocks;
    if (b && b->next) {
        size_t total = 0;
        while (b) {
            pr_block *next = b->next;
            total += b->used;
            free_block(b);
            b = next;
        }
        size_t round = PR_ARENA_BLOCK;   /* whole MiBs, and some room to vary */
        total += total / 16;
        b = new_block(a, (total + round - 1) / round * round);
    }
    if (b) {
        b->used = 0;
        POISON(b->mem, b->size);
    }
    a->blocks = b;
    a->used = 0;
}

size_t pr_arena_used(const pr_arena *a) { return a->used; }
size_t pr_arena_blocks_made(const pr_arena *a) { return a->blocks_made; }
size_t pr_arena_peak(const pr_arena *a) { return a->peak; }
const char *pr_arena_name(const pr_arena *a) { return a->name; }

static void account(pr_arena *a, size_t bytes)
{
    if (a->capacity && a->used + bytes > a->capacity)
        pr_fatal("arena %s: out of space: %zu bytes needed, %zu of %zu available", a->name, bytes,
                 a->capacity - a->used, a->capacity);
    a->used += bytes;
    if (a->used > a->peak) a->peak = a->used;
}

/* Host memory of no set content; builds without NDEBUG fill it with 0xff
 * bytes, a NaN in every float dtype and -1 in every integer one, so that a
 * reader that wrongly counts on zeros shows up in the tests. */
void *pr_arena_alloc_uninit(pr_arena *a, size_t bytes)
{
    size_t need = (bytes + PR_ARENA_ALIGN - 1) & ~(size_t)(PR_ARENA_ALIGN - 1);
    if (need == 0) need = PR_ARENA_ALIGN;
    account(a, need);
    pr_block *b = a->blocks;
    if (!b || b->used + need > b->size) {
        size_t size = need > PR_ARENA_BLOCK ? need : PR_ARENA_BLOCK;
        if (b && b->size * 2 > size && b->size < (64u << 20)) size = b->size * 2;
        b = new_block(a, size);
        b->next = a->blocks;
        a->blocks = b;
    }
    void *p = b->mem + b->used;
    b->used += need;
    UNPOISON(p, bytes);
#ifndef NDEBUG
    memset(p, 0xff, bytes);
#endif
    return p;
}

void *pr_arena_alloc(pr_arena *a, size_t bytes)
{
    void *p = pr_arena_alloc_uninit(a, bytes);
    memset(p, 0, bytes);
    return p;
}

/* device data for a tensor of this arena: returned to the device allocator on reset */
void *pr_arena_alloc_device(pr_arena *a, pr_device dev, size_t bytes)
{
    pr_devalloc *d = pr_arena_alloc(a, sizeof *d);
    account(a, bytes);
    d->dev = dev;
    d->bytes = bytes;
    d->ptr = pr_device_alloc(dev, bytes);
    d->next = a->devallocs;
    a->devallocs = d;
    return d->ptr;
}
