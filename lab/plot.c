/* lab/plot.c: line plots written as SVG (lab/lab.h). The plot area sits
 * in a fixed frame (margins for tick labels, axis labels, a legend on the
 * right); data map linearly or by log10 into it. Ticks are "nice" numbers so
 * a reader can interpolate: 1, 2 or 5 times a power of ten, or the powers of
 * ten themselves on a log axis. */
#include "lab/lab.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { PLOT_W = 480, PLOT_H = 340, PAD = 10, TICK_FONT = 12, LABEL_FONT = 13, TITLE_FONT = 16, LEGEND_FONT = 12,
       LEGEND_ROW = 16, LEGEND_LINE = 24, MARKERS_UP_TO = 24 };

/* distinguishable on white, and in grey print (Tableau 10's hues) */
static const char *const palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                      "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
#define N_COLORS ((int)(sizeof palette / sizeof palette[0]))

/* after solid, patterns that read apart at a glance; past them, long dashes
 * of growing length (each length once, so no pattern repeats) */
static const char *const dashes[] = {"none", "7 3", "2 2", "9 3 2 3", "1 4", "12 4", "5 2 1 2 1 2", "4 4"};
#define N_DASHES ((int)(sizeof dashes / sizeof dashes[0]))

void pr_plot_style(int k, const char **color, char *dash, size_t dash_size)
{
    int d = k / N_COLORS;
    *color = palette[k % N_COLORS];
    if (d < N_DASHES) snprintf(dash, dash_size, "%s", dashes[d]);
    else snprintf(dash, dash_size, "%d 3", 14 + (d - N_DASHES));
}

static const char *series_color(int k) { return palette[k % N_COLORS]; }

double pr_plot_text_width(const char *s, double font_size)
{
    double em = 0;
    for (const unsigned char *c = (const unsigned char *)s; c && *c; c++) {
        if ((*c & 0xC0) == 0x80) continue;   /* a UTF-8 continuation byte: counted with its lead */
        if (*c >= 0x80) em += 0.84;
        else if (strchr("iljtf.,:;'|!()[] ", *c)) em += 0.40;
        else if (strchr("mwMW@%", *c)) em += 1.0;
        else if (*c >= 'A' && *c <= 'Z') em += 0.76;
        else em += 0.64;   /* lowercase and digits in DejaVu Sans: 0.52 to 0.64 */
    }
    return em * font_size;
}

void pr_plot_tick_label(double v, char *out, size_t n)
{
    static const char *const suffix[] = {"", "k", "M", "G", "T"};
    double a = fabs(v);
    if (v != floor(v) || a < 1e5 || a >= 1e15) {
        snprintf(out, n, "%g", v);
        return;
    }
    int k = 0;
    while (a >= 1000 && k < 4) a /= 1000, v /= 1000, k++;
    snprintf(out, n, "%g%s", v, suffix[k]);
}

bool pr_plot_add(pr_plot *p, const char *name, int n, const double *x, const double *y)
{
    if (p->n_series == p->cap) {
        int cap = p->cap ? 2 * p->cap : 8;
        pr_plot_series *grown = realloc(p->series, sizeof *grown * (size_t)cap);
        if (!grown) return false;
        p->series = grown, p->cap = cap;
    }
    p->series[p->n_series++] = (pr_plot_series){.name = name, .n = n, .x = x, .y = y};
    return true;
}

void pr_plot_mark(pr_plot *p, int n, const double *x, const double *y)
{
    if (!p->n_series) return;
    pr_plot_series *s = &p->series[p->n_series - 1];
    s->n_marks = n, s->mx = x, s->my = y;
}

void pr_plot_free(pr_plot *p)
{
    free(p->series);
    p->series = NULL, p->n_series = p->cap = 0;
}

/* the one of 1, 2, 5 or 10 times a power of ten nearest to x */
static double nice_step(double x)
{
    double e = pow(10, floor(log10(x))), f = x / e;
    return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * e;
}

static int linear_ticks(double lo, double hi, double min_step, double *ticks, double *axis_lo, double *axis_hi)
{
    if (hi <= lo) {   /* one value: a unit-wide window around it */
        double pad = lo != 0 ? fabs(lo) * 0.5 : 1;
        if (min_step > 0) pad = 1;   /* a count: the whole numbers either side */
        lo -= pad, hi += pad;
    }
    double step = fmax(nice_step((hi - lo) / 4), min_step);
    double first = floor(lo / step + 1e-9), last = ceil(hi / step - 1e-9);
    int n = 0;
    for (double i = first; i <= last && n < PR_PLOT_MAX_TICKS; i++) {
        double t = i * step;   /* from the index, so rounding does not drift along the axis */
        ticks[n++] = fabs(t) < step * 1e-9 ? 0 : t;
    }
    *axis_lo = ticks[0], *axis_hi = ticks[n - 1];
    return n;
}

static int log_ticks(double lo, double hi, double *ticks, double *axis_lo, double *axis_hi)
{
    int elo = (int)floor(log10(lo) + 1e-9), ehi = (int)ceil(log10(hi) - 1e-9);
    if (ehi <= elo) ehi = elo + 1;
    int stride = (ehi - elo + 7) / 8, n = 0;   /* at most about nine labels */
    int e = elo;
    for (; n < PR_PLOT_MAX_TICKS; e += stride) {
        ticks[n++] = pow(10, e);
        if (e >= ehi) break;
    }
    *axis_lo = ticks[0], *axis_hi = ticks[n - 1];
    return n;
}

int pr_plot_ticks(double lo, double hi, bool log_scale, double *ticks, double *axis_lo, double *axis_hi)
{
    return log_scale ? log_ticks(lo, hi, ticks, axis_lo, axis_hi) : linear_ticks(lo, hi, 0, ticks, axis_lo, axis_hi);
}

int pr_plot_int_ticks(double lo, double hi, double *ticks, double *axis_lo, double *axis_hi)
{
    return linear_ticks(lo, hi, 1, ticks, axis_lo, axis_hi);
}

static bool shown(double v, bool log_scale)
{
    return isfinite(v) && (!log_scale || v > 0);
}

static bool xy_shown(const pr_plot *p, double x, double y)
{
    return shown(x, p->xlog) && shown(y, p->ylog);
}

/* the range of the points the axes can show, marks included; false when there are none */
static bool data_range(const pr_plot *p, bool y_axis, double *lo, double *hi)
{
    *lo = INFINITY, *hi = -INFINITY;
    for (int k = 0; k < p->n_series; k++) {
        const pr_plot_series *s = &p->series[k];
        for (int i = 0; i < s->n + s->n_marks; i++) {
            double x = i < s->n ? s->x[i] : s->mx[i - s->n], y = i < s->n ? s->y[i] : s->my[i - s->n];
            if (!xy_shown(p, x, y)) continue;
            double v = y_axis ? y : x;
            *lo = fmin(*lo, v), *hi = fmax(*hi, v);
        }
    }
    return *lo <= *hi;
}

typedef struct {
    double lo, hi;   /* the axis ends, in data units */
    double p0, p1;   /* ... and in pixels */
    bool log_scale;
    int n_ticks;
    double ticks[PR_PLOT_MAX_TICKS];
} axis;

/* the fraction 0..1 of the way along the axis */
static double axis_frac(const axis *a, double v)
{
    if (a->log_scale) return (log10(v) - log10(a->lo)) / (log10(a->hi) - log10(a->lo));
    return (v - a->lo) / (a->hi - a->lo);
}

static double pos(const axis *a, double v)
{
    return a->p0 + axis_frac(a, v) * (a->p1 - a->p0);
}

void pr_xml_text(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default: fputc(*s, f);
        }
    }
}

static void text_at(FILE *f, double x, double y, const char *anchor, const char *extra, const char *s)
{
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\"%s>", x, y, anchor, extra);
    pr_xml_text(f, s);
    fputs("</text>\n", f);
}

/* a title centred on cx, moved in so that it stays inside [0, width] */
static void title_at(FILE *f, double cx, double width, const char *title)
{
    double half = pr_plot_text_width(title, TITLE_FONT) / 2;
    cx = fmax(cx, PAD + half);
    cx = fmin(cx, width - PAD - half);
    text_at(f, cx, 24, "middle", " font-size=\"16\"", title);
}

static void y_grid_lines(FILE *f, const axis *ay, double x0, double x1)
{
    for (int i = 0; i < ay->n_ticks; i++)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", x0, pos(ay, ay->ticks[i]), x1,
                pos(ay, ay->ticks[i]));
}

static void frame(FILE *f, double x0, double x1, const axis *ay)
{
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#333\"/>\n", x0,
            ay->p1, x1 - x0, ay->p0 - ay->p1);
}

/* the widest y tick label */
static double y_labels_width(const axis *ay)
{
    double w = 0;
    char label[32];
    for (int i = 0; i < ay->n_ticks; i++) {
        pr_plot_tick_label(ay->ticks[i], label, sizeof label);
        w = fmax(w, pr_plot_text_width(label, TICK_FONT));
    }
    return w;
}

/* room left of the plot area: the y label turned upright, then the tick labels */
static double left_margin(const axis *ay, const char *ylabel)
{
    return PAD + (ylabel ? LABEL_FONT + 8 : 0) + y_labels_width(ay) + 6;
}

/* the y tick labels left of x0, and the axis label turned upright at the left edge */
static void y_labels(FILE *f, const axis *ay, double x0, const char *ylabel)
{
    char label[32];
    fprintf(f, "<g class=\"yticks\" font-size=\"12\">\n");
    for (int i = 0; i < ay->n_ticks; i++) {
        pr_plot_tick_label(ay->ticks[i], label, sizeof label);
        text_at(f, x0 - 6, pos(ay, ay->ticks[i]) + 4, "end", "", label);
    }
    fprintf(f, "</g>\n");
    if (!ylabel) return;
    double mid = (ay->p0 + ay->p1) / 2, x = PAD + LABEL_FONT - 2;
    char rot[64];
    snprintf(rot, sizeof rot, " font-size=\"13\" transform=\"rotate(-90 %.1f %.1f)\"", x, mid);
    text_at(f, x, mid, "middle", rot, ylabel);
}

static void svg_begin(FILE *f, int width, int height)
{
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"sans-serif\">\n<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n",
            width, height, width, height, width, height);
}

/* a standalone document closed by fclose, which may be where a full disk shows */
static int save_with(int (*write)(const void *, FILE *, pr_err *), const void *what, const char *path, pr_err *err)
{
    FILE *f = fopen(path, "w");
    if (!f) return pr_errf(err, "%s: cannot write the plot: %s", path, strerror(errno));
    fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", f);
    int rc = write(what, f, err);
    if (fclose(f) != 0 && rc == 0) rc = pr_errf(err, "%s: write failed: %s", path, strerror(errno));
    return rc;
}

/* ---- line plots: the frame measured around the plot area ------------------------- */
typedef struct {
    axis ax, ay;
    double legend_x, legend_name_w;
    int width, height;
} plot_layout;

static bool plot_axis(const pr_plot *p, bool y_axis, axis *a)
{
    double lo, hi;
    if (!data_range(p, y_axis, &lo, &hi)) return false;
    if (y_axis && p->y_fixed) lo = p->y_lo, hi = p->y_hi;
    a->log_scale = y_axis ? p->ylog : p->xlog;
    if (!y_axis && p->xint && !a->log_scale) a->n_ticks = pr_plot_int_ticks(lo, hi, a->ticks, &a->lo, &a->hi);
    else a->n_ticks = pr_plot_ticks(lo, hi, a->log_scale, a->ticks, &a->lo, &a->hi);
    return true;
}

/* the margins from the text they hold: tick labels, axis labels, the
 * legend's longest name and the title all fit inside the picture */
static bool plot_layout_of(const pr_plot *p, plot_layout *L)
{
    memset(L, 0, sizeof *L);
    if (!plot_axis(p, false, &L->ax) || !plot_axis(p, true, &L->ay)) return false;
    double w = p->plot_w > 0 ? p->plot_w : PLOT_W, h = p->plot_h > 0 ? p->plot_h : PLOT_H;
    double top = p->title ? 40 : 16, left = left_margin(&L->ay, p->ylabel);
    char label[32];
    pr_plot_tick_label(L->ax.ticks[L->ax.n_ticks - 1], label, sizeof label);
    double last_tick_half = pr_plot_text_width(label, TICK_FONT) / 2;
    for (int k = 0; k < p->n_series; k++)
        L->legend_name_w = fmax(L->legend_name_w, pr_plot_text_width(p->series[k].name, LEGEND_FONT));
    double right = fmax(last_tick_half + PAD, 16 + LEGEND_LINE + 6 + L->legend_name_w + PAD);
    double title_w = p->title ? pr_plot_text_width(p->title, TITLE_FONT) + 2 * PAD : 0;
    double xlabel_w = p->xlabel ? pr_plot_text_width(p->xlabel, LABEL_FONT) + 2 * PAD : 0;
    L->width = (int)ceil(fmax(left + w + right, fmax(title_w, xlabel_w)));
    double legend_h = 10 + LEGEND_ROW * p->n_series;
    if (legend_h > h) h = legend_h;   /* a long legend stretches the plot beside it */
    L->height = (int)ceil(top + h + 16 + TICK_FONT + 10 + LABEL_FONT + PAD);
    L->ax.p0 = left, L->ax.p1 = left + w;
    L->ay.p0 = top + h, L->ay.p1 = top;
    L->legend_x = left + w + 16;
    return true;
}

static void draw_axes(FILE *f, const pr_plot *p, const plot_layout *L)
{
    const axis *ax = &L->ax, *ay = &L->ay;
    double x0 = ax->p0, x1 = ax->p1, y0 = ay->p0, y1 = ay->p1;
    char label[32];
    fprintf(f, "<g class=\"grid\" stroke=\"#e4e4e4\">\n");
    for (int i = 0; i < ax->n_ticks; i++)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", pos(ax, ax->ticks[i]), y0,
                pos(ax, ax->ticks[i]), y1);
    y_grid_lines(f, ay, x0, x1);
    fprintf(f, "</g>\n");
    frame(f, x0, x1, ay);
    fprintf(f, "<g class=\"xticks\" font-size=\"12\">\n");
    for (int i = 0; i < ax->n_ticks; i++) {
        pr_plot_tick_label(ax->ticks[i], label, sizeof label);
        text_at(f, pos(ax, ax->ticks[i]), y0 + 18, "middle", "", label);
    }
    fprintf(f, "</g>\n");
    y_labels(f, ay, x0, p->ylabel);
    if (p->title) title_at(f, (x0 + x1) / 2, L->width, p->title);
    if (p->xlabel) {
        double half = pr_plot_text_width(p->xlabel, LABEL_FONT) / 2;
        double cx = fmin(fmax((x0 + x1) / 2, PAD + half), L->width - PAD - half);
        text_at(f, cx, L->height - PAD - 2, "middle", " font-size=\"13\"", p->xlabel);
    }
}

/* one polyline per run of points the axes can show; dots at the marks */
static void draw_series(FILE *f, const pr_plot *p, int k, const plot_layout *L)
{
    const pr_plot_series *s = &p->series[k];
    const axis *ax = &L->ax, *ay = &L->ay;
    const char *color;
    char dash[32];
    pr_plot_style(s->look ? s->look - 1 : k, &color, dash, sizeof dash);
    fprintf(f, "<g class=\"series\" stroke=\"%s\" stroke-dasharray=\"%s\" fill=\"none\" stroke-width=\"1.8\">\n",
            color, dash);
    bool open = false;
    for (int i = 0; i < s->n; i++) {
        if (!xy_shown(p, s->x[i], s->y[i])) {
            if (open) fputs("\"/>\n", f);
            open = false;
            continue;
        }
        if (!open) fputs("<polyline points=\"", f);
        fprintf(f, "%s%.2f,%.2f", open ? " " : "", pos(ax, s->x[i]), pos(ay, s->y[i]));
        open = true;
    }
    if (open) fputs("\"/>\n", f);
    if (s->n <= MARKERS_UP_TO && !s->n_marks)
        for (int i = 0; i < s->n; i++)
            if (xy_shown(p, s->x[i], s->y[i]))
                fprintf(f, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"2.5\" fill=\"%s\" stroke=\"none\"/>\n",
                        pos(ax, s->x[i]), pos(ay, s->y[i]), color);
    for (int i = 0; i < s->n_marks; i++)
        if (xy_shown(p, s->mx[i], s->my[i]))
            fprintf(f, "<circle class=\"mark\" cx=\"%.2f\" cy=\"%.2f\" r=\"3.5\" fill=\"%s\" stroke=\"white\" "
                       "stroke-dasharray=\"none\" stroke-width=\"1\"/>\n",
                    pos(ax, s->mx[i]), pos(ay, s->my[i]), color);
    fputs("</g>\n", f);
}

static void draw_legend(FILE *f, const pr_plot *p, const plot_layout *L)
{
    double x = L->legend_x;
    fprintf(f, "<g class=\"legend\" font-size=\"12\">\n");
    for (int k = 0; k < p->n_series; k++) {
        double y = L->ay.p1 + 10 + LEGEND_ROW * k;
        const char *color;
        char dash[32];
        pr_plot_style(p->series[k].look ? p->series[k].look - 1 : k, &color, dash, sizeof dash);
        fprintf(f,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-dasharray=\"%s\" "
                "stroke-width=\"2.5\"/>\n",
                x, y, x + LEGEND_LINE, y, color, dash);
        if (p->series[k].n_marks)
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\" stroke=\"white\"/>\n",
                    x + LEGEND_LINE / 2.0, y, color);
        text_at(f, x + LEGEND_LINE + 6, y + 4, "start", "", p->series[k].name ? p->series[k].name : "");
    }
    fprintf(f, "</g>\n");
}

int pr_plot_write(const pr_plot *p, FILE *f, pr_err *err)
{
    plot_layout L;
    if (!plot_layout_of(p, &L))
        return pr_errf(err, "plot '%s': no point to draw (every value non-finite, or <= 0 on a log axis)",
                       p->title ? p->title : "");
    svg_begin(f, L.width, L.height);
    draw_axes(f, p, &L);
    for (int k = 0; k < p->n_series; k++) draw_series(f, p, k, &L);
    draw_legend(f, p, &L);
    fputs("</svg>\n", f);
    return 0;
}

static int write_plot(const void *p, FILE *f, pr_err *err) { return pr_plot_write(p, f, err); }

int pr_plot_save(const pr_plot *p, const char *path, pr_err *err)
{
    return save_with(write_plot, p, path, err);
}

/* ---- grouped bar charts ----------------------------------------------------------- */
/* Each distinct unit is a panel; a panel's groups sit in slots left to right,
 * every slot as wide as the widest group (its bars, or its label). */
enum { BAR_MIN = 8, BAR_MAX = 28, GROUP_GAP = 18, PANEL_H = 220, PANEL_LABELS = 46, PANEL_GAP = 18,
       MIN_PLOT_W = 360, SWATCH = 12, BARS_TOP = 40 };

typedef struct {
    int n_panels, max_slots;
    const char *unit[PR_BARS_MAX_GROUPS];   /* each panel's */
    int slots[PR_BARS_MAX_GROUPS];          /* each panel's number of groups */
    int panel[PR_BARS_MAX_GROUPS], slot[PR_BARS_MAX_GROUPS];   /* each group's */
    double bar_w, group_w, plot_w, left;
    int width, height;
} bars_layout;

static const char *unit_of(const pr_bars *b, int g) { return b->unit[g] ? b->unit[g] : ""; }
static const char *name_or_empty(const char *s) { return s ? s : ""; }
static double text_w(const char *s) { return pr_plot_text_width(name_or_empty(s), TICK_FONT); }

/* the hue of series s; past the ten hues, the same ones paler (outlined, so a
 * pale bar keeps its edge): four shades, so a grid's 32 variants never share a look */
static const char *const bar_opacity[] = {"1", "0.55", "0.25", "0.08"};
_Static_assert(N_COLORS * sizeof bar_opacity / sizeof bar_opacity[0] >= PR_BARS_MAX_SERIES,
               "every series of a bar chart has a fill of its own");

static void bar_fill(FILE *f, int s)
{
    fprintf(f, " fill=\"%s\" fill-opacity=\"%s\" stroke=\"%s\"", series_color(s), bar_opacity[s / N_COLORS],
            series_color(s));
}

static double bar_mean(const pr_bars *b, int s, int g) { return b->mean[s * b->n_groups + g]; }

/* the error bar's half-height, 0 for none */
static double bar_spread(const pr_bars *b, int s, int g)
{
    double e = b->spread ? b->spread[s * b->n_groups + g] : 0;
    return isfinite(e) && e > 0 ? e : 0;
}

/* panel p's y axis: from zero (or below, for negative means and their error
 * bars) to the highest mean plus its error bar, or the unit's bound; 0..1
 * when it has no bar */
static void panel_axis(const pr_bars *b, const bars_layout *L, int p, axis *ay)
{
    double lo = 0, hi = 0, bound = INFINITY;
    for (int g = 0; g < b->n_groups; g++) {
        if (L->panel[g] != p) continue;
        if (b->unit_max[g] > 0) bound = fmin(bound, b->unit_max[g]);
        for (int s = 0; s < b->n_series; s++) {
            double m = bar_mean(b, s, g), e = bar_spread(b, s, g);
            if (!isfinite(m)) continue;
            if (m >= 0) hi = fmax(hi, m + e);
            else lo = fmin(lo, m - e);
        }
    }
    if (lo == hi) hi = 1;
    if (hi > bound && bound > lo) hi = bound;
    double top = BARS_TOP + p * (PANEL_H + PANEL_LABELS + PANEL_GAP);
    *ay = (axis){.p0 = top + PANEL_H, .p1 = top};
    ay->n_ticks = pr_plot_ticks(lo, hi, false, ay->ticks, &ay->lo, &ay->hi);
}

static void bars_layout_of(const pr_bars *b, bars_layout *L)
{
    memset(L, 0, sizeof *L);
    double label_w = 0, legend_w = 0;
    for (int g = 0; g < b->n_groups; g++) {
        int p = 0;
        while (p < L->n_panels && strcmp(L->unit[p], unit_of(b, g)) != 0) p++;
        if (p == L->n_panels) L->unit[L->n_panels++] = unit_of(b, g);
        L->panel[g] = p, L->slot[g] = L->slots[p]++;
        if (L->slots[p] > L->max_slots) L->max_slots = L->slots[p];
        label_w = fmax(label_w, fmax(text_w(b->group[g]), text_w(unit_of(b, g)) + text_w("()")));
    }
    for (int s = 0; s < b->n_series; s++) legend_w = fmax(legend_w, text_w(b->series[s]));
    /* bars fill a modest width when there are few; a long label widens its slot instead of overlapping */
    double fill = ((double)MIN_PLOT_W / L->max_slots - GROUP_GAP) / b->n_series;
    L->bar_w = fmin(BAR_MAX, fmax(BAR_MIN, floor(fill)));
    L->group_w = fmax(L->bar_w * b->n_series + GROUP_GAP, label_w + 10);
    L->plot_w = L->group_w * L->max_slots;
    for (int p = 0; p < L->n_panels; p++) {   /* room for every panel's tick labels and unit */
        axis ay;
        panel_axis(b, L, p, &ay);
        L->left = fmax(L->left, left_margin(&ay, L->unit[p]));
    }
    L->width = (int)ceil(L->left + L->plot_w + 24 + SWATCH + 6 + legend_w + PAD);
    /* a title longer than the chart widens it: nothing is cut off */
    if (b->title) L->width = (int)fmax(L->width, ceil(pr_plot_text_width(b->title, TITLE_FONT) + 2 * PAD));
    int panels = BARS_TOP + L->n_panels * (PANEL_H + PANEL_LABELS) + (L->n_panels - 1) * PANEL_GAP + 10;
    int legend = BARS_TOP + LEGEND_ROW * b->n_series + 20;
    L->height = panels > legend ? panels : legend;
}

/* the pixel row of v, kept inside the axis (an error bar below zero stops at the frame) */
static double clamped_pos(const axis *ay, double v)
{
    return pos(ay, fmin(ay->hi, fmax(ay->lo, v)));
}

static void draw_bar(FILE *f, const pr_bars *b, int s, int g, double x, double w, const axis *ay)
{
    double m = bar_mean(b, s, g), e = bar_spread(b, s, g);
    double y0 = clamped_pos(ay, 0), y1 = clamped_pos(ay, m);
    fprintf(f, "<rect class=\"bar\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"", x, fmin(y0, y1), w,
            fabs(y1 - y0));
    bar_fill(f, s);
    fputs("><title>", f);
    pr_xml_text(f, name_or_empty(b->series[s]));
    fputs(", ", f);
    pr_xml_text(f, name_or_empty(b->group[g]));
    fprintf(f, e > 0 ? ": %.4g ± %.3g</title></rect>\n" : ": %.4g</title></rect>\n", m, e);
    if (e <= 0) return;
    double cx = x + w / 2, cap = fmax(2, w / 4), lo = clamped_pos(ay, m - e), hi = clamped_pos(ay, m + e);
    fprintf(f,
            "<path class=\"err\" d=\"M%.1f %.1fV%.1fM%.1f %.1fH%.1fM%.1f %.1fH%.1f\" stroke=\"#222\" "
            "stroke-width=\"1\" fill=\"none\"/>\n",
            cx, lo, hi, cx - cap, lo, cx + cap, cx - cap, hi, cx + cap);
}

static void draw_panel(FILE *f, const pr_bars *b, const bars_layout *L, int p)
{
    axis ay;
    panel_axis(b, L, p, &ay);
    double x0 = L->left, x1 = L->left + L->slots[p] * L->group_w;   /* as wide as its groups */
    fprintf(f, "<g class=\"grid\" stroke=\"#e4e4e4\">\n");
    y_grid_lines(f, &ay, x0, x1);
    fprintf(f, "</g>\n");
    if (ay.lo < 0)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n", x0, pos(&ay, 0), x1,
                pos(&ay, 0));
    fprintf(f, "<g class=\"bars\">\n");
    for (int g = 0; g < b->n_groups; g++) {
        if (L->panel[g] != p) continue;
        double left = x0 + L->slot[g] * L->group_w + (L->group_w - L->bar_w * b->n_series) / 2;
        for (int s = 0; s < b->n_series; s++)   /* a missing bar keeps its place, so colours line up */
            if (isfinite(bar_mean(b, s, g))) draw_bar(f, b, s, g, left + s * L->bar_w, L->bar_w - 1, &ay);
    }
    fprintf(f, "</g>\n");
    frame(f, x0, x1, &ay);
    fprintf(f, "<g class=\"xticks\" font-size=\"12\">\n");
    for (int g = 0; g < b->n_groups; g++) {
        if (L->panel[g] != p) continue;
        double cx = x0 + (L->slot[g] + 0.5) * L->group_w;
        char unit[80];
        snprintf(unit, sizeof unit, "(%s)", unit_of(b, g));
        text_at(f, cx, ay.p0 + 17, "middle", "", name_or_empty(b->group[g]));
        text_at(f, cx, ay.p0 + 32, "middle", " fill=\"#555\"", unit);
    }
    fprintf(f, "</g>\n");
    y_labels(f, &ay, x0, L->unit[p]);
}

static void bars_legend(FILE *f, const pr_bars *b, const bars_layout *L)
{
    double x = L->left + L->plot_w + 24;
    fprintf(f, "<g class=\"legend\" font-size=\"12\">\n");
    for (int s = 0; s < b->n_series; s++) {
        double y = BARS_TOP + LEGEND_ROW * s;
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%d\" height=\"%d\"", x, y, SWATCH, SWATCH);
        bar_fill(f, s);
        fputs("/>\n", f);
        text_at(f, x + SWATCH + 6, y + 10, "start", "", name_or_empty(b->series[s]));
    }
    fprintf(f, "</g>\n");
}

int pr_bars_write(const pr_bars *b, FILE *f, pr_err *err)
{
    const char *title = name_or_empty(b->title);
    if (b->n_groups < 1 || b->n_groups > PR_BARS_MAX_GROUPS || b->n_series < 1 || b->n_series > PR_BARS_MAX_SERIES)
        return pr_errf(err, "bar chart '%s': %d groups and %d series; each must be 1 to %d and 1 to %d", title,
                       b->n_groups, b->n_series, PR_BARS_MAX_GROUPS, PR_BARS_MAX_SERIES);
    int n_bars = 0;
    for (int i = 0; i < b->n_groups * b->n_series; i++) n_bars += isfinite(b->mean[i]);
    if (!n_bars) return pr_errf(err, "bar chart '%s': no bar to draw (every mean is missing)", title);
    bars_layout L;
    bars_layout_of(b, &L);
    svg_begin(f, L.width, L.height);
    if (b->title) title_at(f, L.left + L.plot_w / 2, L.width, b->title);
    for (int p = 0; p < L.n_panels; p++) draw_panel(f, b, &L, p);
    bars_legend(f, b, &L);
    fputs("</svg>\n", f);
    return 0;
}

static int write_bars(const void *b, FILE *f, pr_err *err) { return pr_bars_write(b, f, err); }

int pr_bars_save(const pr_bars *b, const char *path, pr_err *err)
{
    return save_with(write_bars, b, path, err);
}
