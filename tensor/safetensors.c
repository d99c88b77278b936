/* tensor/safetensors.c: read and write the safetensors format.
 *
 * A file is an 8-byte little-endian header length N, N bytes of JSON
 * ({"name": {"dtype", "shape", "data_offsets": [begin, end]}, ...,
 * "__metadata__": {"k": "v"}}), then raw little-endian data; offsets count
 * from the start of the data section. The JSON goes through cJSON; every
 * field is checked so a malformed file is an error naming the file and the
 * field, never a silent wrong tensor. Writes are atomic (temp, fsync, rename).
 */
#include "tensor/tensor.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host (the format's byte order)"
#endif

#define PR_ST_META "__metadata__"
/* A header larger than this is refused before it is read: ours are a few KB,
 * 100k tensor names take about 8 MB, and a corrupt length must not make us
 * allocate gigabytes. */
#define PR_ST_MAX_HEADER ((uint64_t)100 << 20)

/* ---- dtype names ----------------------------------------------------------- */

static const struct { const char *name; pr_dtype dt; } st_dtypes[] = {
    {"F64", PR_F64}, {"F32", PR_F32}, {"BF16", PR_BF16}, {"I64", PR_I64}, {"I32", PR_I32},
};
#define ST_NDTYPES ((int)(sizeof st_dtypes / sizeof st_dtypes[0]))

static int st_dtype_from_name(const char *s, pr_dtype *dt) {
    for (int i = 0; i < ST_NDTYPES; i++)
        if (strcmp(s, st_dtypes[i].name) == 0) { *dt = st_dtypes[i].dt; return 0; }
    return -1;
}

static const char *st_dtype_to_name(pr_dtype dt) {
    for (int i = 0; i < ST_NDTYPES; i++)
        if (st_dtypes[i].dt == dt) return st_dtypes[i].name;
    return NULL;
}

/* ---- reading ---------------------------------------------------------------- */

static char *st_strdup(pr_arena *a, const char *s) {
    size_t n = strlen(s) + 1;
    char *p = pr_arena_alloc(a, n);
    memcpy(p, s, n);
    return p;
}

/* A JSON number that is a whole count in [0, 2^53] (exact in a double). */
static int st_json_count(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return -1;
    double d = j->valuedouble;
    if (!(d >= 0.0 && d <= 9007199254740992.0)) return -1;
    uint64_t u = (uint64_t)d;
    if ((double)u != d) return -1;
    *out = u;
    return 0;
}

/* One header entry checked against the data section size; fills the tensor's
 * dtype, shape and its [begin, end) byte range. */
typedef struct {
    pr_dtype dt;
    int ndim;
    int64_t shape[PR_MAX_DIMS];
    uint64_t begin, end;
} st_entry;

static int st_parse_entry(const char *path, const cJSON *e, uint64_t data_len, st_entry *out,
                          pr_err *err) {
    const char *name = e->string;
    if (!cJSON_IsObject(e))
        return pr_errf(err, "%s: tensor \"%s\": entry is not a JSON object", path, name);
    const cJSON *jdt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *jsh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *jof = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!jdt) return pr_errf(err, "%s: tensor \"%s\": missing \"dtype\"", path, name);
    if (!jsh) return pr_errf(err, "%s: tensor \"%s\": missing \"shape\"", path, name);
    if (!jof) return pr_errf(err, "%s: tensor \"%s\": missing \"data_offsets\"", path, name);
    if (!cJSON_IsString(jdt))
        return pr_errf(err, "%s: tensor \"%s\": \"dtype\" is not a JSON string", path, name);
    if (st_dtype_from_name(jdt->valuestring, &out->dt) != 0)
        return pr_errf(err, "%s: tensor \"%s\": unknown dtype \"%s\" (known: F64, F32, BF16, I64, I32)",
                       path, name, jdt->valuestring);
    if (!cJSON_IsArray(jsh))
        return pr_errf(err, "%s: tensor \"%s\": \"shape\" is not a JSON array", path, name);
    int ndim = cJSON_GetArraySize(jsh);
    if (ndim > PR_MAX_DIMS)
        return pr_errf(err, "%s: tensor \"%s\": too many dims (%d > PR_MAX_DIMS %d)", path, name, ndim,
                       PR_MAX_DIMS);
    uint64_t bytes = pr_dtype_size(out->dt), numel = 1;
    const cJSON *d;
    int i = 0;
    cJSON_ArrayForEach(d, jsh) {
        uint64_t v;
        if (st_json_count(d, &v) != 0)
            return pr_errf(err, "%s: tensor \"%s\": shape[%d] is not a non-negative integer", path, name, i);
        /* zero dims left out: any partial product of the dims must fit an int64 */
        if (__builtin_mul_overflow(bytes, v, &bytes) || __builtin_mul_overflow(numel, v ? v : 1, &numel) ||
            numel > (uint64_t)INT64_MAX)
            return pr_errf(err, "%s: tensor \"%s\": shape overflows 64 bits", path, name);
        out->shape[i++] = (int64_t)v;
    }
    out->ndim = ndim;
    if (!cJSON_IsArray(jof) || cJSON_GetArraySize(jof) != 2 ||
        st_json_count(cJSON_GetArrayItem(jof, 0), &out->begin) != 0 ||
        st_json_count(cJSON_GetArrayItem(jof, 1), &out->end) != 0)
        return pr_errf(err, "%s: tensor \"%s\": \"data_offsets\" is not an array of two non-negative integers",
                       path, name);
    if (out->end < out->begin)
        return pr_errf(err, "%s: tensor \"%s\": data_offsets end %llu < begin %llu", path, name,
                       (unsigned long long)out->end, (unsigned long long)out->begin);
    if (out->end > data_len)
        return pr_errf(err, "%s: tensor \"%s\": data_offsets [%llu, %llu] out of range (data section is %llu bytes)",
                       path, name, (unsigned long long)out->begin, (unsigned long long)out->end,
                       (unsigned long long)data_len);
    if (out->end - out->begin != bytes)
        return pr_errf(err, "%s: tensor \"%s\": byte length %llu does not match shape and dtype (%llu bytes)",
                       path, name, (unsigned long long)(out->end - out->begin), (unsigned long long)bytes);
    return 0;
}

static int st_cmp_names(const void *pa, const void *pb) {
    return strcmp(*(const char *const *)pa, *(const char *const *)pb);
}

/* A name that occurs twice among names[0..n), or NULL: a sorted copy makes
 * this O(n log n), where comparing every pair took seconds at 100k names. */
static const char *st_first_duplicate(const char *const *names, int n) {
    if (n < 2) return NULL;
    const char **sorted = malloc((size_t)n * sizeof *sorted);
    PR_CHECK(sorted, "safetensors: out of host memory for %d names", n);
    memcpy(sorted, names, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, st_cmp_names);
    const char *dup = NULL;
    for (int i = 1; i < n && !dup; i++)
        if (strcmp(sorted[i - 1], sorted[i]) == 0) dup = sorted[i];
    free(sorted);
    return dup;
}

static int st_parse_meta(const char *path, const cJSON *m, pr_arena *a, pr_safetensors *out, pr_err *err) {
    if (!cJSON_IsObject(m)) return pr_errf(err, "%s: \"%s\" is not a JSON object", path, PR_ST_META);
    if (out->meta_keys) return pr_errf(err, "%s: duplicate \"%s\" object", path, PR_ST_META);
    int n = cJSON_GetArraySize(m);
    out->meta_keys = pr_arena_alloc(a, (size_t)(n ? n : 1) * sizeof(char *));
    out->meta_values = pr_arena_alloc(a, (size_t)(n ? n : 1) * sizeof(char *));
    const cJSON *kv;
    cJSON_ArrayForEach(kv, m) {
        if (!cJSON_IsString(kv))
            return pr_errf(err, "%s: %s value of \"%s\" is not a JSON string", path, PR_ST_META, kv->string);
        out->meta_keys[out->n_meta] = st_strdup(a, kv->string);
        out->meta_values[out->n_meta] = st_strdup(a, kv->valuestring);
        out->n_meta++;
    }
    const char *dup = st_first_duplicate((const char *const *)out->meta_keys, out->n_meta);
    if (dup) return pr_errf(err, "%s: duplicate %s key \"%s\"", path, PR_ST_META, dup);
    return 0;
}

/* Reads one tensor's bytes straight into its storage. */
static int st_read_data(const char *path, FILE *f, uint64_t data_start, const st_entry *e, pr_tensor *t,
                        pr_err *err) {
    size_t n = (size_t)(e->end - e->begin);
    if (n == 0) return 0;
    if (fseeko(f, (off_t)(data_start + e->begin), SEEK_SET) != 0 || fread(t->data, 1, n, f) != n)
        return pr_errf(err, "%s: tensor \"%s\": cannot read %zu bytes of data: %s", path, t->name, n,
                       ferror(f) ? strerror(errno) : "unexpected end of file");
    return 0;
}

static bool st_only_space(const char *p, const char *end) {
    for (; p < end; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') return false;
    return true;
}

/* Parses the header JSON and makes every tensor; f is positioned anywhere. */
static int st_read_body(const char *path, FILE *f, const char *hdr, uint64_t hlen, uint64_t data_len,
                        pr_arena *a, pr_safetensors *out, pr_err *err) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(hdr, (size_t)hlen, &end, 0);
    if (!root)
        return pr_errf(err, "%s: bad JSON in header at byte %lld of %llu (near \"%.20s\")", path,
                       end ? (long long)(end - hdr) : -1LL, (unsigned long long)hlen, end ? end : "");
    int rc = 0;
    if (!cJSON_IsObject(root)) {
        rc = pr_errf(err, "%s: header is not a JSON object", path);
    } else if (!st_only_space(end, hdr + hlen)) {
        rc = pr_errf(err, "%s: bad JSON in header: trailing bytes at byte %lld", path, (long long)(end - hdr));
    }
    int cap = rc ? 0 : cJSON_GetArraySize(root);
    out->names = pr_arena_alloc(a, (size_t)(cap ? cap : 1) * sizeof(char *));
    out->tensors = pr_arena_alloc(a, (size_t)(cap ? cap : 1) * sizeof(pr_tensor *));
    st_entry *entries = malloc((size_t)(cap ? cap : 1) * sizeof *entries);
    PR_CHECK(entries, "%s: out of host memory for %d header entries", path, cap);
    int n = 0;   /* every entry is checked before any data is read */
    for (const cJSON *e = rc ? NULL : root->child; e && rc == 0; e = e->next) {
        if (strcmp(e->string, PR_ST_META) == 0) { rc = st_parse_meta(path, e, a, out, err); continue; }
        rc = st_parse_entry(path, e, data_len, &entries[n], err);
        if (rc == 0) out->names[n++] = st_strdup(a, e->string);
    }
    const char *dup = rc ? NULL : st_first_duplicate((const char *const *)out->names, n);
    if (dup) rc = pr_errf(err, "%s: duplicate tensor name \"%s\"", path, dup);
    const uint64_t data_start = 8 + hlen;
    for (int i = 0; i < n && rc == 0; i++) {
        const st_entry *en = &entries[i];
        pr_tensor *t = pr_empty(a, en->dt, PR_CPU, en->ndim, en->shape);
        t->name = out->names[i];
        out->tensors[out->n++] = t;
        rc = st_read_data(path, f, data_start, en, t, err);
    }
    free(entries);
    cJSON_Delete(root);
    return rc;
}

int pr_safetensors_read(const char *path, pr_arena *a, pr_safetensors *out, pr_err *err) {
    pr_err local;
    if (!err) err = &local;
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) return pr_errf(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb = {0};
    unsigned char len8[8];
    char *hdr = NULL;
    int rc = 0;
    if (fstat(fileno(f), &sb) != 0) {
        rc = pr_errf(err, "%s: cannot stat: %s", path, strerror(errno));
    } else if (!S_ISREG(sb.st_mode)) {
        rc = pr_errf(err, "%s: not a regular file", path);
    } else if (sb.st_size < 8) {
        rc = pr_errf(err, "%s: file is %lld bytes, shorter than the 8-byte header length", path,
                     (long long)sb.st_size);
    } else if (fread(len8, 1, 8, f) != 8) {
        rc = pr_errf(err, "%s: cannot read the header length: %s", path, strerror(errno));
    }
    uint64_t hlen = 0, fsize = (uint64_t)sb.st_size;
    for (int i = 7; rc == 0 && i >= 0; i--) hlen = hlen << 8 | len8[i];
    if (rc == 0 && hlen > fsize - 8)
        rc = pr_errf(err, "%s: header length %llu larger than the file (%llu bytes after the length)", path,
                     (unsigned long long)hlen, (unsigned long long)(fsize - 8));
    if (rc == 0 && hlen > PR_ST_MAX_HEADER)
        rc = pr_errf(err, "%s: header length %llu is over the limit of %llu bytes", path, (unsigned long long)hlen,
                     (unsigned long long)PR_ST_MAX_HEADER);
    if (rc == 0) {
        hdr = malloc((size_t)hlen + 1);
        if (!hdr) rc = pr_errf(err, "%s: out of memory for a %llu-byte header", path, (unsigned long long)hlen);
        else if (fread(hdr, 1, (size_t)hlen, f) != (size_t)hlen)
            rc = pr_errf(err, "%s: cannot read the %llu-byte header: %s", path, (unsigned long long)hlen,
                         ferror(f) ? strerror(errno) : "unexpected end of file");
    }
    if (rc == 0) {
        hdr[hlen] = '\0';
        rc = st_read_body(path, f, hdr, hlen, fsize - 8 - hlen, a, out, err);
    }
    free(hdr);
    fclose(f);
    if (rc != 0) memset(out, 0, sizeof *out); /* what was allocated stays in the arena */
    return rc;
}

pr_tensor *pr_safetensors_get(const pr_safetensors *st, const char *name) {
    for (int i = 0; i < st->n; i++)
        if (strcmp(st->names[i], name) == 0) return st->tensors[i];
    return NULL;
}

const char *pr_safetensors_meta(const pr_safetensors *st, const char *key) {
    for (int i = 0; i < st->n_meta; i++)
        if (strcmp(st->meta_keys[i], key) == 0) return st->meta_values[i];
    return NULL;
}

/* ---- writing ---------------------------------------------------------------- */

/* The header JSON, padded with spaces to a multiple of 8 so the data section
 * starts 8-byte aligned. Returns a malloc'd string, or NULL with err set. */
static char *st_build_header(const char *path, int n, const char *const *names,
                             const pr_tensor *const *tensors, int n_meta, const char *const *keys,
                             const char *const *values, size_t *len, pr_err *err) {
    cJSON *root = cJSON_CreateObject();
    const char *bad = root ? NULL : "out of memory";
    if (n_meta > 0 && !bad) {
        cJSON *m = cJSON_AddObjectToObject(root, PR_ST_META);
        for (int i = 0; i < n_meta && !bad; i++) {
            if (!keys[i] || !values[i]) bad = "metadata key or value is NULL";
            else if (!cJSON_AddStringToObject(m, keys[i], values[i])) bad = "out of memory";
        }
    }
    uint64_t off = 0;
    for (int i = 0; i < n && !bad; i++)
        if (!names[i] || !tensors[i]) bad = "tensor or name is NULL";
    const char *clash = bad ? NULL : st_first_duplicate(names, n);
    for (int i = 0; i < n && !bad && !clash; i++)
        if (strcmp(names[i], PR_ST_META) == 0) clash = names[i];
    if (clash) {
        cJSON_Delete(root);
        pr_errf(err, "%s: tensor name \"%s\" is duplicate or reserved", path, clash);
        return NULL;
    }
    for (int i = 0; i < n && !bad; i++) {
        const pr_tensor *t = tensors[i];
        const char *dt = st_dtype_to_name(t->dtype);
        if (!dt) { bad = "tensor of a dtype safetensors.c cannot write"; break; }
        cJSON *e = cJSON_AddObjectToObject(root, names[i]);
        cJSON_AddStringToObject(e, "dtype", dt);
        cJSON *sh = cJSON_AddArrayToObject(e, "shape");
        cJSON *of = cJSON_AddArrayToObject(e, "data_offsets");
        for (int d = 0; d < t->ndim; d++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t->shape[d]));
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)off));
        off += pr_nbytes(t);
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)off));
    }
    char *json = bad ? NULL : cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!json) {
        pr_errf(err, "%s: cannot build the header: %s", path, bad ? bad : "out of memory");
        return NULL;
    }
    size_t jl = strlen(json), padded = (jl + 7) / 8 * 8;
    char *h = realloc(json, padded + 1);
    if (!h) { free(json); pr_errf(err, "%s: out of memory", path); return NULL; }
    memset(h + jl, ' ', padded - jl);
    h[padded] = '\0';
    *len = padded;
    return h;
}

static int st_write_tensor(FILE *f, const pr_tensor *t) {
    size_t n = pr_nbytes(t);
    if (n == 0) return 0;
    if (t->device == PR_CPU) return fwrite(t->data, 1, n, f) == n ? 0 : -1;
    void *host = malloc(n); /* device tensors go through the host */
    if (!host) { errno = ENOMEM; return -1; }
    pr_device_memcpy(host, PR_CPU, t->data, t->device, n);
    int rc = fwrite(host, 1, n, f) == n ? 0 : -1;
    free(host);
    return rc;
}

/* Best effort: make the rename itself durable. */
static void st_fsync_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash) snprintf(dir, sizeof dir, ".");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path) + (slash == path), path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) { fsync(fd); close(fd); }
}

int pr_safetensors_write(const char *path, int n, const char *const *names, const pr_tensor *const *tensors,
                         int n_meta, const char *const *meta_keys, const char *const *meta_values,
                         pr_err *err) {
    pr_err local;
    if (!err) err = &local;
    size_t hlen = 0;
    char *hdr = st_build_header(path, n, names, tensors, n_meta, meta_keys, meta_values, &hlen, err);
    if (!hdr) return -1;
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp) {
        free(hdr);
        return pr_errf(err, "%s: path too long", path);
    }
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        int e = errno;
        free(hdr);
        return pr_errf(err, "%s: cannot create %s: %s", path, tmp, strerror(e));
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    int ok = fwrite(len8, 1, 8, f) == 8 && fwrite(hdr, 1, hlen, f) == hlen;
    for (int i = 0; ok && i < n; i++) ok = st_write_tensor(f, tensors[i]) == 0;
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int e = errno;
    if (fclose(f) != 0 && ok) { ok = 0; e = errno; }
    free(hdr);
    if (!ok) {
        remove(tmp);
        return pr_errf(err, "%s: cannot write %s: %s", path, tmp, strerror(e));
    }
    if (rename(tmp, path) != 0) {
        e = errno;
        remove(tmp);
        return pr_errf(err, "%s: cannot rename %s onto it: %s", path, tmp, strerror(e));
    }
    st_fsync_dir(path);
    return 0;
}
