/* tests/test_safetensors.c: safetensors read/write.
 *
 * Round trips every dtype (with a 0-dim, a 6-dim and an empty tensor plus
 * metadata), reads the reference files of tests/data, checks that each kind of
 * malformed file gives an error naming the file and the problem, and that
 * writes are atomic: no temp file left behind, an existing file survives a
 * failed write.
 */
#include "tests/pr_test.h"
#include "tensor/tensor.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- fixtures: a temp directory per test -------------------------------------- */

typedef struct {
    char dir[256];
    pr_arena *a;
} st_fix;

static int fix_setup(void **state) {
    st_fix *f = calloc(1, sizeof *f);
    const char *tmp = getenv("TMPDIR");
    snprintf(f->dir, sizeof f->dir, "%s/prism_st_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!f->dir[0] || !mkdtemp(f->dir)) { free(f); return -1; }
    f->a = pr_arena_new("test_safetensors", 0);
    *state = f;
    return 0;
}

/* Removes the directory's entries (files and empty dirs, one level deep). */
static void rm_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        chmod(p, 0700);
        if (remove(p) != 0) { rm_tree(p); rmdir(p); }
    }
    closedir(d);
    chmod(dir, 0700);
    rmdir(dir);
}

static int fix_teardown(void **state) {
    st_fix *f = *state;
    pr_arena_free(f->a);
    rm_tree(f->dir);
    free(f);
    return 0;
}

static const char *fpath(st_fix *f, const char *name, char *buf, size_t n) {
    snprintf(buf, n, "%s/%s", f->dir, name);
    return buf;
}

static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

static long read_bytes(const char *path, unsigned char *buf, long cap) {
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    long n = (long)fread(buf, 1, (size_t)cap, fp);
    fclose(fp);
    return n;
}

/* ---- round trip ------------------------------------------------------------------ */

static void check_same(const pr_tensor *got, const pr_tensor *ref) {
    assert_int_equal(got->dtype, ref->dtype);
    assert_int_equal(got->device, PR_CPU);
    assert_int_equal(got->ndim, ref->ndim);
    for (int d = 0; d < ref->ndim; d++) assert_int_equal(got->shape[d], ref->shape[d]);
    assert_int_equal(got->numel, ref->numel);
    if (pr_nbytes(ref)) assert_memory_equal(got->data, ref->data, pr_nbytes(ref));
}

static void test_roundtrip(void **state) {
    st_fix *f = *state;
    pr_arena *a = f->a;
    pr_rng r = pr_rng_init(7, 0);
    pr_tensor *t[7];
    t[0] = pr_randn(a, PR_F64, PR_CPU, PR_DIMS(2, 3), &r);
    t[1] = pr_randn(a, PR_F32, PR_CPU, PR_DIMS(5), &r);
    const uint16_t bf[3] = {0x3f80, 0xc000, 0x7f80}; /* 1, -2, inf */
    t[2] = pr_from_host(a, PR_BF16, PR_CPU, PR_DIMS(3), bf);
    const int64_t i64[4] = {INT64_MIN, -1, 0, INT64_MAX};
    t[3] = pr_from_host(a, PR_I64, PR_CPU, PR_DIMS(2, 2), i64);
    const int32_t i32 = -123456;
    const int64_t no_dims[1] = {0};
    t[4] = pr_from_host(a, PR_I32, PR_CPU, 0, no_dims, &i32);               /* 0-dim */
    t[5] = pr_randn(a, PR_F32, PR_CPU, PR_DIMS(2, 1, 3, 1, 2, 2), &r);      /* 6-dim */
    t[6] = pr_empty(a, PR_F64, PR_CPU, PR_DIMS(0, 3));                      /* empty */
    const char *names[7] = {"w.f64", "b.f32", "bf16", "ids \"quoted\"", "scalar", "six", "empty"};
    const char *keys[2] = {"format", "note"}, *vals[2] = {"pt", "unicode \xc3\xa9 and \\ slash"};
    char p[512], p2[512];
    pr_err err = {{0}};
    fpath(f, "rt.safetensors", p, sizeof p);
    assert_int_equal(pr_safetensors_write(p, 7, names, (const pr_tensor *const *)t, 2, keys, vals, &err), 0);

    pr_safetensors st;
    assert_int_equal(pr_safetensors_read(p, a, &st, &err), 0);
    assert_int_equal(st.n, 7);
    for (int i = 0; i < 7; i++) {
        assert_string_equal(st.names[i], names[i]);  /* the given order */
        check_same(st.tensors[i], t[i]);
        assert_ptr_equal(pr_safetensors_get(&st, names[i]), st.tensors[i]);
    }
    assert_int_equal(st.tensors[4]->ndim, 0);
    assert_int_equal(st.tensors[4]->numel, 1);
    assert_null(pr_safetensors_get(&st, "absent"));
    assert_int_equal(st.n_meta, 2);
    assert_string_equal(pr_safetensors_meta(&st, "format"), "pt");
    assert_string_equal(pr_safetensors_meta(&st, "note"), vals[1]);
    assert_null(pr_safetensors_meta(&st, "absent"));

    /* header padded to a multiple of 8; the same input writes the same bytes */
    static unsigned char b1[1 << 16], b2[1 << 16];
    long n1 = read_bytes(p, b1, sizeof b1);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | b1[i];
    assert_int_equal(hlen % 8, 0);
    assert_int_equal((long)(8 + hlen + 6 * 8 + 5 * 4 + 3 * 2 + 4 * 8 + 4 + 24 * 4), n1);
    assert_int_equal(pr_safetensors_write(fpath(f, "rt2.safetensors", p2, sizeof p2), 7, names,
                                          (const pr_tensor *const *)t, 2, keys, vals, &err), 0);
    assert_int_equal(read_bytes(p2, b2, sizeof b2), n1);
    assert_memory_equal(b1, b2, (size_t)n1);
}

static void test_no_tensors(void **state) {
    st_fix *f = *state;
    char p[512];
    pr_err err = {{0}};
    pr_safetensors st;
    fpath(f, "empty.safetensors", p, sizeof p);
    assert_int_equal(pr_safetensors_write(p, 0, NULL, NULL, 0, NULL, NULL, &err), 0);
    assert_int_equal(pr_safetensors_read(p, f->a, &st, &err), 0);
    assert_int_equal(st.n, 0);
    assert_int_equal(st.n_meta, 0);
}

/* ---- the reference files of tests/data ------------------------------------------- */

static void test_golden(void **state) {
    st_fix *f = *state;
    const char *p = pr_test_golden_path();
    pr_safetensors st;
    pr_err err = {{0}};
    int rc = pr_safetensors_read(p, f->a, &st, &err);
    if (rc != 0) fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(rc, 0);
    assert_true(st.n > 50);
    pr_tensor *q = pr_safetensors_get(&st, "gdn.q");
    assert_non_null(q);
    assert_int_equal(q->dtype, PR_F64);
    assert_int_equal(q->ndim, 4);
    const int64_t qs[4] = {2, 50, 2, 16};
    for (int d = 0; d < 4; d++) assert_int_equal(q->shape[d], qs[d]);
    assert_string_equal(q->name, "gdn.q");
    pr_tensor *kx = pr_safetensors_get(&st, "prism_core.kx");
    assert_non_null(kx);
    assert_int_equal(kx->ndim, 5);
    assert_int_equal(kx->shape[3], 2);
    pr_tensor *h0 = pr_safetensors_get(&st, "gdn.h0");
    assert_non_null(h0);
    assert_int_equal(h0->ndim, 4);
    assert_int_equal(h0->shape[2], 16);
    assert_int_equal(h0->shape[3], 8);
    pr_tensor *scale = pr_safetensors_get(&st, "gdn.scale");
    assert_non_null(scale);
    assert_true(scale->numel == 1 && pr_get(scale, 0) == 0.25); /* 16^-1/2 */
    const char *shape = pr_safetensors_meta(&st, "shape");
    assert_non_null(shape);
    assert_non_null(strstr(shape, "B=2"));
    assert_non_null(strstr(shape, "T=50"));
}

/* Every file of tests/data reads, holds f64 tensors only, and each gradient
 * d<name> has the shape of the tensor <name> beside it: a truncated or
 * mixed-up copy of the reference vectors fails here, not deep in an op test. */
static void check_data_file(st_fix *f, const char *file, int min_pairs)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", PR_TEST_DATA_DIR, file);
    pr_safetensors st;
    pr_err err = {{0}};
    if (pr_safetensors_read(path, f->a, &st, &err) != 0) fail_msg("%s", err.msg);
    int pairs = 0;
    for (int i = 0; i < st.n; i++) {
        const pr_tensor *t = st.tensors[i];
        if (t->dtype != PR_F64) fail_msg("%s: %s is not f64", file, st.names[i]);
        const char *dot = strchr(st.names[i], '.');
        if (!dot || dot[1] != 'd') continue;
        char base[128];
        snprintf(base, sizeof base, "%.*s%s", (int)(dot + 1 - st.names[i]), st.names[i], dot + 2);
        const pr_tensor *x = pr_safetensors_get(&st, base);
        if (!x) continue; /* an upstream gradient (do, dht) or a name that starts with d */
        if (x->ndim != t->ndim) fail_msg("%s: %s and %s differ in rank", file, st.names[i], base);
        for (int d = 0; d < t->ndim; d++)
            if (x->shape[d] != t->shape[d]) fail_msg("%s: %s and %s differ in shape", file, st.names[i], base);
        pairs++;
    }
    if (pairs < min_pairs) fail_msg("%s: %d gradient/value pairs, expected at least %d", file, pairs, min_pairs);
}

static void test_data_files(void **state)
{
    /* 6 rules with 3 to 9 inputs each, and 4 ops with 5 to 12 inputs each */
    check_data_file(*state, "recurrences.safetensors", 40);
    check_data_file(*state, "ops2.safetensors", 40);
}

/* ---- malformed files ------------------------------------------------------------ */

/* Writes 8-byte length `hlen` (or strlen(json) when hlen < 0), the JSON and
 * `ndata` zero bytes. */
static void write_raw(const char *p, const char *json, long long hlen, size_t ndata) {
    FILE *fp = fopen(p, "wb");
    assert_non_null(fp);
    uint64_t n = hlen < 0 ? strlen(json) : (uint64_t)hlen;
    for (int i = 0; i < 8; i++) fputc((int)(n >> (8 * i) & 0xff), fp);
    fwrite(json, 1, strlen(json), fp);
    for (size_t i = 0; i < ndata; i++) fputc(0, fp);
    fclose(fp);
}

static void expect_fail(st_fix *f, const char *p, const char *phrase) {
    pr_safetensors st;
    pr_err err = {{0}};
    assert_int_equal(pr_safetensors_read(p, f->a, &st, &err), -1);
    if (!strstr(err.msg, phrase) || !strstr(err.msg, p))
        fail_msg("message \"%s\" lacks \"%s\" or the file name", err.msg, phrase);
    assert_int_equal(st.n, 0);
}

static void expect_bad_json(st_fix *f, const char *json, size_t ndata, const char *phrase) {
    char p[512];
    fpath(f, "bad.safetensors", p, sizeof p);
    write_raw(p, json, -1, ndata);
    expect_fail(f, p, phrase);
}

static void test_bad_file_level(void **state) {
    st_fix *f = *state;
    char p[512];
    expect_fail(f, fpath(f, "missing.safetensors", p, sizeof p), "cannot open");
    expect_fail(f, fpath(f, "missing.safetensors", p, sizeof p), "No such file");
    expect_fail(f, f->dir, "not a regular file");
    FILE *fp = fopen(fpath(f, "short.safetensors", p, sizeof p), "wb");
    fwrite("abc", 1, 3, fp);
    fclose(fp);
    expect_fail(f, p, "shorter than the 8-byte header length");
    write_raw(fpath(f, "long.safetensors", p, sizeof p), "{}", 1000, 0);
    expect_fail(f, p, "header length 1000 larger than the file");
    write_raw(fpath(f, "huge.safetensors", p, sizeof p), "{}", -2 + (1LL << 62), 0);
    expect_fail(f, p, "larger than the file");
}

static void test_bad_json(void **state) {
    st_fix *f = *state;
    expect_bad_json(f, "{\"a\": {\"dtype\": ", 0, "bad JSON in header at byte");
    expect_bad_json(f, "", 0, "bad JSON");
    expect_bad_json(f, "{} x", 0, "trailing bytes");
    expect_bad_json(f, "[1, 2]", 0, "header is not a JSON object");
}

/* a file of one tensor "a" whose entry is {"dtype": dtype, "shape": shape,
 * "data_offsets": offsets} (JSON values, as written) */
static void expect_bad_entry(st_fix *f, const char *dtype, const char *shape, const char *offsets, size_t ndata,
                             const char *phrase) {
    char json[256];
    snprintf(json, sizeof json, "{\"a\": {\"dtype\": %s, \"shape\": %s, \"data_offsets\": %s}}", dtype, shape,
             offsets);
    expect_bad_json(f, json, ndata, phrase);
}

static void test_bad_entries(void **state) {
    st_fix *f = *state;
    expect_bad_json(f, "{\"a\": 3}", 0, "tensor \"a\": entry is not a JSON object");
    expect_bad_json(f, "{\"a\": {\"shape\": [1], \"data_offsets\": [0, 8]}}", 8, "missing \"dtype\"");
    expect_bad_json(f, "{\"a\": {\"dtype\": \"F64\", \"data_offsets\": [0, 8]}}", 8, "missing \"shape\"");
    expect_bad_json(f, "{\"a\": {\"dtype\": \"F64\", \"shape\": [1]}}", 8, "missing \"data_offsets\"");
    expect_bad_entry(f, "5", "[1]", "[0, 8]", 8, "\"dtype\" is not a JSON string");
    expect_bad_entry(f, "\"F64\"", "\"1\"", "[0, 8]", 8, "\"shape\" is not a JSON array");
    expect_bad_entry(f, "\"F64\"", "[-1]", "[0, 8]", 8, "shape[0] is not a non-negative integer");
    expect_bad_entry(f, "\"F64\"", "[1.5]", "[0, 8]", 8, "shape[0] is not a non-negative integer");
    expect_bad_entry(f, "\"F64\"", "[1]", "[0]", 8, "\"data_offsets\" is not an array of two");
    expect_bad_entry(f, "\"F64\"", "[1]", "{}", 8, "\"data_offsets\" is not an array of two");
    expect_bad_entry(f, "\"F16\"", "[1]", "[0, 2]", 2, "unknown dtype \"F16\"");
    expect_bad_entry(f, "\"F64\"", "[1]", "[8, 16]", 8, "out of range");
    expect_bad_entry(f, "\"F64\"", "[]", "[8, 0]", 8, "end 0 < begin 8");
    expect_bad_entry(f, "\"F64\"", "[2]", "[0, 8]", 8, "byte length 8 does not match shape and dtype (16 bytes)");
    expect_bad_entry(f, "\"I32\"", "[1,1,1,1,1,1,1]", "[0, 4]", 4, "too many dims (7 > PR_MAX_DIMS 6)");
    expect_bad_entry(f, "\"F64\"", "[4294967296, 4294967296]", "[0, 8]", 8, "overflows");
    expect_bad_json(f, "{\"a\": {\"dtype\": \"F64\", \"shape\": [], \"data_offsets\": [0, 8]}, "
                       "\"a\": {\"dtype\": \"F64\", \"shape\": [], \"data_offsets\": [0, 8]}}", 8,
                    "duplicate tensor name \"a\"");
    expect_bad_json(f, "{\"__metadata__\": {\"k\": 1}}", 0, "value of \"k\" is not a JSON string");
    expect_bad_json(f, "{\"__metadata__\": [1]}", 0, "\"__metadata__\" is not a JSON object");
    expect_bad_entry(f, "\"F64\"", "[0, 9007199254740992, 9007199254740992]", "[0, 0]", 0, "overflows");
}

/* Issue 45: a second "__metadata__" object once grew n_meta past the new key
 * array (SIGSEGV); duplicate metadata keys are as ambiguous as duplicate
 * tensor names. */
static void test_duplicate_metadata(void **state) {
    st_fix *f = *state;
    expect_bad_json(f, "{\"__metadata__\": {\"a\": \"1\", \"b\": \"2\", \"c\": \"3\"}, "
                       "\"__metadata__\": {\"d\": \"4\"}}", 0, "duplicate \"__metadata__\" object");
    char many[4096] = "{\"__metadata__\": {";
    for (int i = 0; i < 40; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "%s\"k%d\": \"v\"", i ? ", " : "", i);
    strcat(many, "}, \"__metadata__\": {");
    for (int i = 0; i < 40; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "%s\"j%d\": \"v\"", i ? ", " : "", i);
    strcat(many, "}}");
    expect_bad_json(f, many, 0, "duplicate \"__metadata__\" object");
    expect_bad_json(f, "{\"__metadata__\": {\"k\": \"1\", \"k\": \"2\"}}", 0, "duplicate __metadata__ key \"k\"");
}

/* A header longer than the limit is refused before it is allocated. */
static void test_header_limit(void **state) {
    st_fix *f = *state;
    char p[512];
    fpath(f, "big.safetensors", p, sizeof p);
    FILE *fp = fopen(p, "wb");
    assert_non_null(fp);
    uint64_t n = (uint64_t)200 << 20;
    for (int i = 0; i < 8; i++) fputc((int)(n >> (8 * i) & 0xff), fp);
    assert_int_equal(ftruncate(fileno(fp), (off_t)(n + 8)), 0);   /* sparse: no 200 MB written */
    fclose(fp);
    expect_fail(f, p, "over the limit");
}

/* A header of n scalar F32 tensors sharing 4 data bytes, named t<k> in a
 * scrambled order; with dup_last the last one repeats the first name. */
static char *many_names_json(int n, bool dup_last) {
    size_t cap = (size_t)n * 64 + 64, len = 0;
    char *json = malloc(cap);
    assert_non_null(json);
    len += (size_t)snprintf(json, cap, "{");
    for (int i = 0; i < n; i++) {
        int k = dup_last && i == n - 1 ? 0 : (int)((int64_t)i * 7919 % n);
        len += (size_t)snprintf(json + len, cap - len,
                                "%s\"t%d\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}", i ? "," : "", k);
    }
    snprintf(json + len, cap - len, "}");
    return json;
}

/* Issue 45: 100k tensor names took 21-39 s (every name compared with every
 * other); sorted, they read in well under a second. The test has no clock:
 * a quadratic parser makes it time out. A late duplicate is still found. */
static void test_many_names(void **state) {
    st_fix *f = *state;
    enum { N = 100000 };
    char p[512];
    fpath(f, "many.safetensors", p, sizeof p);
    char *json = many_names_json(N, false);
    write_raw(p, json, -1, 4);
    free(json);
    pr_safetensors st;
    pr_err err = {{0}};
    assert_int_equal(pr_safetensors_read(p, f->a, &st, &err), 0);
    assert_int_equal(st.n, N);
    assert_non_null(pr_safetensors_get(&st, "t99999"));
    json = many_names_json(N, true);
    write_raw(p, json, -1, 4);
    free(json);
    expect_fail(f, p, "duplicate tensor name \"t0\"");
}

/* Two tensors may share bytes; a hand-written file with padding spaces reads. */
static void test_overlap_allowed(void **state) {
    st_fix *f = *state;
    char p[512];
    write_raw(fpath(f, "ov.safetensors", p, sizeof p),
              "{\"x\": {\"dtype\": \"I32\", \"shape\": [2], \"data_offsets\": [0, 8]}, "
              "\"y\": {\"dtype\": \"I64\", \"shape\": [], \"data_offsets\": [0, 8]}}   ", -1, 8);
    pr_safetensors st;
    pr_err err = {{0}};
    assert_int_equal(pr_safetensors_read(p, f->a, &st, &err), 0);
    assert_int_equal(st.n, 2);
    assert_int_equal(pr_safetensors_get(&st, "y")->ndim, 0);
    assert_true(pr_get(pr_safetensors_get(&st, "y"), 0) == 0.0);
}

/* ---- atomic writes ---------------------------------------------------------------- */

static int write_one(const char *p, double v, pr_arena *a, pr_err *err) {
    pr_tensor *t = pr_full(a, PR_F64, PR_CPU, PR_DIMS(3), v);
    const char *name = "t";
    const pr_tensor *ts[1] = {t};
    return pr_safetensors_write(p, 1, &name, ts, 0, NULL, NULL, err);
}

static double read_one(const char *p, pr_arena *a) {
    pr_safetensors st;
    pr_err err = {{0}};
    assert_int_equal(pr_safetensors_read(p, a, &st, &err), 0);
    return pr_get(pr_safetensors_get(&st, "t"), 2);
}

static void test_atomic_write(void **state) {
    st_fix *f = *state;
    char p[512], q[600];
    pr_err err = {{0}};
    fpath(f, "m.safetensors", p, sizeof p);
    assert_int_equal(write_one(p, 1.0, f->a, &err), 0);
    assert_int_equal(write_one(p, 2.0, f->a, &err), 0); /* replaces */
    assert_true(read_one(p, f->a) == 2.0);
    assert_int_equal(count_entries(f->dir), 1);          /* no temp file left */

    /* a path into a missing directory */
    fpath(f, "nodir/m.safetensors", q, sizeof q);
    assert_int_equal(write_one(q, 3.0, f->a, &err), -1);
    assert_non_null(strstr(err.msg, q));
    assert_non_null(strstr(err.msg, "No such file or directory"));

    /* the temp name is taken (by a directory): the write fails, the old file stays */
    snprintf(q, sizeof q, "%s.tmp.%ld", p, (long)getpid());
    assert_int_equal(mkdir(q, 0700), 0);
    assert_int_equal(write_one(p, 4.0, f->a, &err), -1);
    assert_non_null(strstr(err.msg, p));
    assert_non_null(strstr(err.msg, "Is a directory"));
    assert_int_equal(rmdir(q), 0);
    assert_true(read_one(p, f->a) == 2.0);
    assert_int_equal(count_entries(f->dir), 1);

    /* rename fails (the target is a non-empty directory): temp file removed */
    fpath(f, "d", q, sizeof q);
    assert_int_equal(mkdir(q, 0700), 0);
    char inner[700];
    snprintf(inner, sizeof inner, "%s/x", q);
    assert_int_equal(write_one(inner, 5.0, f->a, &err), 0);
    assert_int_equal(write_one(q, 6.0, f->a, &err), -1);
    assert_non_null(strstr(err.msg, "cannot rename"));
    assert_non_null(strstr(err.msg, q));
    assert_int_equal(count_entries(f->dir), 2);          /* m.safetensors and d */
    assert_int_equal(count_entries(q), 1);
}

/* An unwritable directory; root ignores permissions, so this needs a user. */
static void test_unwritable_dir(void **state) {
    st_fix *f = *state;
    if (geteuid() == 0) skip();
    char p[512];
    pr_err err = {{0}};
    fpath(f, "m.safetensors", p, sizeof p);
    assert_int_equal(write_one(p, 1.0, f->a, &err), 0);
    assert_int_equal(chmod(f->dir, 0500), 0);
    assert_int_equal(write_one(p, 2.0, f->a, &err), -1);
    chmod(f->dir, 0700);
    assert_non_null(strstr(err.msg, p));
    assert_non_null(strstr(err.msg, "Permission denied"));
    assert_true(read_one(p, f->a) == 1.0);
    assert_int_equal(count_entries(f->dir), 1);
}

static void test_write_bad_args(void **state) {
    st_fix *f = *state;
    char p[512];
    pr_err err = {{0}};
    fpath(f, "args.safetensors", p, sizeof p);
    pr_tensor *t = pr_zeros(f->a, PR_F32, PR_CPU, PR_DIMS(2));
    const pr_tensor *ts[2] = {t, t};
    const char *dup[2] = {"a", "a"}, *meta[1] = {"__metadata__"};
    assert_int_equal(pr_safetensors_write(p, 2, dup, ts, 0, NULL, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "duplicate or reserved"));
    assert_int_equal(pr_safetensors_write(p, 1, meta, ts, 0, NULL, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "\"__metadata__\""));
    assert_int_equal(count_entries(f->dir), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_roundtrip, fix_setup, fix_teardown),
        cmocka_unit_test_setup_teardown(test_no_tensors, fix_setup, fix_teardown),
        cmocka_unit_test_setup_teardown(test_golden, fix_setup, fix_teardown),
        cmocka_unit_test_setup_teardown(test_data_files, fix_setup, fix_teardown),
        cmocka_unit_test_setup_teardown(test_bad_file_level, fix_setup, fix_teardown),
        cmocka_unit_test_setup_teardown(test_bad_json, fix_setup, fix_teardown),
        cmocka_unit_test_setup_teardown(test_bad_entries, fix_setup, fix_teardown),
        cmocka_unit_test_setup_teardown(test_duplicate_metadata, fix_setup, fix_teardown),
        cmocka_unit_test_setup_teardown(test_header_limit, fix_setup, fix_teardown),
        cmocka_unit_test_setup_teardown(test_many_names, fix_setup, fix_teardown),
        cmocka_unit_test_setup_teardown(test_overlap_allowed, fix_setup, fix_teardown),
        cmocka_unit_test_setup_teardown(test_atomic_write, fix_setup, fix_teardown),
        cmocka_unit_test_setup_teardown(test_unwritable_dir, fix_setup, fix_teardown),
        cmocka_unit_test_setup_teardown(test_write_bad_args, fix_setup, fix_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
