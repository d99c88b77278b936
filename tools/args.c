/* tools/args.c: the option parser every subcommand of `prism` shares, so
 * that an unknown option, a missing value and a bad number read the same
 * everywhere, and numbers are parsed strictly (the whole text, in range).
 * Each matcher looks at the current argument: if it is not its option it
 * returns false; if it is, it consumes the value and returns true, having
 * either stored the value or printed what is wrong and marked the parse as
 * failed (pr_args_next then stops the loop). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "tools/tools.h"

pr_args pr_args_begin(const char *cmd, int argc, char **argv)
{
    return (pr_args){.cmd = cmd, .argc = argc, .argv = argv, .i = 0, .failed = false};
}

bool pr_args_next(pr_args *a)
{
    if (a->failed || a->i + 1 >= a->argc) return false;
    a->i++;
    return true;
}

const char *pr_args_current(const pr_args *a)
{
    return a->argv[a->i];
}

int pr_args_error(pr_args *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", a->cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    a->failed = true;
    return PR_EXIT_USAGE;
}

int pr_args_unknown(pr_args *a)
{
    const char *arg = pr_args_current(a);
    return pr_args_error(a, "unknown %s '%s' (%s --help lists the options)", arg[0] == '-' ? "option" : "argument",
                         arg, a->cmd);
}

int pr_args_no_cuda(const char *cmd)
{
    fprintf(stderr, "%s: --device cuda, but no CUDA device is usable (or prism was built without CUDA)\n", cmd);
    return PR_EXIT_NO_GPU;
}

bool pr_args_help(const pr_args *a)
{
    return pr_is_help(pr_args_current(a));
}

bool pr_args_flag(pr_args *a, const char *name, bool *out)
{
    if (strcmp(pr_args_current(a), name) != 0) return false;
    *out = true;
    return true;
}

/* true when the current argument is `name`; *val is then its value, or NULL
 * (with the message printed) when none follows */
static bool option_value(pr_args *a, const char *name, const char **val)
{
    if (strcmp(pr_args_current(a), name) != 0) return false;
    *val = NULL;
    if (a->i + 1 >= a->argc) {
        pr_args_error(a, "option %s needs a value", name);
        return true;
    }
    *val = a->argv[++a->i];
    return true;
}

bool pr_args_string(pr_args *a, const char *name, const char **out)
{
    const char *v;
    if (!option_value(a, name, &v)) return false;
    if (v && !v[0]) pr_args_error(a, "%s wants a value, not ''", name);   /* a path, a name, a list: never empty */
    else if (v) *out = v;
    return true;
}

int pr_args_readable(const char *cmd, const char *path)
{
    FILE *f = fopen(path, "r");
    if (f) return fclose(f), 0;
    fprintf(stderr, "%s: %s: cannot open: %s\n", cmd, path, strerror(errno));
    return 1;
}

/* the whole of s as a base-10 integer within [lo, hi] */
static bool parse_int(const char *s, long long lo, long long hi, long long *out)
{
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (end == s || *end || errno || x < lo || x > hi) return false;
    *out = x;
    return true;
}

bool pr_args_int(pr_args *a, const char *name, int lo, int hi, int *out)
{
    const char *v;
    if (!option_value(a, name, &v)) return false;
    long long x;
    if (!v) return true;
    if (!parse_int(v, lo, hi, &x))
        pr_args_error(a, "%s wants an integer from %d to %d, not '%s'", name, lo, hi, v);
    else
        *out = (int)x;
    return true;
}

bool pr_args_u64(pr_args *a, const char *name, uint64_t *out)
{
    const char *v;
    if (!option_value(a, name, &v)) return false;
    if (!v) return true;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    /* strtoull accepts "-1" as 2^64 - 1: only digits are a non-negative integer */
    if (v[0] < '0' || v[0] > '9' || *end || errno)
        pr_args_error(a, "%s wants a non-negative integer, not '%s'", name, v);
    else
        *out = x;
    return true;
}

bool pr_args_positive(pr_args *a, const char *name, double *out)
{
    const char *v;
    if (!option_value(a, name, &v)) return false;
    if (!v) return true;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end || errno || !isfinite(x) || x <= 0)
        pr_args_error(a, "%s wants a number > 0, not '%s'", name, v);
    else
        *out = x;
    return true;
}

/* "a, b or c" into buf */
static void join_choices(const char *const *choices, char *buf, size_t n)
{
    buf[0] = 0;
    for (int k = 0; choices[k]; k++) {
        const char *sep = k == 0 ? "" : choices[k + 1] ? ", " : " or ";
        snprintf(buf + strlen(buf), n - strlen(buf), "%s%s", sep, choices[k]);
    }
}

static int find_choice(const char *const *choices, const char *s, size_t len)
{
    for (int k = 0; choices[k]; k++)
        if (strlen(choices[k]) == len && strncmp(choices[k], s, len) == 0) return k;
    return -1;
}

bool pr_args_choice(pr_args *a, const char *name, const char *const *choices, int *out)
{
    const char *v;
    if (!option_value(a, name, &v)) return false;
    if (!v) return true;
    int k = find_choice(choices, v, strlen(v));
    if (k < 0) {
        char all[256];
        join_choices(choices, all, sizeof all);
        pr_args_error(a, "%s wants %s, not '%s'", name, all, v);
    } else {
        *out = k;
    }
    return true;
}

bool pr_args_choice_list(pr_args *a, const char *name, const char *const *choices, unsigned *mask)
{
    const char *v;
    if (!option_value(a, name, &v)) return false;
    if (!v) return true;
    unsigned m = 0;
    for (const char *s = v;; s++) {
        size_t len = strcspn(s, ",");
        int k = find_choice(choices, s, len);
        if (k < 0) {
            char all[256];
            join_choices(choices, all, sizeof all);
            pr_args_error(a, "%s wants a comma-separated list of %s, not '%s'", name, all, v);
            return true;
        }
        m |= 1u << k;
        s += len;
        if (!*s) break;
    }
    *mask = m;
    return true;
}

bool pr_args_positive_list(pr_args *a, const char *name, int max_n, double *out, int *n)
{
    const char *v;
    if (!option_value(a, name, &v)) return false;
    if (!v) return true;
    int k = 0;
    for (const char *s = v; k < max_n;) {
        char *end;
        const double x = strtod(s, &end);
        if (end == s || !isfinite(x) || x <= 0 || (*end && *end != ',')) break;
        out[k++] = x;
        if (!*end) {
            *n = k;
            return true;
        }
        s = end + 1;
    }
    pr_args_error(a, "%s wants up to %d comma-separated numbers > 0, not '%s'", name, max_n, v);
    return true;
}

bool pr_args_int_list(pr_args *a, const char *name, long long lo, long long hi, int max_n, int64_t *out, int *n)
{
    const char *v;
    if (!option_value(a, name, &v)) return false;
    if (!v) return true;
    int k = 0;
    char item[32];
    for (const char *s = v;; s++) {
        size_t len = strcspn(s, ",");
        long long x;
        if (k == max_n || len >= sizeof item) break;
        memcpy(item, s, len);
        item[len] = 0;
        if (!parse_int(item, lo, hi, &x)) break;
        out[k++] = x;
        s += len;
        if (!*s) {
            *n = k;
            return true;
        }
    }
    pr_args_error(a, "%s wants up to %d comma-separated integers from %lld to %lld, not '%s'", name, max_n, lo, hi,
                  v);
    return true;
}
