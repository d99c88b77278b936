/* tools/plot.c: line plots written as SVG (tools/plot.h). The plot area sits
 * in a fixed frame (margins for tick labels, axis labels, a legend on the
 * right); data map linearly or by log10 into it. Ticks are "nice" numbers so
 * a reader can interpolate: 1, 2 or 5 times a power of ten, or the powers of
 * ten themselves on a log axis. */
#include "tools/plot.h"

#include <errno.h>
#include <math.h>
#include <string.h>

enum { WIDTH = 760, MIN_HEIGHT = 440, LEFT = 80, RIGHT = 200, TOP = 40, BOTTOM = 60, LEGEND_ROW = 16,
       MARKERS_UP_TO = 60 };

/* distinguishable on white, and in grey print (Tableau 10's hues) */
static const char *const palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                      "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

/* after the ten hues, the same hues dashed, then dotted */
static const char *const dashes[] = {"none", "7 3", "2 2"};
#define N_COLORS (sizeof palette / sizeof palette[0])

static const char *series_color(int k) { return palette[k % N_COLORS]; }
static const char *series_dash(int k) { return dashes[(k / N_COLORS) % (sizeof dashes / sizeof dashes[0])]; }

bool pr_plot_add(pr_plot *p, const char *name, int n, const double *x, const double *y)
{
    if (p->n_series == PR_PLOT_MAX_SERIES) return false;
    p->series[p->n_series++] = (pr_plot_series){.name = name, .n = n, .x = x, .y = y};
    return true;
}

/* the one of 1, 2, 5 or 10 times a power of ten nearest to x */
static double nice_step(double x)
{
    double e = pow(10, floor(log10(x))), f = x / e;
    return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * e;
}

static int linear_ticks(double lo, double hi, double *ticks, double *axis_lo, double *axis_hi)
{
    if (hi <= lo) {   /* one value: a unit-wide window around it */
        double pad = lo != 0 ? fabs(lo) * 0.5 : 1;
        lo -= pad, hi += pad;
    }
    double step = nice_step((hi - lo) / 4);
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
    return log_scale ? log_ticks(lo, hi, ticks, axis_lo, axis_hi) : linear_ticks(lo, hi, ticks, axis_lo, axis_hi);
}

static bool shown(double v, bool log_scale)
{
    return isfinite(v) && (!log_scale || v > 0);
}

static bool point_shown(const pr_plot *p, const pr_plot_series *s, int i)
{
    return shown(s->x[i], p->xlog) && shown(s->y[i], p->ylog);
}

/* the range of the points the axes can show; false when there are none */
static bool data_range(const pr_plot *p, bool y_axis, double *lo, double *hi)
{
    *lo = INFINITY, *hi = -INFINITY;
    for (int k = 0; k < p->n_series; k++) {
        const pr_plot_series *s = &p->series[k];
        for (int i = 0; i < s->n; i++) {
            if (!point_shown(p, s, i)) continue;
            double v = y_axis ? s->y[i] : s->x[i];
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

/* text with the five XML specials escaped */
static void put_text(FILE *f, const char *s)
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
    put_text(f, s);
    fputs("</text>\n", f);
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

/* the y tick labels left of x0, and the axis label turned upright beside them */
static void y_labels(FILE *f, const axis *ay, double x0, const char *ylabel)
{
    char label[32];
    fprintf(f, "<g class=\"yticks\" font-size=\"12\">\n");
    for (int i = 0; i < ay->n_ticks; i++) {
        snprintf(label, sizeof label, "%g", ay->ticks[i]);
        text_at(f, x0 - 6, pos(ay, ay->ticks[i]) + 4, "end", "", label);
    }
    fprintf(f, "</g>\n");
    if (!ylabel) return;
    double mid = (ay->p0 + ay->p1) / 2;
    char rot[64];
    snprintf(rot, sizeof rot, " font-size=\"13\" transform=\"rotate(-90 18 %.1f)\"", mid);
    text_at(f, 18, mid, "middle", rot, ylabel);
}

static void svg_begin(FILE *f, int width, int height)
{
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"sans-serif\">\n<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n",
            width, height, width, height, width, height);
}

/* a document closed by fclose, which may be where a full disk shows */
static int save_with(int (*write)(const void *, FILE *, pr_err *), const void *what, const char *path, pr_err *err)
{
    FILE *f = fopen(path, "w");
    if (!f) return pr_errf(err, "%s: cannot write the plot: %s", path, strerror(errno));
    int rc = write(what, f, err);
    if (fclose(f) != 0 && rc == 0) rc = pr_errf(err, "%s: write failed: %s", path, strerror(errno));
    return rc;
}

static void draw_axes(FILE *f, const pr_plot *p, const axis *ax, const axis *ay)
{
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
        snprintf(label, sizeof label, "%g", ax->ticks[i]);
        text_at(f, pos(ax, ax->ticks[i]), y0 + 18, "middle", "", label);
    }
    fprintf(f, "</g>\n");
    y_labels(f, ay, x0, p->ylabel);
    if (p->title) text_at(f, (x0 + x1) / 2, 24, "middle", " font-size=\"16\"", p->title);
    if (p->xlabel) text_at(f, (x0 + x1) / 2, y0 + BOTTOM - 16, "middle", " font-size=\"13\"", p->xlabel);
}

/* one polyline per run of points the axes can show */
static void draw_series(FILE *f, const pr_plot *p, int k, const axis *ax, const axis *ay)
{
    const pr_plot_series *s = &p->series[k];
    const char *color = series_color(k);
    fprintf(f, "<g class=\"series\" stroke=\"%s\" stroke-dasharray=\"%s\" fill=\"none\" stroke-width=\"1.8\">\n",
            color, series_dash(k));
    bool open = false;
    for (int i = 0; i < s->n; i++) {
        if (!point_shown(p, s, i)) {
            if (open) fputs("\"/>\n", f);
            open = false;
            continue;
        }
        if (!open) fputs("<polyline points=\"", f);
        fprintf(f, "%s%.2f,%.2f", open ? " " : "", pos(ax, s->x[i]), pos(ay, s->y[i]));
        open = true;
    }
    if (open) fputs("\"/>\n", f);
    if (s->n <= MARKERS_UP_TO)
        for (int i = 0; i < s->n; i++)
            if (point_shown(p, s, i))
                fprintf(f, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"2.5\" fill=\"%s\"/>\n", pos(ax, s->x[i]),
                        pos(ay, s->y[i]), color);
    fputs("</g>\n", f);
}

static void draw_legend(FILE *f, const pr_plot *p)
{
    double x = WIDTH - RIGHT + 16;
    fprintf(f, "<g class=\"legend\" font-size=\"12\">\n");
    for (int k = 0; k < p->n_series; k++) {
        double y = TOP + 10 + LEGEND_ROW * k;
        fprintf(f,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-dasharray=\"%s\" "
                "stroke-width=\"3\"/>\n",
                x, y, x + 22, y, series_color(k), series_dash(k));
        text_at(f, x + 28, y + 4, "start", "", p->series[k].name ? p->series[k].name : "");
    }
    fprintf(f, "</g>\n");
}

/* tall enough for the legend */
static int plot_height(const pr_plot *p)
{
    int legend = TOP + 10 + LEGEND_ROW * p->n_series + BOTTOM;
    return legend > MIN_HEIGHT ? legend : MIN_HEIGHT;
}

static bool make_axis(const pr_plot *p, bool y_axis, axis *a)
{
    /* y grows upwards: its pixel axis runs from the bottom */
    a->p0 = y_axis ? plot_height(p) - BOTTOM : LEFT;
    a->p1 = y_axis ? TOP : WIDTH - RIGHT;
    double lo, hi;
    if (!data_range(p, y_axis, &lo, &hi)) return false;
    a->log_scale = y_axis ? p->ylog : p->xlog;
    a->n_ticks = pr_plot_ticks(lo, hi, a->log_scale, a->ticks, &a->lo, &a->hi);
    return true;
}

int pr_plot_write(const pr_plot *p, FILE *f, pr_err *err)
{
    axis ax, ay;
    if (!make_axis(p, false, &ax) || !make_axis(p, true, &ay))
        return pr_errf(err, "plot '%s': no point to draw (every value non-finite, or <= 0 on a log axis)",
                       p->title ? p->title : "");
    svg_begin(f, WIDTH, plot_height(p));
    draw_axes(f, p, &ax, &ay);
    for (int k = 0; k < p->n_series; k++) draw_series(f, p, k, &ax, &ay);
    draw_legend(f, p);
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
       CHAR_W = 7, MIN_PLOT_W = 360, SWATCH = 12 };

typedef struct {
    int n_panels, max_slots;
    const char *unit[PR_BARS_MAX_GROUPS];   /* each panel's */
    int slots[PR_BARS_MAX_GROUPS];          /* each panel's number of groups */
    int panel[PR_BARS_MAX_GROUPS], slot[PR_BARS_MAX_GROUPS];   /* each group's */
    double bar_w, group_w, plot_w;
    int width, height;
} bars_layout;

static const char *unit_of(const pr_bars *b, int g) { return b->unit[g] ? b->unit[g] : ""; }
static const char *name_or_empty(const char *s) { return s ? s : ""; }
static double text_w(const char *s) { return CHAR_W * (double)strlen(name_or_empty(s)); }

/* the hue of series s; past the ten hues, the same ones paler (outlined, so a
 * pale bar keeps its edge) */
static void bar_fill(FILE *f, int s)
{
    static const char *const opacity[] = {"1", "0.45", "0.15"};
    fprintf(f, " fill=\"%s\" fill-opacity=\"%s\" stroke=\"%s\"", series_color(s), opacity[s / N_COLORS % 3],
            series_color(s));
}

static double bar_mean(const pr_bars *b, int s, int g) { return b->mean[s * b->n_groups + g]; }

/* the error bar's half-height, 0 for none */
static double bar_spread(const pr_bars *b, int s, int g)
{
    double e = b->spread ? b->spread[s * b->n_groups + g] : 0;
    return isfinite(e) && e > 0 ? e : 0;
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
        label_w = fmax(label_w, fmax(text_w(b->group[g]), text_w(unit_of(b, g)) + 2 * CHAR_W));
    }
    for (int s = 0; s < b->n_series; s++) legend_w = fmax(legend_w, text_w(b->series[s]));
    /* bars fill a modest width when there are few; a long label widens its slot instead of overlapping */
    double fill = ((double)MIN_PLOT_W / L->max_slots - GROUP_GAP) / b->n_series;
    L->bar_w = fmin(BAR_MAX, fmax(BAR_MIN, floor(fill)));
    L->group_w = fmax(L->bar_w * b->n_series + GROUP_GAP, label_w + 10);
    L->plot_w = L->group_w * L->max_slots;
    L->width = (int)ceil(LEFT + L->plot_w + 24 + SWATCH + 6 + legend_w + 16);
    int panels = TOP + L->n_panels * (PANEL_H + PANEL_LABELS) + (L->n_panels - 1) * PANEL_GAP + 10;
    int legend = TOP + LEGEND_ROW * b->n_series + 20;
    L->height = panels > legend ? panels : legend;
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
    double top = TOP + p * (PANEL_H + PANEL_LABELS + PANEL_GAP);
    *ay = (axis){.p0 = top + PANEL_H, .p1 = top};
    ay->n_ticks = pr_plot_ticks(lo, hi, false, ay->ticks, &ay->lo, &ay->hi);
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
    put_text(f, name_or_empty(b->series[s]));
    fputs(", ", f);
    put_text(f, name_or_empty(b->group[g]));
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
    double x0 = LEFT, x1 = LEFT + L->slots[p] * L->group_w;   /* as wide as its groups */
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
    double x = LEFT + L->plot_w + 24;
    fprintf(f, "<g class=\"legend\" font-size=\"12\">\n");
    for (int s = 0; s < b->n_series; s++) {
        double y = TOP + LEGEND_ROW * s;
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
    if (b->title) text_at(f, LEFT + L.plot_w / 2, 24, "middle", " font-size=\"16\"", b->title);
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
