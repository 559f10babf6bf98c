//! A [`Plot`] as PNG bytes (`/q`'s `&png`): the chart drawn in-process with `plotters` on an RGB bitmap and
//! encoded with `png` — the picture OpenTSDB has gnuplot draw, without
//! gnuplot. The font (DejaVu Sans, Latin-1 subset; licence beside it) is
//! compiled in, so no system fonts are needed.

use std::sync::Once;

use chrono::format::{Item, StrftimeItems};
use chrono::{Offset as _, TimeZone as _};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;

use super::options::{KeyPlace, Range, Style};
use super::plot::Plot;
use super::smooth;

/// The embedded font's family name as registered with plotters.
const FONT: &str = "sans-serif";
static FONT_BYTES: &[u8] = include_bytes!("DejaVuSans-subset.ttf");
static REGISTER: Once = Once::new();

/// Gnuplot's `png small` text size, about.
const TEXT_PX: f64 = 12.0;

/// Line colours, cycled: gnuplot's png terminal's first ones (red, green,
/// blue, magenta, cyan, sienna, orange, ...).
pub(crate) const PALETTE: [[u8; 3]; 12] = [
    [0xff, 0x00, 0x00],
    [0x00, 0xc0, 0x00],
    [0x00, 0x80, 0xff],
    [0xc0, 0x00, 0xff],
    [0x00, 0xc0, 0xc0],
    [0xa0, 0x52, 0x2d],
    [0xff, 0xa0, 0x00],
    [0x80, 0x80, 0x00],
    [0x40, 0x40, 0x80],
    [0xff, 0x40, 0xa0],
    [0x80, 0x60, 0x00],
    [0x20, 0x80, 0x40],
];

/// Why a picture could not be made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RenderError {
    #[error("drawing the graph: {0}")]
    Draw(String),
    #[error("encoding the graph: {0}")]
    Encode(#[from] png::EncodingError),
}

fn draw_err<E: std::fmt::Debug>(e: E) -> RenderError {
    RenderError::Draw(format!("{e:?}"))
}

fn rgb(c: [u8; 3]) -> RGBColor {
    RGBColor(c[0], c[1], c[2])
}

/// gnuplot's default x format for a span (`Plot.xFormat`).
fn default_xformat(span_s: i64) -> &'static str {
    match span_s {
        s if s < 2100 => "%H:%M:%S",
        s if s < 86400 => "%H:%M",
        s if s < 604800 => "%a %H:%M",
        s if s < 1209600 => "%a %d %H:%M",
        s if s < 7776000 => "%b %d",
        _ => "%Y/%m/%d",
    }
}

/// Steps between time labels that read well, in seconds.
const TIME_STEPS: [i64; 24] = [
    1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400,
    172800, 604800, 1209600, 2592000, 7776000, 31536000,
];

/// Label positions: the smallest round step giving at most `n` labels,
/// on multiples of the step in local time.
fn time_ticks(start_s: i64, end_s: i64, n: usize, tz: chrono_tz::Tz) -> Vec<f64> {
    let span = (end_s - start_s).max(1);
    let step = TIME_STEPS
        .iter()
        .copied()
        .find(|s| span / s < n.max(1) as i64)
        .unwrap_or_else(|| span / n.max(1) as i64 + 1);
    let offset = tz
        .offset_from_utc_datetime(
            &chrono::DateTime::from_timestamp(start_s, 0)
                .unwrap_or_default()
                .naive_utc(),
        )
        .fix()
        .local_minus_utc() as i64;
    let mut t = (start_s + offset).div_euclid(step) * step - offset;
    if t < start_s {
        t += step;
    }
    let mut out = Vec::new();
    while t <= end_s && out.len() <= n * 2 {
        out.push(t as f64);
        t += step;
    }
    out
}

/// A time label; a format chrono cannot read is shown as given rather
/// than failing the picture.
fn time_label(fmt: &str, secs: f64, tz: chrono_tz::Tz) -> String {
    let items: Vec<Item> = StrftimeItems::new(fmt).collect();
    if items.iter().any(|i| matches!(i, Item::Error)) {
        return fmt.to_string();
    }
    match tz.timestamp_opt(secs.round() as i64, 0).single() {
        Some(t) => t.format_with_items(items.into_iter()).to_string(),
        None => String::new(),
    }
}

/// gnuplot's `%g`: six significant digits, trailing zeros dropped.
fn format_g(v: f64, precision: usize) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let p = precision.max(1);
    let exp = v.abs().log10().floor() as i32;
    if exp < -4 || exp >= p as i32 {
        let s = format!("{:.*e}", p - 1, v);
        let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
        let m = if m.contains('.') {
            m.trim_end_matches('0').trim_end_matches('.')
        } else {
            m
        };
        let e: i32 = e.parse().unwrap_or(0);
        format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs())
    } else {
        let decimals = (p as i32 - 1 - exp).max(0) as usize;
        let s = format!("{v:.decimals$}");
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    }
}

/// A y label with a gnuplot `format` string: printf conversions `%f %e
/// %g %x %X %o %d` with flags, width and precision, `%%`, and gnuplot's
/// own `%t` (mantissa), `%T` (power of ten), `%l`/`%L` (same, base 10),
/// `%s`/`%S` (mantissa and power for a multiple of 3), `%c` (SI prefix).
pub(crate) fn format_value(fmt: &str, v: f64) -> String {
    let mut out = String::new();
    let mut chars = fmt.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut flags = String::new();
        while let Some(&f) = chars.peek() {
            if "-+ 0#".contains(f) {
                flags.push(f);
                chars.next();
            } else {
                break;
            }
        }
        let mut width = String::new();
        while let Some(&d) = chars.peek().filter(|d| d.is_ascii_digit()) {
            width.push(d);
            chars.next();
        }
        let mut precision: Option<usize> = None;
        if chars.peek() == Some(&'.') {
            chars.next();
            let mut p = String::new();
            while let Some(&d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                p.push(d);
                chars.next();
            }
            precision = Some(p.parse().unwrap_or(0));
        }
        let Some(conv) = chars.next() else {
            out.push('%');
            break;
        };
        let exp10 = if v == 0.0 {
            0
        } else {
            v.abs().log10().floor() as i32
        };
        let eng = exp10.div_euclid(3) * 3;
        let body = match conv {
            '%' => "%".to_string(),
            'f' | 'F' => format!("{:.*}", precision.unwrap_or(6), v),
            'e' | 'E' => {
                let s = format!("{:.*e}", precision.unwrap_or(6), v);
                let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
                let e: i32 = e.parse().unwrap_or(0);
                let s = format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs());
                if conv == 'E' { s.to_uppercase() } else { s }
            }
            'g' | 'G' | 'h' | 'H' => format_g(v, precision.unwrap_or(6)),
            'd' | 'i' => format!("{}", v.round() as i64),
            'x' => format!("{:x}", v.round() as i64),
            'X' => format!("{:X}", v.round() as i64),
            'o' => format!("{:o}", v.round() as i64),
            't' | 'l' => format!("{:.*}", precision.unwrap_or(6), v / 10f64.powi(exp10)),
            'T' | 'L' => exp10.to_string(),
            's' => format!("{:.*}", precision.unwrap_or(6), v / 10f64.powi(eng)),
            'S' => eng.to_string(),
            'c' => si_prefix(eng).to_string(),
            other => format!("%{other}"),
        };
        let body = if flags.contains('+') && v >= 0.0 && "fFeEgGd".contains(conv) {
            format!("+{body}")
        } else {
            body
        };
        let w: usize = width.parse().unwrap_or(0);
        if body.len() < w {
            let pad = w - body.len();
            if flags.contains('-') {
                out.push_str(&body);
                out.push_str(&" ".repeat(pad));
            } else {
                out.push_str(&" ".repeat(pad));
                out.push_str(&body);
            }
        } else {
            out.push_str(&body);
        }
    }
    out
}

fn si_prefix(eng: i32) -> &'static str {
    match eng {
        -24 => "y",
        -21 => "z",
        -18 => "a",
        -15 => "f",
        -12 => "p",
        -9 => "n",
        -6 => "u",
        -3 => "m",
        3 => "k",
        6 => "M",
        9 => "G",
        12 => "T",
        15 => "P",
        18 => "E",
        21 => "Z",
        24 => "Y",
        _ => "",
    }
}

/// One y axis: its range in drawing units (log10 of the values when
/// logarithmic), and how to label it.
struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
    format: String,
}

impl Axis {
    fn new(points: &[(f64, f64)], range: Option<Range>, log: bool, format: Option<&str>) -> Axis {
        let ys = points
            .iter()
            .map(|p| p.1)
            .filter(|y| y.is_finite())
            .filter(|y| !log || *y > 0.0)
            .map(|y| if log { y.log10() } else { y });
        let (mut lo, mut hi) = ys.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), y| {
            (a.min(y), b.max(y))
        });
        let given = |v: Option<f64>| {
            v.filter(|v| !log || *v > 0.0)
                .map(|v| if log { v.log10() } else { v })
        };
        if let Some(r) = range {
            lo = given(r.min).unwrap_or(lo);
            hi = given(r.max).unwrap_or(hi);
        }
        if !lo.is_finite() || !hi.is_finite() {
            (lo, hi) = if log { (0.0, 1.0) } else { (0.0, 10.0) };
        }
        if hi < lo {
            std::mem::swap(&mut lo, &mut hi);
        }
        // Keep the span finite and wide enough to place labels on: the
        // tick search divides it, and an infinite or rounding-level span
        // would never end.
        const LIMIT: f64 = 1e300;
        lo = lo.clamp(-LIMIT, LIMIT);
        hi = hi.clamp(-LIMIT, LIMIT);
        let magnitude = lo.abs().max(hi.abs());
        if hi - lo <= (magnitude * 1e-9).max(1e-300) {
            // A flat line: centre it, as gnuplot widens a zero range.
            let pad = if magnitude < 1e-300 {
                1.0
            } else {
                magnitude * 0.1
            };
            lo -= pad;
            hi += pad;
        } else if range.is_none() {
            // Autoscale leaves a little room, as gnuplot's tics do.
            let pad = (hi - lo) * 0.05;
            lo -= pad;
            hi += pad;
        }
        Axis {
            lo,
            hi,
            log,
            format: format.unwrap_or("%g").to_string(),
        }
    }

    /// A value in drawing units. Far-off values are pulled in to a
    /// thousand spans from the axis: pixel positions must fit an `i32`,
    /// and the lines to them leave the chart in the same direction.
    fn to_drawing(&self, y: f64) -> Option<f64> {
        let v = if self.log {
            (y > 0.0).then(|| y.log10())?
        } else {
            y
        };
        let reach = (self.hi - self.lo) * 1000.0;
        Some(v.clamp(self.lo - reach, self.hi + reach))
    }

    fn label(&self, v: f64) -> String {
        let v = if self.log { 10f64.powf(v) } else { v };
        format_value(&self.format, v)
    }
}

fn key_position(k: &KeyPlace) -> SeriesLabelPosition {
    match (k.left, k.center, k.bottom) {
        (true, _, true) => SeriesLabelPosition::LowerLeft,
        (true, _, false) => SeriesLabelPosition::UpperLeft,
        (false, true, true) => SeriesLabelPosition::LowerMiddle,
        (false, true, false) => SeriesLabelPosition::UpperMiddle,
        (false, false, true) => SeriesLabelPosition::LowerRight,
        (false, false, false) => SeriesLabelPosition::UpperRight,
    }
}

/// The margin an outside key (`key=out`) takes, from gnuplot's rule: a
/// key centred across is put above or below the graph; one at a side
/// (or in a corner while stacked vertically) beside it; a corner key
/// stacked horizontally (`horiz`) above or below.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyMargin {
    Left,
    Right,
    Top,
    Bottom,
}

impl KeyMargin {
    fn of(k: &KeyPlace) -> KeyMargin {
        let side = if k.left {
            KeyMargin::Left
        } else {
            KeyMargin::Right
        };
        let end = if k.bottom {
            KeyMargin::Bottom
        } else {
            KeyMargin::Top
        };
        let across_centred = k.center && !k.left;
        let up_down_centred = k.center && !k.top && !k.bottom;
        if across_centred && !up_down_centred {
            end
        } else if up_down_centred {
            // Centred up and down (or both ways, where gnuplot has no
            // border to prefer and the key's default side is taken).
            side
        } else if k.horizontal {
            end
        } else {
            side
        }
    }
}

/// One line of the key.
struct KeyEntry {
    title: String,
    color: RGBColor,
    /// A line sample, or the point mark when there is no line.
    line: bool,
}

/// Room around and between the key's entries, in pixels.
const KEY_PAD: i32 = 6;
/// Length of a key's line sample.
const KEY_SAMPLE: i32 = 20;

/// A key drawn outside the graph, in a margin taken from the picture.
struct OutsideKey {
    margin: KeyMargin,
    entries: Vec<KeyEntry>,
    /// Entries per row (1 when stacked).
    per_row: usize,
    cell_w: i32,
    row_h: i32,
}

impl OutsideKey {
    fn new(
        root: &DrawingArea<BitMapBackend, Shift>,
        k: &KeyPlace,
        entries: Vec<KeyEntry>,
        font: &TextStyle,
        width: u32,
    ) -> OutsideKey {
        let margin = KeyMargin::of(k);
        let widest = entries
            .iter()
            .filter_map(|e| root.estimate_text_size(&e.title, font).ok())
            .map(|(w, _)| w as i32)
            .max()
            .unwrap_or(0);
        let cell_w = KEY_SAMPLE + KEY_PAD + widest + KEY_PAD;
        let row_h = TEXT_PX as i32 + KEY_PAD;
        // Above or below: as many entries side by side as the width holds.
        let per_row = match margin {
            KeyMargin::Top | KeyMargin::Bottom => ((width as i32 - 2 * KEY_PAD) / cell_w.max(1))
                .clamp(1, entries.len().max(1) as i32)
                as usize,
            KeyMargin::Left | KeyMargin::Right => 1,
        };
        OutsideKey {
            margin,
            entries,
            per_row,
            cell_w,
            row_h,
        }
    }

    fn rows(&self) -> i32 {
        self.entries.len().div_ceil(self.per_row) as i32
    }

    /// The key's box size.
    fn size(&self) -> (i32, i32) {
        let cols = self.per_row.min(self.entries.len()).max(1) as i32;
        (
            cols * self.cell_w + KEY_PAD,
            self.rows() * self.row_h + KEY_PAD,
        )
    }

    /// Width or height taken from the graph.
    fn room(&self) -> i32 {
        let (w, h) = self.size();
        match self.margin {
            KeyMargin::Left | KeyMargin::Right => w + 2 * KEY_PAD,
            KeyMargin::Top | KeyMargin::Bottom => h + 2 * KEY_PAD,
        }
    }

    /// Draws the key with its top-left corner at `at` (picture pixels).
    fn draw(
        &self,
        root: &DrawingArea<BitMapBackend, Shift>,
        at: (i32, i32),
        font: &TextStyle,
        border: Option<RGBColor>,
    ) -> Result<(), RenderError> {
        let (w, h) = self.size();
        if let Some(c) = border {
            root.draw(&Rectangle::new([at, (at.0 + w, at.1 + h)], c))
                .map_err(draw_err)?;
        }
        for (i, e) in self.entries.iter().enumerate() {
            let (col, row) = ((i % self.per_row) as i32, (i / self.per_row) as i32);
            let x = at.0 + KEY_PAD + col * self.cell_w;
            let y = at.1 + KEY_PAD + row * self.row_h + self.row_h / 2 - KEY_PAD / 2;
            if e.line {
                root.draw(&PathElement::new(
                    vec![(x, y), (x + KEY_SAMPLE, y)],
                    e.color.stroke_width(2),
                ))
                .map_err(draw_err)?;
            } else {
                root.draw(&Circle::new((x + KEY_SAMPLE / 2, y), 3, e.color.filled()))
                    .map_err(draw_err)?;
            }
            root.draw_text(
                &e.title,
                &font.pos(plotters::style::text_anchor::Pos::new(
                    plotters::style::text_anchor::HPos::Left,
                    plotters::style::text_anchor::VPos::Center,
                )),
                (x + KEY_SAMPLE + KEY_PAD, y),
            )
            .map_err(draw_err)?;
        }
        Ok(())
    }
}

/// Draws `plot` and returns the PNG file's bytes.
pub(crate) fn render(plot: &Plot) -> Result<Vec<u8>, RenderError> {
    REGISTER.call_once(|| {
        if plotters::style::register_font(FONT, FontStyle::Normal, FONT_BYTES).is_err() {
            tracing::error!("the embedded font could not be read; graphs will have no text");
        }
    });
    let (w, h) = plot.params.size();
    let mut buf = vec![0u8; w as usize * h as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
        draw(plot, &root)?;
        root.present().map_err(draw_err)?;
    }
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, w, h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut writer = enc.write_header()?;
        writer.write_image_data(&buf)?;
        writer.finish()?;
    }
    Ok(out)
}

fn draw(plot: &Plot, root: &DrawingArea<BitMapBackend, Shift>) -> Result<(), RenderError> {
    let p = &plot.params;
    // gnuplot: a foreground colour without a background one gets white.
    let bg = rgb(p.bgcolor.unwrap_or([0xff, 0xff, 0xff]));
    let fg = rgb(p.fgcolor.unwrap_or([0, 0, 0]));
    let grid = fg.mix(0.15);
    root.fill(&bg).map_err(draw_err)?;
    let font = (FONT, TEXT_PX).into_font().color(&fg);

    // Each series' points, smoothed as asked.
    let smoothing = p.smoothing();
    let lines: Vec<Vec<(f64, f64)>> = (0..plot.series.len())
        .map(|i| {
            let xy = plot.xy(i);
            match smoothing {
                Some(s) => smooth::apply(s, xy),
                None => xy,
            }
        })
        .collect();
    let plotted = plot.plotted_points().unwrap_or(0);
    let has_y2 = plot.series.iter().any(|s| s.right_axis);
    let side = |right: bool| -> Vec<(f64, f64)> {
        plot.series
            .iter()
            .zip(&lines)
            .filter(|(s, _)| s.right_axis == right)
            .flat_map(|(_, l)| l.iter().copied())
            .collect()
    };
    // No points: gnuplot cannot autoscale, so OpenTSDB forces [0:10].
    let empty = Some(Range {
        min: Some(0.0),
        max: Some(10.0),
    });
    let y1 = Axis::new(
        &side(false),
        if plotted == 0 { empty } else { p.yrange },
        p.ylog,
        p.yformat.as_deref(),
    );
    let y2 = Axis::new(&side(true), p.y2range, p.y2log, p.y2format.as_deref());

    let (x0, x1) = (plot.start_s as f64, plot.end_s as f64);
    let xfmt = p
        .xformat
        .clone()
        .unwrap_or_else(|| default_xformat(plot.end_s - plot.start_s).to_string());
    let (w, h) = p.size();
    // How many titles the key has room for; the rest are counted.
    let key_rows = ((h as f64 - 80.0) / (TEXT_PX + 6.0)).max(1.0) as usize;
    let outside = match &p.key {
        Some(k) if k.outside && !plot.series.is_empty() => {
            let entries = plot
                .series
                .iter()
                .take(key_rows)
                .enumerate()
                .map(|(i, s)| KeyEntry {
                    title: s.title(),
                    color: rgb(PALETTE[i % PALETTE.len()]),
                    line: p.style == Style::LinesPoints,
                })
                .collect();
            Some(OutsideKey::new(root, k, entries, &font, w))
        }
        _ => None,
    };
    // gnuplot moves a border inward to make room for an outside key.
    let graph_area = match &outside {
        None => root.clone(),
        Some(key) => {
            let room = key.room();
            match key.margin {
                KeyMargin::Right => root.split_horizontally(w as i32 - room).0,
                KeyMargin::Left => root.split_horizontally(room).1,
                KeyMargin::Top => root.split_vertically(room).1,
                KeyMargin::Bottom => root.split_vertically(h as i32 - room).0,
            }
        }
    };
    let mut builder = ChartBuilder::on(&graph_area);
    builder
        .margin(8)
        // Room for the last time label, half of which passes the end.
        .margin_right(if has_y2 { 8 } else { 36 })
        .x_label_area_size(28)
        .y_label_area_size(if p.ylabel.is_some() { 72 } else { 56 });
    if has_y2 {
        builder.right_y_label_area_size(if p.y2label.is_some() { 72 } else { 56 });
    }
    let x_labels = (w as usize / 110).max(2);
    let ticks = time_ticks(plot.start_s, plot.end_s, x_labels, plot.tz);
    if let Some(t) = &p.title {
        builder.caption(t, (FONT, TEXT_PX + 2.0).into_font().color(&fg));
    }
    let mut chart = builder
        .build_cartesian_2d(x0..x1, y1.lo..y1.hi)
        .map_err(draw_err)?
        .set_secondary_coord(x0..x1, y2.lo..y2.hi);

    let y_labels = (h as usize / 40).max(2);
    let fmt_y1 = |v: &f64| y1.label(*v);
    let fmt_y2 = |v: &f64| y2.label(*v);
    let mut mesh = chart.configure_mesh();
    // Time labels are drawn below, on round times.
    mesh.x_labels(0)
        .disable_x_mesh()
        .y_labels(y_labels)
        .y_label_formatter(&fmt_y1)
        .label_style(font.clone())
        .axis_style(fg)
        .bold_line_style(grid)
        .light_line_style(TRANSPARENT);
    if let Some(l) = &p.ylabel {
        mesh.y_desc(l.as_str()).axis_desc_style(font.clone());
    }
    mesh.draw().map_err(draw_err)?;
    if has_y2 {
        let mut axes = chart.configure_secondary_axes();
        axes.y_labels(y_labels)
            .y_label_formatter(&fmt_y2)
            .label_style(font.clone())
            .axis_style(fg);
        if let Some(l) = &p.y2label {
            axes.y_desc(l.as_str()).axis_desc_style(font.clone());
        }
        axes.draw().map_err(draw_err)?;
    }

    // The time grid and labels.
    let below = chart.plotting_area().get_pixel_range().1.end;
    for &t in &ticks {
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(t, y1.lo), (t, y1.hi)],
                grid,
            )))
            .map_err(draw_err)?;
        let (px, _) = chart.backend_coord(&(t, y1.lo));
        root.draw(&PathElement::new(vec![(px, below), (px, below + 4)], fg))
            .map_err(draw_err)?;
        root.draw_text(
            &time_label(&xfmt, t, plot.tz),
            &font.clone().pos(plotters::style::text_anchor::Pos::new(
                plotters::style::text_anchor::HPos::Center,
                plotters::style::text_anchor::VPos::Top,
            )),
            (px, below + 7),
        )
        .map_err(draw_err)?;
    }

    for (i, (s, pts)) in plot.series.iter().zip(&lines).enumerate() {
        let color = rgb(PALETTE[i % PALETTE.len()]);
        let axis = if s.right_axis { &y2 } else { &y1 };
        let pts: Vec<(f64, f64)> = pts
            .iter()
            .filter_map(|&(x, y)| axis.to_drawing(y).map(|y| (x, y)))
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .collect();
        let line_style = color.stroke_width(1);
        let with_lines = p.style == Style::LinesPoints;
        let title = s.title();
        let labelled = i < key_rows;
        // The key shows a line, or the mark when there is no line.
        macro_rules! draw_on {
            ($draw:ident) => {{
                if with_lines {
                    let ann = chart
                        .$draw(LineSeries::new(pts.iter().copied(), line_style))
                        .map_err(draw_err)?;
                    if labelled {
                        ann.label(title.clone()).legend(move |(x, y)| {
                            PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                        });
                    }
                }
                let ann = match p.style {
                    Style::LinesPoints | Style::Points => chart
                        .$draw(pts.iter().map(|&q| Cross::new(q, 3, color)))
                        .map_err(draw_err)?,
                    Style::Circles => chart
                        .$draw(pts.iter().map(|&q| Circle::new(q, 4, color)))
                        .map_err(draw_err)?,
                    Style::Dots => chart
                        .$draw(pts.iter().map(|&q| Pixel::new(q, color)))
                        .map_err(draw_err)?,
                };
                if labelled && !with_lines {
                    ann.label(title.clone())
                        .legend(move |(x, y)| Circle::new((x + 10, y), 3, color.filled()));
                }
            }};
        }
        if s.right_axis {
            draw_on!(draw_secondary_series);
        } else {
            draw_on!(draw_series);
        }
    }

    // Annotations: a line from bottom to top, the text at the bottom.
    for n in &plot.notes {
        let t = n.start_s as f64;
        if t < x0 || t > x1 {
            continue;
        }
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(t, y1.lo), (t, y1.hi)],
                fg.mix(0.5).stroke_width(1),
            )))
            .map_err(draw_err)?;
        chart
            .draw_series(std::iter::once(Text::new(
                n.text.clone(),
                (t, y1.lo),
                font.clone().pos(plotters::style::text_anchor::Pos::new(
                    plotters::style::text_anchor::HPos::Center,
                    plotters::style::text_anchor::VPos::Bottom,
                )),
            )))
            .map_err(draw_err)?;
    }

    if plot.series.is_empty() {
        // `set label "No data" at graph 0.5,0.9 center`.
        let (px, py) = chart.plotting_area().get_pixel_range();
        let x = (px.start + px.end) / 2;
        let y = py.start + (py.end - py.start) / 10;
        root.draw_text(
            "No data",
            &font.clone().pos(plotters::style::text_anchor::Pos::new(
                plotters::style::text_anchor::HPos::Center,
                plotters::style::text_anchor::VPos::Center,
            )),
            (x, y),
        )
        .map_err(draw_err)?;
    } else if let (Some(k), Some(key)) = (&p.key, &outside) {
        let (kw, kh) = key.size();
        let (px, py) = chart.plotting_area().get_pixel_range();
        let base = graph_area.get_base_pixel();
        let (gw, gh) = graph_area.dim_in_pixel();
        // Beside the graph: level with its top, middle or bottom. Above
        // or below: at its left, middle or right, clear of the labels.
        let across = |k: &KeyPlace| {
            if k.left {
                px.start
            } else if k.center {
                (px.start + px.end - kw) / 2
            } else {
                px.end - kw
            }
        };
        let at = match key.margin {
            KeyMargin::Right | KeyMargin::Left => {
                let x = if key.margin == KeyMargin::Right {
                    base.0 + gw as i32 + KEY_PAD
                } else {
                    KEY_PAD
                };
                let y = if k.bottom {
                    py.end - kh
                } else if k.center && !k.top {
                    (py.start + py.end - kh) / 2
                } else {
                    py.start
                };
                (x, y)
            }
            KeyMargin::Top => (across(k), KEY_PAD),
            KeyMargin::Bottom => (across(k), base.1 + gh as i32 + KEY_PAD),
        };
        key.draw(root, at, &font, k.boxed.then_some(fg))?;
    } else if let Some(k) = &p.key {
        let mut labels = chart.configure_series_labels();
        labels
            .position(key_position(k))
            .label_font(font.clone())
            .background_style(bg.mix(0.9));
        if k.boxed {
            labels.border_style(fg);
        }
        labels.draw().map_err(draw_err)?;
    }
    // Series past what the key holds, under either key (an empty plot has
    // none to count).
    if p.key.is_some() && plot.series.len() > key_rows {
        root.draw_text(
            &format!("... and {} more", plot.series.len() - key_rows),
            &font,
            (w as i32 - 160, h as i32 - 20),
        )
        .map_err(draw_err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Value;
    use crate::render::options::PlotParams;
    use crate::render::plot::{Note, PlotSeries};
    use proptest::prelude::*;

    fn value() -> impl Strategy<Value = Value> {
        prop_oneof![
            any::<i64>().prop_map(Value::Int),
            (-1e6f64..1e6).prop_map(Value::Float),
            prop_oneof![
                Just(f64::NAN),
                Just(0.0),
                Just(1e-300),
                Just(-1e300),
                Just(f64::MAX)
            ]
            .prop_map(Value::Float),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20))]

        /// Whatever the data and options, a picture of the asked size.
        #[test]
        fn any_plot_renders(
            series in proptest::collection::vec(
                (proptest::collection::vec((0i64..3600, value()), 0..40), any::<bool>()), 0..4),
            lo in proptest::option::of(-1e9f64..1e9),
            hi in proptest::option::of(-1e9f64..1e9),
            ylog in any::<bool>(),
            style in 0usize..4,
            smooth in proptest::option::of(prop::sample::select(vec![
                "unique", "frequency", "fnormal", "cumulative", "cnormal", "csplines",
                "acsplines", "mcsplines", "bezier", "sbezier", "unwrap", "zsort", "bins"])),
            xformat in proptest::option::of(prop::sample::select(vec!["%H", "%Q%", "%s", ""])),
            yformat in proptest::option::of(prop::sample::select(vec!["%g", "%.3f", "%", "%c%s", "%99999d"])),
        ) {
            let start = 1_356_998_400i64;
            let plot = Plot {
                start_s: start,
                end_s: start + 3600,
                tz: chrono_tz::UTC,
                params: PlotParams {
                    size: Some((160, 120)),
                    yrange: Some(Range { min: lo, max: hi }),
                    ylog,
                    y2log: !ylog,
                    xformat: xformat.map(String::from),
                    yformat: yformat.map(String::from),
                    smooth: smooth.map(String::from),
                    style: [Style::LinesPoints, Style::Points, Style::Circles, Style::Dots][style],
                    title: Some("t".into()),
                    ..PlotParams::default()
                },
                series: series
                    .into_iter()
                    .map(|(mut pts, right)| {
                        pts.sort_by_key(|p| p.0);
                        PlotSeries {
                            metric: "m".into(),
                            tags: vec![("h".into(), "a".into())],
                            points: pts.into_iter().map(|(t, v)| ((start + t) * 1000, v)).collect(),
                            right_axis: right,
                        }
                    })
                    .collect(),
                notes: vec![Note { start_s: start + 60, text: "deploy".into() }],
            };
            let bytes = render(&plot).unwrap();
            let dec = png::Decoder::new(std::io::Cursor::new(bytes));
            let info = dec.read_info().unwrap();
            prop_assert_eq!((info.info().width, info.info().height), (160, 120));
        }
    }

    /// Red pixels of a 400x300 picture of one flat red series (value 1 of
    /// 0..100, so its line runs along the graph's bottom) with `key`.
    fn red_pixels(key: &str) -> Vec<(u32, u32)> {
        let start = 1_356_998_400i64;
        let plot = Plot {
            start_s: start,
            end_s: start + 3600,
            tz: chrono_tz::UTC,
            params: PlotParams {
                size: Some((400, 300)),
                yrange: Some(Range {
                    min: Some(0.0),
                    max: Some(100.0),
                }),
                key: Some(crate::render::options::parse_key(key)),
                ..PlotParams::default()
            },
            series: vec![PlotSeries {
                metric: "sys.cpu.user".into(),
                tags: vec![("host".into(), "web01".into())],
                points: (0..=60)
                    .map(|i| ((start + i * 60) * 1000, Value::Int(1)))
                    .collect(),
                right_axis: false,
            }],
            notes: vec![],
        };
        let bytes = render(&plot).unwrap();
        let mut dec = png::Decoder::new(std::io::Cursor::new(bytes))
            .read_info()
            .unwrap();
        let mut buf = vec![0; dec.output_buffer_size().unwrap()];
        let info = dec.next_frame(&mut buf).unwrap();
        let w = info.width;
        buf.chunks(3)
            .enumerate()
            .filter(|(_, c)| c[0] > 200 && c[1] < 80 && c[2] < 80)
            .map(|(i, _)| (i as u32 % w, i as u32 / w))
            .collect()
    }

    /// Splits red pixels into the data line (the most common row and
    /// its neighbours, where the marks are) and the key's sample.
    fn line_and_key(red: &[(u32, u32)]) -> ((u32, u32, u32), Vec<(u32, u32)>) {
        let mut rows = std::collections::HashMap::new();
        for &(_, y) in red {
            *rows.entry(y).or_insert(0) += 1;
        }
        let row = rows.into_iter().max_by_key(|&(y, n)| (n, y)).unwrap().0;
        let near = |y: u32| y.abs_diff(row) <= 4;
        let line: Vec<u32> = red.iter().filter(|p| near(p.1)).map(|p| p.0).collect();
        let key = red.iter().copied().filter(|p| !near(p.1)).collect();
        (
            (
                *line.iter().min().unwrap(),
                *line.iter().max().unwrap(),
                row,
            ),
            key,
        )
    }

    #[test]
    fn an_outside_key_is_drawn_beside_or_below_the_graph() {
        // Inside (the default place, top right): the sample is within the
        // line's x extent, above it.
        let ((a, b, _), key) = line_and_key(&red_pixels("box"));
        assert!(!key.is_empty());
        assert!(key.iter().all(|p| p.0 > a && p.0 < b), "{a}..{b} {key:?}");

        // `out`: right of the graph, which shrinks to make room.
        let ((a_out, b_out, row), key) = line_and_key(&red_pixels("out"));
        assert!(!key.is_empty());
        assert!(b_out + 20 < b, "the graph shrank: {b_out} < {b}");
        assert!(key.iter().all(|p| p.0 > b_out), "{b_out} {key:?}");
        assert!(key.iter().all(|p| p.1 < row), "level with the top");
        assert_eq!(a_out, a);

        // `out left`: left of the graph, whose left border moves right.
        let ((a_left, _, _), key) = line_and_key(&red_pixels("out left"));
        assert!(a_left > a + 20, "{a_left} > {a}");
        assert!(
            !key.is_empty() && key.iter().all(|p| p.0 < a_left),
            "{a_left} {key:?}"
        );

        // `out bottom center`: below the graph and its time labels.
        let ((_, _, row_below), key) = line_and_key(&red_pixels("out bottom center"));
        assert!(row_below + 10 < row, "the graph shrank from below");
        assert!(!key.is_empty());
        assert!(
            key.iter().all(|p| p.1 > row_below + 20),
            "{row_below} {key:?}"
        );

        // `out center top`: above the graph.
        let ((_, _, row_above), key) = line_and_key(&red_pixels("out center top"));
        assert_eq!(row_above, row);
        assert!(!key.is_empty());
        assert!(key.iter().all(|p| p.1 < 40), "{key:?}");
    }

    #[test]
    fn outside_key_margins_follow_gnuplots_rule() {
        use crate::render::options::parse_key;
        let m = |k: &str| KeyMargin::of(&parse_key(k));
        assert_eq!(m("out"), KeyMargin::Right);
        assert_eq!(m("out left"), KeyMargin::Left);
        assert_eq!(m("out left bottom"), KeyMargin::Left);
        assert_eq!(m("out center"), KeyMargin::Right);
        assert_eq!(m("out left center"), KeyMargin::Left);
        assert_eq!(m("out bottom center"), KeyMargin::Bottom);
        assert_eq!(m("out top center"), KeyMargin::Top);
        assert_eq!(m("out horiz"), KeyMargin::Top);
        assert_eq!(m("out bottom horiz"), KeyMargin::Bottom);
    }

    #[test]
    fn value_formats() {
        assert_eq!(format_value("%g", 1500.0), "1500");
        assert_eq!(format_value("%g", 0.000012), "1.2e-05");
        assert_eq!(format_value("%.2f ms", 1.23456), "1.23 ms");
        assert_eq!(format_value("%x", 255.0), "ff");
        assert_eq!(format_value("%s%c", 2500.0), "2.500000k");
        assert_eq!(format_value("%.1s %cB", 2_500_000.0), "2.5 MB");
        assert_eq!(format_value("100%%", 1.0), "100%");
        assert_eq!(format_value("%e", 12345.0), "1.234500e+04");
    }

    #[test]
    fn x_formats_by_span() {
        assert_eq!(default_xformat(60), "%H:%M:%S");
        assert_eq!(default_xformat(86400 * 3), "%a %H:%M");
        assert_eq!(default_xformat(86400 * 365), "%Y/%m/%d");
        assert_eq!(
            time_label("%Y/%m/%d %H:%M", 1356998400.0, chrono_tz::UTC),
            "2013/01/01 00:00"
        );
        assert_eq!(time_label("%Q", 0.0, chrono_tz::UTC), "%Q");
        let t = time_ticks(1356998400 + 7, 1356998400 + 3600, 6, chrono_tz::UTC);
        assert_eq!(t[0], 1356998400.0 + 600.0);
        assert_eq!(t.len(), 6);
    }
}
