/* tests/test_report.c: the report pages in a real browser. A grid's cells
 * are written by hand (result.json and metrics.jsonl, so nothing trains);
 * `prism ablate` reads them and writes report.html, `prism plot` draws two
 * of them. Both files must be well-formed XML; then headless Chromium
 * renders each to a PNG, which is decoded here (zlib) and must show the
 * charts' colours across the page, nothing drawn at the right edge of a
 * 1280-pixel window (the page fits it), and the table in the DOM dump.
 *
 * Skips (exit 77) where Chromium is not installed (tools/setup.sh installs
 * Debian's chromium) or zlib was missing at build time. PRISM_CHROMIUM names
 * another browser binary. */
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef PR_HAVE_ZLIB
#include <zlib.h>
#endif

#ifndef PRISM_CLI
#error "PRISM_CLI (the prism command's path) is set by CMakeLists.txt"
#endif

static char dir[256], browser[512];
static int failed;

static void check(int ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s  ", ok ? "ok  " : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    failed += !ok;
}

static int run(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *s = malloc((size_t)n + 1);
    if (fread(s, 1, (size_t)n, f) != (size_t)n) n = 0;
    s[n] = 0;
    fclose(f);
    if (len) *len = (size_t)n;
    return s;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f)) printf("FAIL  cannot write %s\n", path), exit(1);
}

static int count(const char *s, const char *what)
{
    int n = 0;
    for (; (s = strstr(s, what)); s++) n++;
    return n;
}

/* ---- the fixture: a 2 x 2 x 2 grid, every cell finished ------------------------------ */
static void write_cell(const char *model, const char *task, int seed, double rate, double acc)
{
    char path[512];
    snprintf(path, sizeof path, "%s/grid/%s/%s/s%d", dir, model, task, seed);
    run("mkdir -p '%s'", path);
    char *p = path + strlen(path);
    sprintf(p, "/result.json");
    char text[256];
    snprintf(text, sizeof text, "{\"steps\": 300, \"metrics\": {\"acc\": %.3f, \"loss\": 0.3}}\n", acc);
    write_file(path, text);
    sprintf(p, "/metrics.jsonl");
    FILE *f = fopen(path, "w");
    for (int s = 10; s <= 300; s += 10) {
        double loss = 2 * exp(-rate * s) + 0.001;
        fprintf(f, "{\"step\":%d,\"loss\":%.6g,\"lr\":0.001,\"grad_norm\":0.5,\"tokens\":%d,\"tokens_per_s\":900,"
                   "\"time_s\":%.2f}\n", s, loss, s * 256, s * 0.01);
        if (s % 50 == 0) fprintf(f, "{\"step\":%d,\"eval\":{\"acc\":%.4f}}\n", s, 0.5 + (acc - 0.5) * s / 300);
    }
    fclose(f);
}

/* a slice of the built-in table4 grid (which carries the paper's numbers): two
 * of its models on its nine probes, two seeds, 300 steps; with nine tasks the
 * bar chart is wider than a narrow window, which the page must shrink it to */
/* --stale keep: hand-written cells have no config.json, so ablate cannot tell
 * what made them and takes them as stale; keep reads them (marked) */
#define GRID_ARGS "--grid table4 --only 'prism paper-style,linattn paper-style' --seeds 2 --steps 300 --stale keep"
static const char *const models[] = {"prism-paper-style", "linattn-paper-style"};
static const char *const tasks[] = {"mqar", "poly_recall", "var_tracking", "local_xor", "parity",
                                    "mod_add", "palindrome", "silence_gate", "mux"};
enum { N_TASKS = 9 };

static void write_fixture(void)
{
    for (int m = 0; m < 2; m++)
        for (int t = 0; t < N_TASKS; t++)
            for (int s = 1; s <= 2; s++) write_cell(models[m], tasks[t], s, 0.01 * (1 + m + s), 0.9 - 0.3 * m + 0.02 * s);
}

/* ---- well-formed XML: one root, balanced elements, quoted attributes, known entities -- */
static const char *xml_error(const char *s)
{
    char stack[64][24];
    int depth = 0, roots = 0;
    if (strncmp(s, "<?xml", 5) == 0) s = strstr(s, "?>") + 2;
    while (*s == '\n' || *s == ' ') s++;
    if (strncmp(s, "<!DOCTYPE html>", 15) == 0) s += 15;
    for (; *s; s++) {
        if (*s == '&') {
            static const char *const ent[] = {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"};
            int ok = 0;
            for (int e = 0; e < 5; e++) ok |= strncmp(s, ent[e], strlen(ent[e])) == 0;
            if (!ok) return "a bare & (not an entity)";
            continue;
        }
        if (*s != '<') {
            if (depth == 0 && !strchr(" \n\t", *s)) return "text outside the root element";
            continue;
        }
        bool closing = s[1] == '/';
        const char *name = s + 1 + closing;
        size_t len = strcspn(name, " />\n");
        if (!len || len >= sizeof stack[0]) return "a tag without a name";
        s = name + len;
        while (*s == ' ' || *s == '\n') {   /* attributes: name="value" */
            while (*s == ' ' || *s == '\n') s++;
            if (*s == '/' || *s == '>') break;
            s += strcspn(s, "= />");
            if (s[0] != '=' || s[1] != '"') return "an attribute without a quoted value";
            const char *end = strchr(s + 2, '"');
            if (!end) return "an unclosed attribute value";
            for (const char *c = s + 2; c < end; c++)
                if (*c == '<') return "a < inside an attribute value";
            s = end + 1;
        }
        bool empty = *s == '/';
        if (empty) s++;
        if (*s != '>') return "a tag that does not end in >";
        if (closing) {
            if (!depth || strlen(stack[depth - 1]) != len || strncmp(stack[depth - 1], name, len)) return "a mismatched closing tag";
            depth--;
        } else if (!empty) {
            if (depth == 0 && roots++) return "a second root element";
            if (depth == 64) return "elements nested too deep";
            snprintf(stack[depth++], sizeof stack[0], "%.*s", (int)len, name);
        } else if (depth == 0) {
            return "an empty root element";
        }
    }
    return depth ? "an element left open" : roots != 1 ? "no root element" : NULL;
}

static void check_xml(const char *path)
{
    char *doc = slurp(path, NULL);
    const char *err = doc ? xml_error(doc) : "cannot read it";
    check(!err, "%s is well-formed XML%s%s", path, err ? ": " : "", err ? err : "");
    free(doc);
}

/* ---- the screenshot, decoded --------------------------------------------------------- */
typedef struct {
    int w, h;
    unsigned char *rgb;   /* 3 bytes a pixel, row by row */
} image;

static uint32_t be32(const unsigned char *p) { return (uint32_t)p[0] << 24 | p[1] << 16 | p[2] << 8 | p[3]; }

static int paeth(int a, int b, int c)
{
    int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
    return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

/* an 8-bit RGB or RGBA, non-interlaced PNG (what Chromium writes); NULL with why */
static const char *read_png(const char *path, image *im)
{
#ifdef PR_HAVE_ZLIB
    size_t len;
    unsigned char *f = (unsigned char *)slurp(path, &len), *idat = NULL;
    if (!f || len < 8 || memcmp(f, "\x89PNG\r\n\x1a\n", 8)) return free(f), "not a PNG";
    size_t n_idat = 0, at = 8;
    int depth = 0, type = 0, interlace = 0;
    while (at + 12 <= len) {
        uint32_t n = be32(f + at);
        const unsigned char *kind = f + at + 4, *data = f + at + 8;
        if (at + 12 + n > len) break;
        if (!memcmp(kind, "IHDR", 4)) im->w = (int)be32(data), im->h = (int)be32(data + 4), depth = data[8],
                                       type = data[9], interlace = data[12];
        if (!memcmp(kind, "IDAT", 4)) idat = realloc(idat, n_idat + n), memcpy(idat + n_idat, data, n), n_idat += n;
        at += 12 + n;
    }
    int bpp = type == 6 ? 4 : type == 2 ? 3 : 0;
    if (depth != 8 || !bpp || interlace) return free(f), free(idat), "not an 8-bit RGB(A) non-interlaced PNG";
    size_t stride = (size_t)im->w * bpp;
    uLongf raw_len = (uLongf)(im->h * (stride + 1));
    unsigned char *raw = malloc(raw_len);
    int z = uncompress(raw, &raw_len, idat, n_idat);
    free(f), free(idat);
    if (z != Z_OK || raw_len != (uLongf)(im->h * (stride + 1))) return free(raw), "its image data does not inflate";
    im->rgb = malloc((size_t)im->w * im->h * 3);
    unsigned char *prev = calloc(stride, 1), *cur = malloc(stride);
    for (int y = 0; y < im->h; y++) {
        const unsigned char *row = raw + y * (stride + 1);
        for (size_t x = 0; x < stride; x++) {
            int a = x >= (size_t)bpp ? cur[x - bpp] : 0, b = prev[x], c = x >= (size_t)bpp ? prev[x - bpp] : 0;
            int v = row[1 + x];
            switch (row[0]) {
            case 1: v += a; break;
            case 2: v += b; break;
            case 3: v += (a + b) / 2; break;
            case 4: v += paeth(a, b, c); break;
            }
            cur[x] = (unsigned char)v;
        }
        for (int x = 0; x < im->w; x++) memcpy(im->rgb + ((size_t)y * im->w + x) * 3, cur + (size_t)x * bpp, 3);
        memcpy(prev, cur, stride);
    }
    free(raw), free(prev), free(cur);
    return NULL;
#else
    (void)path, (void)im;
    return "built without zlib";
#endif
}

static const unsigned char *pixel(const image *im, int x, int y) { return im->rgb + ((size_t)y * im->w + x) * 3; }

static bool near(const unsigned char *p, int r, int g, int b)
{
    return abs(p[0] - r) + abs(p[1] - g) + abs(p[2] - b) < 40;
}

/* pixels of colour (r, g, b), and in how many bands of 150 rows they appear */
static int colour_pixels(const image *im, int r, int g, int b, int *bands)
{
    int n = 0, last_band = -1;
    *bands = 0;
    for (int y = 0; y < im->h; y++)
        for (int x = 0; x < im->w; x++) {
            if (!near(pixel(im, x, y), r, g, b)) continue;
            n++;
            if (y / 150 != last_band) last_band = y / 150, ++*bands;
        }
    return n;
}

/* the first row from the bottom that holds anything but white */
static int last_drawn_row(const image *im)
{
    for (int y = im->h - 1; y >= 0; y--)
        for (int x = 0; x < im->w; x++)
            if (!near(pixel(im, x, y), 255, 255, 255)) return y;
    return -1;
}

/* pixels drawn in the 16 columns at the right edge: the page's padding, unless
 * something is wider than the window (which would scroll sideways) */
static int right_edge_pixels(const image *im)
{
    int n = 0;
    for (int y = 0; y < im->h; y++)
        for (int x = im->w - 16; x < im->w; x++) n += !near(pixel(im, x, y), 255, 255, 255);
    return n;
}

/* headless Chromium: a screenshot of `file` in a window of w x h, or its DOM */
static int chromium(const char *file, const char *png, int w, int h, const char *dom)
{
    const char *flags = "--headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run "
                        "--disable-extensions --disable-dev-shm-usage";
    if (dom)
        return run("cd '%s' && timeout 120 '%s' %s --user-data-dir='%s/profile' --dump-dom 'file://%s' >'%s' 2>/dev/null",
                   dir, browser, flags, dir, file, dom);
    return run("cd '%s' && timeout 120 '%s' %s --user-data-dir='%s/profile' --window-size=%d,%d --screenshot='%s' "
               "'file://%s' >/dev/null 2>&1",
               dir, browser, flags, dir, w, h, png, file);
}

static void check_report_page(void)
{
    char html[512], png[512], domf[512];
    snprintf(html, sizeof html, "%s/grid/report.html", dir);
    snprintf(png, sizeof png, "%s/report.png", dir);
    snprintf(domf, sizeof domf, "%s/report.dom", dir);
    check_xml(html);
    char *page = slurp(html, NULL);
    /* the bar chart, and per task 2 loss panels and 2 accuracy panels */
    check(page && count(page, "<svg") == 1 + 4 * N_TASKS, "report.html holds %d pictures (%d)", 1 + 4 * N_TASKS,
          page ? count(page, "<svg") : -1);
    const char *bars = page ? strstr(page, "<svg") : NULL;
    bars = bars ? strstr(bars, " width=\"") : NULL;
    int bars_w = bars ? atoi(bars + strlen(" width=\"")) : 0;
    check(bars_w > 1000, "the bar chart is %d pixels wide, more than a narrow window", bars_w);
    check(page && !strstr(page, "<script"), "report.html has no script");
    check(page && !strstr(page, "src=\"http") && !strstr(page, "href=\"http"), "report.html loads nothing from the network");
    free(page);
    check(chromium(html, png, 1280, 6400, NULL) == 0, "chromium took a screenshot of report.html");
    image im = {0};
    const char *why = read_png(png, &im);
    check(!why, "decoded %s (%dx%d)%s%s", png, im.w, im.h, why ? ": " : "", why ? why : "");
    if (!why) {
        int bands, blue = colour_pixels(&im, 0x1f, 0x77, 0xb4, &bands), orange_bands;
        int orange = colour_pixels(&im, 0xff, 0x7f, 0x0e, &orange_bands);
        check(blue > 500 && bands >= 20, "the first model's blue drawn down the page: %d pixels in %d bands of 150 rows", blue, bands);
        check(orange > 500 && orange_bands >= 20, "the second's orange too: %d pixels in %d bands", orange, orange_bands);
        int stray = right_edge_pixels(&im);
        check(stray == 0, "nothing reaches the right edge of a 1280-pixel window (%d pixels there)", stray);
        int bottom = last_drawn_row(&im);
        check(bottom > 3000 && bottom < im.h - 20, "the page ends inside the window (last drawn row %d of %d)", bottom, im.h);
    }
    free(im.rgb);
    /* a narrower window still: the bar chart (wider than 1280) must shrink to fit;
     * drawn at its own size, its plot area would run past 900 pixels */
    snprintf(png, sizeof png, "%s/narrow.png", dir);
    check(chromium(html, png, 900, 1000, NULL) == 0, "chromium took a screenshot 900 pixels wide");
    im = (image){0};
    why = read_png(png, &im);
    check(!why && right_edge_pixels(&im) == 0, "900 pixels wide, nothing reaches the right edge either (%d pixels)",
          why ? -1 : right_edge_pixels(&im));
    free(im.rgb);
    check(chromium(html, NULL, 0, 0, domf) == 0, "chromium dumped the DOM");
    char *dom = slurp(domf, NULL);
    /* each cell marked † (kept stale: the fixture has no config.json) and the note saying so */
    check(dom && strstr(dom, "<table>") && strstr(dom, "parity (acc)") && strstr(dom, "<td>0.930 ± 0.014 †<br>") &&
              strstr(dom, "<span class=\"ref\">paper 0.49</span>") && strstr(dom, "† stale config"),
          "the DOM holds the table: parity (acc), prism's 0.930 ± 0.014 (kept stale) and the paper's 0.49 under "
          "linattn's");
    free(dom);
}

static void check_plot(void)
{
    char svg[512], png[512];
    snprintf(svg, sizeof svg, "%s/plot.svg", dir);
    snprintf(png, sizeof png, "%s/plot.png", dir);
    check(run("cd '%s' && '%s' plot grid/prism-paper-style/parity/s1 grid/linattn-paper-style/parity/s1 --out plot.svg "
              ">/dev/null", dir,
              PRISM_CLI) == 0, "prism plot wrote plot.svg");
    check_xml(svg);
    check(chromium(svg, png, 900, 600, NULL) == 0, "chromium took a screenshot of plot.svg");
    image im = {0};
    const char *why = read_png(png, &im);
    check(!why, "decoded %s%s%s", png, why ? ": " : "", why ? why : "");
    if (!why) {
        int bands, blue = colour_pixels(&im, 0x1f, 0x77, 0xb4, &bands);
        int orange = colour_pixels(&im, 0xff, 0x7f, 0x0e, &bands);
        check(blue > 100 && orange > 100, "both runs' lines drawn (%d blue, %d orange pixels)", blue, orange);
    }
    free(im.rgb);
}

int main(void)
{
    const char *env = getenv("PRISM_CHROMIUM");
    FILE *p = popen(env ? "true" : "command -v chromium || command -v chromium-browser", "r");
    if (env) snprintf(browser, sizeof browser, "%s", env);
    else if (!p || !fgets(browser, sizeof browser, p)) browser[0] = 0;
    if (p) pclose(p);
    browser[strcspn(browser, "\n")] = 0;
    if (!browser[0]) {
        printf("skipped: no chromium (tools/setup.sh installs it where Debian packages it: apt-get install chromium;\n"
               "         PRISM_CHROMIUM may name another Chromium binary)\n");
        return 77;
    }
    if (run("'%s' --version >/dev/null 2>&1", browser) != 0) {
        printf("skipped: %s is installed but does not start (%s --version failed)\n", browser, browser);
        return 77;
    }
#ifndef PR_HAVE_ZLIB
    printf("skipped: built without zlib (install zlib1g-dev, then configure again): cannot decode a screenshot\n");
    return 77;
#endif
    snprintf(dir, sizeof dir, "/tmp/prism-report-XXXXXX");
    if (!mkdtemp(dir)) return printf("FAIL  cannot make a temporary folder\n"), 1;
    write_fixture();
    check(run("cd '%s' && '%s' ablate " GRID_ARGS " --out grid --jobs 1 >ablate.log 2>&1", dir, PRISM_CLI) == 0,
          "prism ablate read the 36 finished cells and wrote the report");
    check_report_page();
    check_plot();
    if (!failed && !getenv("PRISM_KEEP")) run("rm -rf '%s'", dir);
    else printf("the files are kept in %s\n", dir);
    printf("%s\n", failed ? "FAILED" : "all checks passed");
    return failed ? 1 : 0;
}
