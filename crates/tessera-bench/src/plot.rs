//! Line plots of benchmark results, rendered to PNG with nothing but `std`.
//!
//! `tessera bench NAME` measures the figure a paper reports (for example bandwidth in
//! MiB/s against piece size for the methods `multiple`, `pack` and `gather`) and hands
//! the numbers here as a [`Plot`] holding one [`Series`] per method. [`Plot::render_png`]
//! lays the figure out (title, axes with numeric ticks, axis labels, one coloured line
//! with square markers per series, a legend on the right), rasterises it onto an
//! 800x500 RGB canvas with an embedded 5x7 bitmap font (plus a descender row) drawn at
//! 2x, and encodes the canvas as a PNG. The PNG's zlib stream uses stored
//! (uncompressed) deflate blocks, so a file is about 1.2 MB; that keeps the encoder
//! small and free of external crates, which is the point of this module. Points with a
//! NaN or infinite coordinate (or, on a log2 x axis, an x that is not positive) are
//! skipped rather than drawn, so rendering never fails on odd measurements.

use std::path::Path;

/// One named line of a [`Plot`], e.g. the bandwidths measured with one method.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Series {
    /// Name shown in the legend (at most 16 characters are shown).
    pub name: String,
    /// Data points `(x, y)` in any order; they are drawn joined in increasing x.
    /// Points with a non-finite coordinate are skipped.
    pub points: Vec<(f64, f64)>,
}

/// A line plot: title, axis labels and any number of series.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plot {
    /// Title drawn centred above the plot area.
    pub title: String,
    /// Label under the x axis.
    pub x_label: String,
    /// Label left of the y axis, drawn reading upwards.
    pub y_label: String,
    /// Use a base-2 logarithmic x axis, ticked at the x values present in the data
    /// (e.g. piece sizes 128, 256, ..., 8192). Points with x <= 0 are skipped.
    pub log2_x: bool,
    /// The lines to draw, each in its own colour.
    pub series: Vec<Series>,
}

/// What only some figures draw, beside a [`Plot`]'s lines: a logarithmic y axis, the spread
/// of each point over repetitions, dashed lines. Indexed like [`Plot::series`]; missing
/// entries are plain.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Decorations {
    /// Use a base-10 logarithmic y axis ticked at powers of ten; points and bars with a y
    /// that is not positive are skipped.
    pub log10_y: bool,
    /// Per series, error bars `(x, low, high)` (e.g. the minimum and maximum over
    /// repetitions), drawn in the series' colour with caps.
    pub spread: Vec<Vec<(f64, f64, f64)>>,
    /// Per series, whether its line is dashed (in the legend too).
    pub dashed: Vec<bool>,
}

impl Plot {
    /// Renders to PNG bytes: an 800x500, 8-bit RGB image.
    #[must_use]
    pub fn render_png(&self) -> Vec<u8> {
        self.render_png_decorated(&Decorations::default())
    }

    /// [`Plot::render_png`] with the optional [`Decorations`].
    #[must_use]
    pub fn render_png_decorated(&self, decorations: &Decorations) -> Vec<u8> {
        let (canvas, _area) = self.render_canvas(decorations);
        encode_png(&canvas)
    }

    /// Writes the PNG to `path`, replacing any existing file.
    ///
    /// # Errors
    ///
    /// Any I/O error from creating or writing the file.
    pub fn write_png(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, self.render_png())
    }

    /// Draws the whole figure; also returns where the plot area ended up.
    fn render_canvas(&self, decorations: &Decorations) -> (Canvas, PlotArea) {
        let log10_y = decorations.log10_y;
        let series: Vec<Vec<DataPoint>> = self
            .series
            .iter()
            .map(|series| {
                let mut points = clean_points(&series.points, self.log2_x);
                if log10_y {
                    points.retain(|point| point.y > 0.0);
                    for point in &mut points {
                        point.y = point.y.log10();
                    }
                }
                points
            })
            .collect();
        // Error bars in axis space: (x, low, high), dropped where they cannot be placed.
        let bars: Vec<Vec<(f64, f64, f64)>> = (0..self.series.len())
            .map(|index| {
                decorations
                    .spread
                    .get(index)
                    .map(|bars| {
                        bars.iter()
                            .filter(|(x, low, high)| {
                                x.is_finite()
                                    && low.is_finite()
                                    && high.is_finite()
                                    && (!self.log2_x || *x > 0.0)
                                    && (!log10_y || *low > 0.0)
                            })
                            .map(|&(x, low, high)| {
                                let x = if self.log2_x { x.log2() } else { x };
                                if log10_y {
                                    (x, low.log10(), high.log10())
                                } else {
                                    (x, low, high)
                                }
                            })
                            .collect()
                    })
                    .unwrap_or_default()
            })
            .collect();
        let all_points = || series.iter().flatten();

        let x_axis = if self.log2_x {
            log2_axis(all_points().map(|point| point.raw_x))
        } else {
            let (low, high) = value_range(all_points().map(|point| point.x)).unwrap_or((0.0, 1.0));
            nice_axis(low, high, false)
        };
        let (y_low, y_high) = value_range(
            all_points()
                .map(|point| point.y)
                .chain(bars.iter().flatten().flat_map(|bar| [bar.1, bar.2])),
        )
        .unwrap_or((0.0, 1.0));
        let y_axis = if log10_y {
            log10_axis(y_low, y_high)
        } else {
            nice_axis(y_low, y_high, true)
        };

        let area = self.layout(&y_axis);
        let mut canvas = Canvas::new(WIDTH, HEIGHT);
        draw_grid_and_axes(&mut canvas, &area, &x_axis, &y_axis);
        self.draw_labels(&mut canvas, &area);

        let mut any_point = false;
        for (index, points) in series.iter().enumerate() {
            let colour = series_colour(index);
            let pixels: Vec<(i32, i32)> = points
                .iter()
                .map(|point| (area.map_x(&x_axis, point.x), area.map_y(&y_axis, point.y)))
                .collect();
            let dashed = decorations.dashed.get(index).copied().unwrap_or(false);
            for pair in pixels.windows(2) {
                if dashed {
                    draw_dashed_line(&mut canvas, pair[0], pair[1], colour);
                } else {
                    canvas.draw_line(pair[0], pair[1], LINE_THICKNESS, colour);
                }
            }
            for &(x, low, high) in &bars[index] {
                let x = area.map_x(&x_axis, x);
                let (low, high) = (area.map_y(&y_axis, low), area.map_y(&y_axis, high));
                canvas.draw_line((x, low), (x, high), 1, colour);
                canvas.draw_line((x - BAR_CAP_HALF, low), (x + BAR_CAP_HALF, low), 1, colour);
                canvas.draw_line(
                    (x - BAR_CAP_HALF, high),
                    (x + BAR_CAP_HALF, high),
                    1,
                    colour,
                );
            }
            for &(x, y) in &pixels {
                draw_marker(&mut canvas, x, y, colour);
            }
            any_point |= !pixels.is_empty();
        }
        if !any_point {
            let message = "no data";
            let x = (area.left + area.right - text_width(message)) / 2;
            let y = (area.top + area.bottom - TEXT_HEIGHT) / 2;
            draw_text(&mut canvas, x, y, message, MUTED_TEXT);
        }
        self.draw_legend(&mut canvas, &area, &decorations.dashed);
        (canvas, area)
    }

    /// Places the plot area so the y tick labels, axis labels, title and legend fit.
    fn layout(&self, y_axis: &Axis) -> PlotArea {
        let widest_y_tick = y_axis
            .ticks
            .iter()
            .map(|tick| text_width(&tick.label))
            .max()
            .unwrap_or(0);
        let y_label_space = if self.y_label.is_empty() {
            0
        } else {
            TEXT_HEIGHT + 12
        };
        let left = MARGIN + y_label_space + widest_y_tick + TICK_LENGTH + 6;
        let right = if self.series.is_empty() {
            WIDTH - 2 * MARGIN
        } else {
            WIDTH - MARGIN - self.legend_width() - 2 * MARGIN
        };
        let top = if self.title.is_empty() {
            2 * MARGIN
        } else {
            44
        };
        let bottom = HEIGHT - if self.x_label.is_empty() { 40 } else { 64 };
        PlotArea {
            left,
            right: right.max(left + 1),
            top,
            bottom: bottom.max(top + 1),
        }
    }

    /// Title above the plot area, x label below it, y label to its left.
    fn draw_labels(&self, canvas: &mut Canvas, area: &PlotArea) {
        let title_x = ((WIDTH - text_width(&self.title)) / 2).max(MARGIN);
        draw_text(canvas, title_x, 14, &self.title, TEXT);

        let x_label_x = ((area.left + area.right - text_width(&self.x_label)) / 2).max(MARGIN);
        draw_text(canvas, x_label_x, area.bottom + 36, &self.x_label, TEXT);

        let y_label_bottom =
            ((area.top + area.bottom + text_width(&self.y_label)) / 2).min(HEIGHT - MARGIN);
        draw_text_upwards(canvas, MARGIN, y_label_bottom, &self.y_label, TEXT);
    }

    fn legend_width(&self) -> i32 {
        let longest = self
            .series
            .iter()
            .map(|series| legend_name(&series.name).chars().count())
            .max()
            .unwrap_or(0);
        let longest = i32::try_from(longest).unwrap_or(0);
        LEGEND_TEXT_OFFSET + longest * CHAR_ADVANCE + LEGEND_PADDING
    }

    /// A boxed legend right of the plot area: a line sample, marker and name per series.
    fn draw_legend(&self, canvas: &mut Canvas, area: &PlotArea, dashed: &[bool]) {
        if self.series.is_empty() {
            return;
        }
        let left = area.right + 2 * MARGIN;
        let width = self.legend_width();
        let count = i32::try_from(self.series.len()).unwrap_or(i32::MAX / LEGEND_ROW);
        let height = count.saturating_mul(LEGEND_ROW) + LEGEND_PADDING;
        canvas.fill_rect(left, area.top, width, height, BACKGROUND);
        canvas.stroke_rect(left, area.top, width, height, FRAME);

        let mut row_top = area.top + LEGEND_PADDING / 2;
        for (index, series) in self.series.iter().enumerate() {
            if row_top > HEIGHT {
                break;
            }
            let colour = series_colour(index);
            let centre_y = row_top + LEGEND_ROW / 2;
            if dashed.get(index).copied().unwrap_or(false) {
                draw_dashed_line(canvas, (left + 8, centre_y), (left + 32, centre_y), colour);
            } else {
                canvas.draw_line(
                    (left + 8, centre_y),
                    (left + 32, centre_y),
                    LINE_THICKNESS,
                    colour,
                );
            }
            draw_marker(canvas, left + 20, centre_y, colour);
            let name = legend_name(&series.name);
            draw_text(
                canvas,
                left + LEGEND_TEXT_OFFSET,
                centre_y - TEXT_HEIGHT / 2,
                &name,
                TEXT,
            );
            row_top += LEGEND_ROW;
        }
    }
}

// ---------------------------------------------------------------------------------------
// Layout constants and colours.

/// Image width in pixels.
const WIDTH: i32 = 800;
/// Image height in pixels.
const HEIGHT: i32 = 500;
/// Gap kept between the image border and anything drawn.
const MARGIN: i32 = 12;
/// Length of the tick marks outside the plot area.
const TICK_LENGTH: i32 = 5;
/// Thickness of series lines.
const LINE_THICKNESS: i32 = 2;
/// Half the side of a square marker (the side is `2 * MARKER_HALF + 1`).
const MARKER_HALF: i32 = 3;
/// Half the width of an error bar's caps.
const BAR_CAP_HALF: i32 = 4;
/// Pixels drawn, then pixels skipped, along a dashed line.
const DASH_ON: i32 = 7;
const DASH_OFF: i32 = 5;
/// Height of one legend row.
const LEGEND_ROW: i32 = 22;
/// Where a legend name starts, relative to the legend's left edge.
const LEGEND_TEXT_OFFSET: i32 = 40;
/// Space around the legend's rows inside its box.
const LEGEND_PADDING: i32 = 8;
/// Legend names are cut to this many characters.
const MAX_LEGEND_CHARS: usize = 16;
/// About how many intervals an automatic axis is split into.
const TARGET_INTERVALS: f64 = 5.0;
/// Upper bound on ticks of an automatic axis (guards against degenerate ranges).
const MAX_TICKS: u32 = 64;
/// Pixel coordinates are clamped to this magnitude before drawing.
const MAX_PIXEL_COORDINATE: f64 = 100_000.0;

/// An RGB colour.
type Rgb = [u8; 3];

const BACKGROUND: Rgb = [255, 255, 255];
const TEXT: Rgb = [0, 0, 0];
const MUTED_TEXT: Rgb = [120, 120, 120];
const FRAME: Rgb = [40, 40, 40];
const GRID: Rgb = [225, 225, 225];

/// Series colours (the "tab10" palette), reused cyclically after ten series.
const PALETTE: [Rgb; 10] = [
    [31, 119, 180],
    [255, 127, 14],
    [44, 160, 44],
    [214, 39, 40],
    [148, 103, 189],
    [140, 86, 75],
    [227, 119, 194],
    [127, 127, 127],
    [188, 189, 34],
    [23, 190, 207],
];

fn series_colour(index: usize) -> Rgb {
    PALETTE[index % PALETTE.len()]
}

fn legend_name(name: &str) -> String {
    if name.chars().count() <= MAX_LEGEND_CHARS {
        name.to_owned()
    } else {
        let mut short: String = name.chars().take(MAX_LEGEND_CHARS - 2).collect();
        short.push_str("..");
        short
    }
}

// ---------------------------------------------------------------------------------------
// Data clean-up and axes.

/// A plottable point: `x` is in axis space (log2 of `raw_x` on a log2 axis).
#[derive(Debug, Clone, Copy)]
struct DataPoint {
    raw_x: f64,
    x: f64,
    y: f64,
}

/// Drops points that cannot be placed and sorts the rest by x.
fn clean_points(points: &[(f64, f64)], log2_x: bool) -> Vec<DataPoint> {
    let mut cleaned: Vec<DataPoint> = points
        .iter()
        .filter(|(x, y)| x.is_finite() && y.is_finite() && (!log2_x || *x > 0.0))
        .map(|&(raw_x, y)| DataPoint {
            raw_x,
            x: if log2_x { raw_x.log2() } else { raw_x },
            y,
        })
        .collect();
    cleaned.sort_by(|a, b| a.x.total_cmp(&b.x));
    cleaned
}

/// Smallest and largest of the values, or `None` when there are none.
fn value_range(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    values.fold(None, |range, value| match range {
        None => Some((value, value)),
        Some((low, high)) => Some((low.min(value), high.max(value))),
    })
}

/// An axis in axis space (log2 of the data for a log2 axis) with its labelled ticks.
#[derive(Debug, Clone)]
struct Axis {
    min: f64,
    max: f64,
    ticks: Vec<Tick>,
}

#[derive(Debug, Clone)]
struct Tick {
    /// Position in axis space.
    value: f64,
    label: String,
}

impl Axis {
    /// Fraction of the way from `min` to `max`; NaN-free for a degenerate axis.
    fn fraction(&self, value: f64) -> f64 {
        let span = self.max - self.min;
        if span.is_finite() && span > 0.0 {
            (value - self.min) / span
        } else {
            0.5
        }
    }
}

/// A log2 axis ticked at each distinct positive x in the data (or at 1 and 2 if none).
fn log2_axis(raw_xs: impl Iterator<Item = f64>) -> Axis {
    let mut xs: Vec<f64> = raw_xs.collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    let (Some(&first), Some(&last)) = (xs.first(), xs.last()) else {
        return Axis {
            min: 0.0,
            max: 1.0,
            ticks: vec![
                Tick {
                    value: 0.0,
                    label: "1".to_owned(),
                },
                Tick {
                    value: 1.0,
                    label: "2".to_owned(),
                },
            ],
        };
    };
    let (low, high) = (first.log2(), last.log2());
    let pad = if high > low { (high - low) * 0.05 } else { 0.5 };
    Axis {
        min: low - pad,
        max: high + pad,
        ticks: xs
            .iter()
            .map(|&x| Tick {
                value: x.log2(),
                label: format_plain(x),
            })
            .collect(),
    }
}

/// A log10 axis over `[low, high]` (given in log10 space), ticked at each power of ten
/// between the whole decades around them.
fn log10_axis(low: f64, high: f64) -> Axis {
    let (mut min, mut max) = (low.floor(), high.ceil());
    if !(min.is_finite() && max.is_finite()) {
        (min, max) = (0.0, 1.0);
    }
    if max <= min {
        max = min + 1.0;
    }
    let mut ticks = Vec::new();
    let mut value = min;
    while value <= max && ticks.len() < MAX_TICKS as usize {
        ticks.push(Tick {
            value,
            label: format_plain(10f64.powf(value)),
        });
        value += 1.0;
    }
    Axis { min, max, ticks }
}

/// A linear axis covering `[low, high]` (and 0 if `include_zero`) with about five
/// ticks at "nice" values: 1, 2 or 5 times a power of ten.
fn nice_axis(low: f64, high: f64, include_zero: bool) -> Axis {
    let (mut low, mut high) = if include_zero {
        (low.min(0.0), high.max(0.0))
    } else {
        (low, high)
    };
    if !(low.is_finite() && high.is_finite()) {
        (low, high) = (0.0, 1.0);
    }
    if high <= low {
        if include_zero && low == 0.0 {
            high = 1.0;
        } else {
            let pad = if low == 0.0 { 1.0 } else { low.abs() * 0.1 };
            (low, high) = (low - pad, high + pad);
        }
    }
    let step = nice_step((high - low) / TARGET_INTERVALS)
        .or_else(|| nice_step(high / TARGET_INTERVALS - low / TARGET_INTERVALS))
        .unwrap_or(1.0);
    // The tolerance stops rounding noise (0.05 / 0.01 = 5.000000000000001) adding a tick.
    let min = (low / step + 1e-9).floor() * step;
    let max = (high / step - 1e-9).ceil() * step;
    let mut ticks = Vec::new();
    for index in 0..=MAX_TICKS {
        let value = min + step * f64::from(index);
        if !value.is_finite() || value > max + step * 1e-9 {
            break;
        }
        ticks.push(Tick {
            value,
            label: format_tick(value, step),
        });
    }
    Axis { min, max, ticks }
}

/// The "nice" step (1, 2 or 5 times a power of ten) nearest above `raw`.
fn nice_step(raw: f64) -> Option<f64> {
    if !(raw.is_finite() && raw > 0.0) {
        return None;
    }
    let magnitude = 10f64.powf(raw.log10().floor());
    let fraction = raw / magnitude;
    let tolerance = 1e-9;
    let nice = if fraction <= 1.0 + tolerance {
        1.0
    } else if fraction <= 2.0 + tolerance {
        2.0
    } else if fraction <= 5.0 + tolerance {
        5.0
    } else {
        10.0
    };
    let step = nice * magnitude;
    (step.is_finite() && step > 0.0).then_some(step)
}

/// Label for a tick of a linear axis with the given step: as many decimals as the step
/// needs, scientific notation for very large or very small magnitudes.
fn format_tick(value: f64, step: f64) -> String {
    let value = if value.abs() < step * 1e-6 {
        0.0
    } else {
        value
    };
    let magnitude = value.abs();
    if magnitude != 0.0 && !(1e-4..1e7).contains(&magnitude) {
        return format_scientific(value);
    }
    let decimals = decimals_for_step(step);
    format!("{value:.decimals$}")
}

/// How many decimals show multiples of `step` exactly (at most 10).
fn decimals_for_step(step: f64) -> usize {
    let mut scaled = step.abs();
    let mut decimals = 0;
    while decimals < 10 && (scaled - scaled.round()).abs() > 1e-6 * scaled {
        scaled *= 10.0;
        decimals += 1;
    }
    decimals
}

/// Compact label for a data value (up to three decimals, no trailing zeros).
fn format_plain(value: f64) -> String {
    let magnitude = value.abs();
    if magnitude != 0.0 && !(1e-3..1e7).contains(&magnitude) {
        return format_scientific(value);
    }
    trim_fraction(&format!("{value:.3}"))
}

/// `1.50e20` style with the mantissa's trailing zeros removed: `1.5e20`, `1e-5`.
fn format_scientific(value: f64) -> String {
    let text = format!("{value:.2e}");
    match text.split_once('e') {
        Some((mantissa, exponent)) => format!("{}e{exponent}", trim_fraction(mantissa)),
        None => text,
    }
}

fn trim_fraction(number: &str) -> String {
    if number.contains('.') {
        number
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_owned()
    } else {
        number.to_owned()
    }
}

/// Pixel bounds of the plot area (inclusive).
#[derive(Debug, Clone, Copy)]
struct PlotArea {
    left: i32,
    right: i32,
    top: i32,
    bottom: i32,
}

impl PlotArea {
    fn map_x(&self, axis: &Axis, value: f64) -> i32 {
        let width = f64::from(self.right - self.left);
        self.left + round_to_pixel(axis.fraction(value) * width)
    }

    fn map_y(&self, axis: &Axis, value: f64) -> i32 {
        let height = f64::from(self.bottom - self.top);
        self.bottom - round_to_pixel(axis.fraction(value) * height)
    }
}

/// Rounds a pixel offset to an integer, clamped to a range every caller can handle.
// The value is clamped to +-MAX_PIXEL_COORDINATE (and NaN mapped to 0) first, so the
// float-to-int conversion can neither truncate nor saturate.
#[allow(clippy::cast_possible_truncation)]
fn round_to_pixel(value: f64) -> i32 {
    if value.is_nan() {
        return 0;
    }
    value
        .clamp(-MAX_PIXEL_COORDINATE, MAX_PIXEL_COORDINATE)
        .round() as i32
}

/// Light grid lines at the ticks, the frame, tick marks and tick labels.
fn draw_grid_and_axes(canvas: &mut Canvas, area: &PlotArea, x_axis: &Axis, y_axis: &Axis) {
    let x_positions: Vec<i32> = x_axis
        .ticks
        .iter()
        .map(|tick| area.map_x(x_axis, tick.value))
        .collect();
    let y_positions: Vec<i32> = y_axis
        .ticks
        .iter()
        .map(|tick| area.map_y(y_axis, tick.value))
        .collect();

    for &x in &x_positions {
        canvas.draw_vline(x, area.top, area.bottom, GRID);
    }
    for &y in &y_positions {
        canvas.draw_hline(area.left, area.right, y, GRID);
    }
    canvas.stroke_rect(
        area.left,
        area.top,
        area.right - area.left + 1,
        area.bottom - area.top + 1,
        FRAME,
    );

    // x ticks: every tick gets a mark; labels go on every `stride`-th tick, with the
    // stride as small as keeps the labels apart.
    let spans: Vec<(i32, i32)> = x_axis
        .ticks
        .iter()
        .zip(&x_positions)
        .map(|(tick, &x)| {
            let width = text_width(&tick.label);
            (x - width / 2, x - width / 2 + width)
        })
        .collect();
    let stride = label_stride(&spans, CHAR_ADVANCE);
    for (index, (tick, &x)) in x_axis.ticks.iter().zip(&x_positions).enumerate() {
        canvas.draw_vline(x, area.bottom, area.bottom + TICK_LENGTH, FRAME);
        if index % stride == 0 {
            let label_y = area.bottom + TICK_LENGTH + 5;
            draw_text(canvas, spans[index].0, label_y, &tick.label, TEXT);
        }
    }
    for (tick, &y) in y_axis.ticks.iter().zip(&y_positions) {
        canvas.draw_hline(area.left - TICK_LENGTH, area.left, y, FRAME);
        let label_left = area.left - TICK_LENGTH - 4 - text_width(&tick.label);
        draw_text(canvas, label_left, y - TEXT_HEIGHT / 2, &tick.label, TEXT);
    }
}

/// Smallest `stride` such that the label spans `(left, right)` at indices 0, stride,
/// 2 * stride, ... are at least `gap` pixels apart.
fn label_stride(spans: &[(i32, i32)], gap: i32) -> usize {
    (1..spans.len().max(1))
        .find(|&stride| {
            spans
                .iter()
                .step_by(stride)
                .zip(spans.iter().step_by(stride).skip(1))
                .all(|(left, right)| right.0 - left.1 >= gap)
        })
        .unwrap_or(spans.len().max(1))
}

/// A line of [`LINE_THICKNESS`] drawn in dashes of [`DASH_ON`] pixels, [`DASH_OFF`] apart.
fn draw_dashed_line(canvas: &mut Canvas, from: (i32, i32), to: (i32, i32), colour: Rgb) {
    let (dx, dy) = (f64::from(to.0 - from.0), f64::from(to.1 - from.1));
    let length = dx.hypot(dy);
    if !(length.is_finite() && length >= 1.0) {
        canvas.draw_line(from, to, LINE_THICKNESS, colour);
        return;
    }
    let at = |distance: f64| {
        let fraction = (distance / length).min(1.0);
        (
            from.0 + round_to_pixel(dx * fraction),
            from.1 + round_to_pixel(dy * fraction),
        )
    };
    let mut distance = 0.0;
    // Bounded: the canvas is small and the length is clamped to pixel coordinates.
    while distance < length {
        let end = (distance + f64::from(DASH_ON)).min(length);
        canvas.draw_line(at(distance), at(end), LINE_THICKNESS, colour);
        distance = end + f64::from(DASH_OFF);
    }
}

fn draw_marker(canvas: &mut Canvas, x: i32, y: i32, colour: Rgb) {
    let side = 2 * MARKER_HALF + 1;
    canvas.fill_rect(x - MARKER_HALF, y - MARKER_HALF, side, side, colour);
}

// ---------------------------------------------------------------------------------------
// Canvas.

/// An RGB raster; drawing outside it is silently clipped.
#[derive(Debug, Clone)]
struct Canvas {
    width: usize,
    height: usize,
    /// Row-major RGB triples.
    pixels: Vec<u8>,
}

impl Canvas {
    fn new(width: i32, height: i32) -> Self {
        let width = usize::try_from(width).unwrap_or(0);
        let height = usize::try_from(height).unwrap_or(0);
        let mut pixels = Vec::with_capacity(width * height * 3);
        for _ in 0..width * height {
            pixels.extend_from_slice(&BACKGROUND);
        }
        Self {
            width,
            height,
            pixels,
        }
    }

    fn offset(&self, x: i32, y: i32) -> Option<usize> {
        let x = usize::try_from(x).ok().filter(|&x| x < self.width)?;
        let y = usize::try_from(y).ok().filter(|&y| y < self.height)?;
        Some((y * self.width + x) * 3)
    }

    fn set(&mut self, x: i32, y: i32, colour: Rgb) {
        if let Some(offset) = self.offset(x, y) {
            self.pixels[offset..offset + 3].copy_from_slice(&colour);
        }
    }

    #[cfg(test)]
    fn get(&self, x: i32, y: i32) -> Option<Rgb> {
        let offset = self.offset(x, y)?;
        Some([
            self.pixels[offset],
            self.pixels[offset + 1],
            self.pixels[offset + 2],
        ])
    }

    /// Fills `width` x `height` pixels from `(x, y)`, clipped to the canvas.
    fn fill_rect(&mut self, x: i32, y: i32, width: i32, height: i32, colour: Rgb) {
        let canvas_width = i32::try_from(self.width).unwrap_or(i32::MAX);
        let canvas_height = i32::try_from(self.height).unwrap_or(i32::MAX);
        let (x_start, x_end) = (x.max(0), x.saturating_add(width).min(canvas_width));
        let (y_start, y_end) = (y.max(0), y.saturating_add(height).min(canvas_height));
        for row in y_start..y_end {
            for column in x_start..x_end {
                self.set(column, row, colour);
            }
        }
    }

    /// One-pixel outline of the `width` x `height` rectangle at `(x, y)`.
    fn stroke_rect(&mut self, x: i32, y: i32, width: i32, height: i32, colour: Rgb) {
        let (right, bottom) = (x + width - 1, y + height - 1);
        self.draw_hline(x, right, y, colour);
        self.draw_hline(x, right, bottom, colour);
        self.draw_vline(x, y, bottom, colour);
        self.draw_vline(right, y, bottom, colour);
    }

    /// Horizontal line from `x_start` to `x_end` inclusive.
    fn draw_hline(&mut self, x_start: i32, x_end: i32, y: i32, colour: Rgb) {
        self.fill_rect(x_start, y, x_end - x_start + 1, 1, colour);
    }

    /// Vertical line from `y_start` to `y_end` inclusive.
    fn draw_vline(&mut self, x: i32, y_start: i32, y_end: i32, colour: Rgb) {
        self.fill_rect(x, y_start, 1, y_end - y_start + 1, colour);
    }

    /// Bresenham line whose every step stamps a `thickness` x `thickness` square.
    fn draw_line(&mut self, from: (i32, i32), to: (i32, i32), thickness: i32, colour: Rgb) {
        let (mut x, mut y) = from;
        let dx = (to.0 - x).abs();
        let dy = -(to.1 - y).abs();
        let step_x = if x < to.0 { 1 } else { -1 };
        let step_y = if y < to.1 { 1 } else { -1 };
        let offset = thickness / 2;
        let mut error = dx + dy;
        loop {
            self.fill_rect(x - offset, y - offset, thickness, thickness, colour);
            if (x, y) == to {
                break;
            }
            let doubled = 2 * error;
            if doubled >= dy {
                error += dy;
                x += step_x;
            }
            if doubled <= dx {
                error += dx;
                y += step_y;
            }
        }
    }

    /// The PNG scanlines: each row prefixed with filter type 0 (None).
    fn scanlines(&self) -> Vec<u8> {
        let row_bytes = self.width * 3;
        let mut raw = Vec::with_capacity(self.height * (row_bytes + 1));
        for row in self.pixels.chunks(row_bytes.max(1)).take(self.height) {
            raw.push(0);
            raw.extend_from_slice(row);
        }
        raw
    }
}

// ---------------------------------------------------------------------------------------
// Text: an embedded 5x7 bitmap font, with an extra descender row, drawn at 2x.

/// Each glyph pixel becomes a `FONT_SCALE` x `FONT_SCALE` square.
const FONT_SCALE: i32 = 2;
const GLYPH_WIDTH: i32 = 5;
/// Glyph rows above the baseline; text is laid out and centred on these.
const GLYPH_HEIGHT: i32 = 7;
/// Horizontal distance between consecutive characters (glyph plus one column of space).
const CHAR_ADVANCE: i32 = (GLYPH_WIDTH + 1) * FONT_SCALE;
/// Height of a line of text in pixels, not counting descenders (g, j, p, q, y, comma).
const TEXT_HEIGHT: i32 = GLYPH_HEIGHT * FONT_SCALE;

/// Rows top first: seven above the baseline, then the descender row; bit 4 is the
/// leftmost column.
type Glyph = [u8; 8];

/// Drawn for characters the font lacks.
const UNKNOWN_GLYPH: Glyph = [0x1F, 0x11, 0x11, 0x11, 0x11, 0x11, 0x1F, 0x00];

fn glyph(ch: char) -> Glyph {
    known_glyph(ch).unwrap_or(UNKNOWN_GLYPH)
}

/// The font: every printable ASCII character.
fn known_glyph(ch: char) -> Option<Glyph> {
    let rows = match ch {
        ' ' => [0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00],
        '0' => [0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E, 0x00],
        '1' => [0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E, 0x00],
        '2' => [0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F, 0x00],
        '3' => [0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E, 0x00],
        '4' => [0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02, 0x00],
        '5' => [0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E, 0x00],
        '6' => [0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E, 0x00],
        '7' => [0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08, 0x00],
        '8' => [0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E, 0x00],
        '9' => [0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C, 0x00],
        'A' => [0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11, 0x00],
        'B' => [0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E, 0x00],
        'C' => [0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E, 0x00],
        'D' => [0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C, 0x00],
        'E' => [0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F, 0x00],
        'F' => [0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10, 0x00],
        'G' => [0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F, 0x00],
        'H' => [0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11, 0x00],
        'I' => [0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E, 0x00],
        'J' => [0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C, 0x00],
        'K' => [0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11, 0x00],
        'L' => [0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F, 0x00],
        'M' => [0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11, 0x00],
        'N' => [0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11, 0x00],
        'O' => [0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E, 0x00],
        'P' => [0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10, 0x00],
        'Q' => [0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D, 0x00],
        'R' => [0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11, 0x00],
        'S' => [0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E, 0x00],
        'T' => [0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x00],
        'U' => [0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E, 0x00],
        'V' => [0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04, 0x00],
        'W' => [0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A, 0x00],
        'X' => [0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11, 0x00],
        'Y' => [0x11, 0x11, 0x11, 0x0A, 0x04, 0x04, 0x04, 0x00],
        'Z' => [0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F, 0x00],
        'a' => [0x00, 0x00, 0x0E, 0x01, 0x0F, 0x11, 0x0F, 0x00],
        'b' => [0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x1E, 0x00],
        'c' => [0x00, 0x00, 0x0E, 0x10, 0x10, 0x11, 0x0E, 0x00],
        'd' => [0x01, 0x01, 0x0D, 0x13, 0x11, 0x11, 0x0F, 0x00],
        'e' => [0x00, 0x00, 0x0E, 0x11, 0x1F, 0x10, 0x0E, 0x00],
        'f' => [0x06, 0x09, 0x08, 0x1C, 0x08, 0x08, 0x08, 0x00],
        'g' => [0x00, 0x00, 0x0F, 0x11, 0x11, 0x0F, 0x01, 0x0E],
        'h' => [0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x11, 0x00],
        'i' => [0x04, 0x00, 0x0C, 0x04, 0x04, 0x04, 0x0E, 0x00],
        'j' => [0x02, 0x00, 0x06, 0x02, 0x02, 0x02, 0x12, 0x0C],
        'k' => [0x10, 0x10, 0x12, 0x14, 0x18, 0x14, 0x12, 0x00],
        'l' => [0x0C, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E, 0x00],
        'm' => [0x00, 0x00, 0x1A, 0x15, 0x15, 0x11, 0x11, 0x00],
        'n' => [0x00, 0x00, 0x16, 0x19, 0x11, 0x11, 0x11, 0x00],
        'o' => [0x00, 0x00, 0x0E, 0x11, 0x11, 0x11, 0x0E, 0x00],
        'p' => [0x00, 0x00, 0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10],
        'q' => [0x00, 0x00, 0x0F, 0x11, 0x11, 0x0F, 0x01, 0x01],
        'r' => [0x00, 0x00, 0x16, 0x19, 0x10, 0x10, 0x10, 0x00],
        's' => [0x00, 0x00, 0x0E, 0x10, 0x0E, 0x01, 0x1E, 0x00],
        't' => [0x08, 0x08, 0x1C, 0x08, 0x08, 0x09, 0x06, 0x00],
        'u' => [0x00, 0x00, 0x11, 0x11, 0x11, 0x13, 0x0D, 0x00],
        'v' => [0x00, 0x00, 0x11, 0x11, 0x11, 0x0A, 0x04, 0x00],
        'w' => [0x00, 0x00, 0x11, 0x11, 0x15, 0x15, 0x0A, 0x00],
        'x' => [0x00, 0x00, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x00],
        'y' => [0x00, 0x00, 0x11, 0x11, 0x11, 0x0F, 0x01, 0x0E],
        'z' => [0x00, 0x00, 0x1F, 0x02, 0x04, 0x08, 0x1F, 0x00],
        '.' => [0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C, 0x00],
        ',' => [0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x04, 0x08],
        '-' => [0x00, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x00, 0x00],
        '_' => [0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1F, 0x00],
        '/' => [0x00, 0x01, 0x02, 0x04, 0x08, 0x10, 0x00, 0x00],
        '(' => [0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02, 0x00],
        ')' => [0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08, 0x00],
        '=' => [0x00, 0x00, 0x1F, 0x00, 0x1F, 0x00, 0x00, 0x00],
        ':' => [0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x00, 0x00],
        '%' => [0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03, 0x00],
        '+' => [0x00, 0x04, 0x04, 0x1F, 0x04, 0x04, 0x00, 0x00],
        '!' => [0x04, 0x04, 0x04, 0x04, 0x04, 0x00, 0x04, 0x00],
        '?' => [0x0E, 0x11, 0x01, 0x02, 0x04, 0x00, 0x04, 0x00],
        '\'' => [0x0C, 0x04, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00],
        '*' => [0x00, 0x04, 0x15, 0x0E, 0x15, 0x04, 0x00, 0x00],
        '[' => [0x0E, 0x08, 0x08, 0x08, 0x08, 0x08, 0x0E, 0x00],
        ']' => [0x0E, 0x02, 0x02, 0x02, 0x02, 0x02, 0x0E, 0x00],
        '<' => [0x02, 0x04, 0x08, 0x10, 0x08, 0x04, 0x02, 0x00],
        '>' => [0x08, 0x04, 0x02, 0x01, 0x02, 0x04, 0x08, 0x00],
        '#' => [0x0A, 0x0A, 0x1F, 0x0A, 0x1F, 0x0A, 0x0A, 0x00],
        ';' => [0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x04, 0x08, 0x00],
        '"' => [0x0A, 0x0A, 0x0A, 0x00, 0x00, 0x00, 0x00, 0x00],
        '$' => [0x04, 0x0F, 0x14, 0x0E, 0x05, 0x1E, 0x04, 0x00],
        '&' => [0x0C, 0x12, 0x14, 0x08, 0x15, 0x12, 0x0D, 0x00],
        '@' => [0x0E, 0x11, 0x01, 0x0D, 0x15, 0x15, 0x0E, 0x00],
        '\\' => [0x00, 0x10, 0x08, 0x04, 0x02, 0x01, 0x00, 0x00],
        '^' => [0x04, 0x0A, 0x11, 0x00, 0x00, 0x00, 0x00, 0x00],
        '`' => [0x08, 0x04, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00],
        '{' => [0x02, 0x04, 0x04, 0x08, 0x04, 0x04, 0x02, 0x00],
        '|' => [0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x00],
        '}' => [0x08, 0x04, 0x04, 0x02, 0x04, 0x04, 0x08, 0x00],
        '~' => [0x00, 0x00, 0x08, 0x15, 0x02, 0x00, 0x00, 0x00],
        _ => return None,
    };
    Some(rows)
}

/// Width in pixels of `text` drawn with [`draw_text`].
fn text_width(text: &str) -> i32 {
    match i32::try_from(text.chars().count()) {
        Ok(0) => 0,
        Ok(count) => count.saturating_mul(CHAR_ADVANCE) - FONT_SCALE,
        Err(_) => i32::MAX,
    }
}

/// Draws `text` left to right with its top-left corner at `(x, y)`.
fn draw_text(canvas: &mut Canvas, x: i32, y: i32, text: &str, colour: Rgb) {
    let canvas_width = i32::try_from(canvas.width).unwrap_or(i32::MAX);
    let mut pen_x = x;
    for ch in text.chars() {
        if pen_x >= canvas_width {
            break;
        }
        for (row, bits) in (0..).zip(glyph(ch)) {
            for column in lit_columns(bits) {
                canvas.fill_rect(
                    pen_x + column * FONT_SCALE,
                    y + row * FONT_SCALE,
                    FONT_SCALE,
                    FONT_SCALE,
                    colour,
                );
            }
        }
        pen_x = pen_x.saturating_add(CHAR_ADVANCE);
    }
}

/// Draws `text` rotated a quarter turn anticlockwise (reading bottom to top), starting
/// at `bottom` and with the glyphs' tops facing `x`.
fn draw_text_upwards(canvas: &mut Canvas, x: i32, bottom: i32, text: &str, colour: Rgb) {
    let mut pen_y = bottom;
    for ch in text.chars() {
        if pen_y < 0 {
            break;
        }
        for (row, bits) in (0..).zip(glyph(ch)) {
            for column in lit_columns(bits) {
                let pixel_x = x + row * FONT_SCALE;
                let pixel_y = pen_y - (column + 1) * FONT_SCALE + 1;
                canvas.fill_rect(pixel_x, pixel_y, FONT_SCALE, FONT_SCALE, colour);
            }
        }
        pen_y = pen_y.saturating_sub(CHAR_ADVANCE);
    }
}

/// Columns (0 = leftmost) set in one glyph row.
fn lit_columns(bits: u8) -> impl Iterator<Item = i32> {
    (0..GLYPH_WIDTH).filter(move |column| bits & (1 << (GLYPH_WIDTH - 1 - column)) != 0)
}

// ---------------------------------------------------------------------------------------
// PNG encoding: stored deflate blocks inside a zlib stream, Adler-32 and CRC-32.

const PNG_SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1A, b'\n'];
/// IDAT data is split into chunks of at most this many bytes.
const IDAT_CHUNK_SIZE: usize = 1 << 20;
/// zlib header: deflate, 32 KiB window, no preset dictionary, fastest level (check
/// bits make 0x7801 a multiple of 31).
const ZLIB_HEADER: [u8; 2] = [0x78, 0x01];

fn encode_png(canvas: &Canvas) -> Vec<u8> {
    let raw = canvas.scanlines();
    let zlib = zlib_stored(&raw);
    let mut png = Vec::with_capacity(zlib.len() + 128);
    png.extend_from_slice(&PNG_SIGNATURE);

    let mut header = Vec::with_capacity(13);
    header.extend_from_slice(&u32::try_from(canvas.width).unwrap_or(0).to_be_bytes());
    header.extend_from_slice(&u32::try_from(canvas.height).unwrap_or(0).to_be_bytes());
    // Bit depth 8, colour type 2 (RGB), deflate, adaptive filtering, no interlace.
    header.extend_from_slice(&[8, 2, 0, 0, 0]);
    write_chunk(&mut png, *b"IHDR", &header);
    for part in zlib.chunks(IDAT_CHUNK_SIZE) {
        write_chunk(&mut png, *b"IDAT", part);
    }
    write_chunk(&mut png, *b"IEND", &[]);
    png
}

/// Appends one chunk: length, type, data, CRC-32 of type and data.
fn write_chunk(png: &mut Vec<u8>, kind: [u8; 4], data: &[u8]) {
    let length = u32::try_from(data.len()).expect("callers keep PNG chunks far below 4 GiB");
    png.extend_from_slice(&length.to_be_bytes());
    png.extend_from_slice(&kind);
    png.extend_from_slice(data);
    let crc = crc32_update(crc32_update(CRC32_INITIAL, &kind), data) ^ CRC32_INITIAL;
    png.extend_from_slice(&crc.to_be_bytes());
}

/// A zlib stream holding `data` in stored (uncompressed) deflate blocks.
fn zlib_stored(data: &[u8]) -> Vec<u8> {
    let block_size = usize::from(u16::MAX);
    let block_count = data.len().div_ceil(block_size);
    let mut out = Vec::with_capacity(data.len() + 5 * block_count.max(1) + 6);
    out.extend_from_slice(&ZLIB_HEADER);
    if data.is_empty() {
        // A single final, empty stored block.
        out.extend_from_slice(&[1, 0x00, 0x00, 0xFF, 0xFF]);
    }
    for (index, block) in data.chunks(block_size).enumerate() {
        let is_final = index + 1 == block_count;
        // Block header bits: BFINAL, then BTYPE = 00 (stored); the rest pads to a byte.
        out.push(u8::from(is_final));
        let length = u16::try_from(block.len()).expect("blocks are at most u16::MAX bytes");
        out.extend_from_slice(&length.to_le_bytes());
        out.extend_from_slice(&(!length).to_le_bytes());
        out.extend_from_slice(block);
    }
    out.extend_from_slice(&adler32(data).to_be_bytes());
    out
}

/// Adler-32 checksum (RFC 1950) of `data`.
fn adler32(data: &[u8]) -> u32 {
    const MODULUS: u32 = 65_521;
    // Largest run of bytes whose sums cannot overflow a u32 before reduction.
    const MAX_RUN: usize = 5_552;
    let (mut a, mut b) = (1_u32, 0_u32);
    for run in data.chunks(MAX_RUN) {
        for &byte in run {
            a += u32::from(byte);
            b += a;
        }
        a %= MODULUS;
        b %= MODULUS;
    }
    (b << 16) | a
}

const CRC32_INITIAL: u32 = 0xFFFF_FFFF;
const CRC32_TABLE: [u32; 256] = crc32_table();

/// Lookup table for the reflected CRC-32 polynomial 0xEDB88320 used by PNG.
const fn crc32_table() -> [u32; 256] {
    let mut table = [0_u32; 256];
    let mut index: u32 = 0;
    while index < 256 {
        let mut crc = index;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                0xEDB8_8320 ^ (crc >> 1)
            } else {
                crc >> 1
            };
            bit += 1;
        }
        // `usize::from` is not usable in a const fn; index < 256, so the cast is exact.
        table[index as usize] = crc;
        index += 1;
    }
    table
}

/// Feeds `data` into a running (pre-inverted) CRC-32.
fn crc32_update(mut crc: u32, data: &[u8]) -> u32 {
    for &byte in data {
        let index = usize::from(crc.to_le_bytes()[0] ^ byte);
        crc = CRC32_TABLE[index] ^ (crc >> 8);
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bit-by-bit CRC-32, independent of the table the encoder uses.
    fn reference_crc32(data: &[u8]) -> u32 {
        let mut crc = 0xFFFF_FFFF_u32;
        for &byte in data {
            crc ^= u32::from(byte);
            for _ in 0..8 {
                let mask = (crc & 1).wrapping_neg();
                crc = (crc >> 1) ^ (0xEDB8_8320 & mask);
            }
        }
        !crc
    }

    /// Adler-32 straight from its definition, reducing after every byte.
    fn reference_adler32(data: &[u8]) -> u32 {
        let (mut a, mut b) = (1_u32, 0_u32);
        for &byte in data {
            a = (a + u32::from(byte)) % 65_521;
            b = (b + a) % 65_521;
        }
        (b << 16) | a
    }

    /// Splits a PNG into `(type, data)` chunks, asserting the signature and every CRC.
    fn parse_chunks(png: &[u8]) -> Vec<([u8; 4], Vec<u8>)> {
        assert_eq!(&png[..8], &PNG_SIGNATURE, "PNG signature");
        let mut chunks = Vec::new();
        let mut position = 8;
        while position < png.len() {
            let length = u32::from_be_bytes(png[position..position + 4].try_into().unwrap());
            let length = usize::try_from(length).unwrap();
            let kind: [u8; 4] = png[position + 4..position + 8].try_into().unwrap();
            let data = &png[position + 8..position + 8 + length];
            let stored_crc = u32::from_be_bytes(
                png[position + 8 + length..position + 12 + length]
                    .try_into()
                    .unwrap(),
            );
            assert_eq!(
                stored_crc,
                reference_crc32(&png[position + 4..position + 8 + length]),
                "CRC of {kind:?}"
            );
            chunks.push((kind, data.to_vec()));
            position += 12 + length;
        }
        assert_eq!(position, png.len(), "no trailing bytes");
        chunks
    }

    /// Inflates a zlib stream made only of stored blocks; returns the data and the
    /// Adler-32 from the stream's trailer.
    fn inflate_stored(zlib: &[u8]) -> (Vec<u8>, u32) {
        let header = u16::from_be_bytes([zlib[0], zlib[1]]);
        assert_eq!(zlib[0] & 0x0F, 8, "compression method deflate");
        assert_eq!(header % 31, 0, "zlib header check bits");
        assert_eq!(zlib[1] & 0x20, 0, "no preset dictionary");
        let mut data = Vec::new();
        let mut position = 2;
        loop {
            let block_header = zlib[position];
            assert_eq!((block_header >> 1) & 0b11, 0, "stored block");
            let length = u16::from_le_bytes([zlib[position + 1], zlib[position + 2]]);
            let complement = u16::from_le_bytes([zlib[position + 3], zlib[position + 4]]);
            assert_eq!(length, !complement, "LEN and NLEN agree");
            let start = position + 5;
            let end = start + usize::from(length);
            data.extend_from_slice(&zlib[start..end]);
            position = end;
            if block_header & 1 == 1 {
                break;
            }
        }
        let trailer = u32::from_be_bytes(zlib[position..position + 4].try_into().unwrap());
        assert_eq!(position + 4, zlib.len(), "nothing after the Adler-32");
        (data, trailer)
    }

    /// Decodes a PNG written by this module into `(width, height, rgb pixels)`.
    fn decode(png: &[u8]) -> (usize, usize, Vec<u8>) {
        let chunks = parse_chunks(png);
        let (kind, header) = &chunks[0];
        assert_eq!(kind, b"IHDR");
        assert_eq!(header.len(), 13);
        let width = usize::try_from(u32::from_be_bytes(header[0..4].try_into().unwrap())).unwrap();
        let height = usize::try_from(u32::from_be_bytes(header[4..8].try_into().unwrap())).unwrap();
        assert_eq!(&header[8..], &[8, 2, 0, 0, 0], "8-bit RGB, no interlace");
        assert_eq!(
            chunks.last().map(|(kind, data)| (kind, data.len())),
            Some((b"IEND", 0))
        );
        let zlib: Vec<u8> = chunks
            .iter()
            .filter(|(kind, _)| kind == b"IDAT")
            .flat_map(|(_, data)| data.clone())
            .collect();
        let (raw, _) = inflate_stored(&zlib);
        assert_eq!(raw.len(), height * (1 + 3 * width));
        let mut pixels = Vec::with_capacity(width * height * 3);
        for row in raw.chunks(1 + 3 * width) {
            assert_eq!(row[0], 0, "filter type None");
            pixels.extend_from_slice(&row[1..]);
        }
        (width, height, pixels)
    }

    fn bandwidth_plot() -> Plot {
        let sizes = [128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0];
        let series = |name: &str, scale: f64| Series {
            name: name.to_owned(),
            points: sizes
                .iter()
                .map(|&size| (size, scale * f64::sqrt(size)))
                .collect(),
        };
        Plot {
            title: "Noncontiguous write bandwidth".to_owned(),
            x_label: "piece size (bytes)".to_owned(),
            y_label: "bandwidth (MiB/s)".to_owned(),
            log2_x: true,
            series: vec![
                series("multiple", 2.0),
                series("pack", 6.0),
                series("gather", 9.0),
            ],
        }
    }

    fn count_colour_in(canvas_pixels: &[u8], width: usize, area: PlotArea, colour: Rgb) -> usize {
        let mut count = 0;
        for (index, pixel) in canvas_pixels.chunks(3).enumerate() {
            let (x, y) = (index % width, index / width);
            let inside = i32::try_from(x).is_ok_and(|x| x > area.left && x < area.right)
                && i32::try_from(y).is_ok_and(|y| y > area.top && y < area.bottom);
            if inside && pixel == colour {
                count += 1;
            }
        }
        count
    }

    #[test]
    fn checksums_match_known_values() {
        assert_eq!(
            crc32_update(CRC32_INITIAL, b"123456789") ^ CRC32_INITIAL,
            0xCBF4_3926
        );
        assert_eq!(reference_crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(adler32(b"Wikipedia"), 0x11E6_0398);
        let long: Vec<u8> = (0..100_000_u32)
            .map(|i| i.to_le_bytes()[0] ^ 0xA5)
            .collect();
        assert_eq!(adler32(&long), reference_adler32(&long));
        assert_eq!(adler32(&[]), 1);
    }

    #[test]
    fn png_structure_is_valid() {
        let png = bandwidth_plot().render_png();
        let chunks = parse_chunks(&png);
        let kinds: Vec<&[u8; 4]> = chunks.iter().map(|(kind, _)| kind).collect();
        assert_eq!(kinds.first(), Some(&b"IHDR"));
        assert_eq!(kinds.last(), Some(&b"IEND"));
        assert!(kinds.contains(&b"IDAT"));
        let header = &chunks[0].1;
        assert_eq!(u32::from_be_bytes(header[0..4].try_into().unwrap()), 800);
        assert_eq!(u32::from_be_bytes(header[4..8].try_into().unwrap()), 500);
        assert_eq!(header[8], 8, "bit depth");
        assert_eq!(header[9], 2, "colour type RGB");
    }

    #[test]
    fn zlib_stream_holds_the_scanlines_and_their_adler32() {
        let plot = bandwidth_plot();
        let (canvas, _) = plot.render_canvas(&Decorations::default());
        let scanlines = canvas.scanlines();
        let png = encode_png(&canvas);
        let zlib: Vec<u8> = parse_chunks(&png)
            .into_iter()
            .filter(|(kind, _)| kind == b"IDAT")
            .flat_map(|(_, data)| data)
            .collect();
        let (inflated, trailer) = inflate_stored(&zlib);
        assert_eq!(inflated, scanlines);
        assert_eq!(trailer, reference_adler32(&scanlines));
        assert_eq!(scanlines.len(), 500 * (1 + 800 * 3));
    }

    #[test]
    fn zlib_stored_handles_block_boundaries() {
        for length in [0, 1, 65_534, 65_535, 65_536, 2 * 65_535, 200_000] {
            let data: Vec<u8> = (0..length).map(|i: usize| i.to_le_bytes()[0]).collect();
            let (inflated, trailer) = inflate_stored(&zlib_stored(&data));
            assert_eq!(inflated, data, "length {length}");
            assert_eq!(trailer, reference_adler32(&data));
        }
    }

    #[test]
    fn series_colours_appear_in_the_plot_area() {
        let plot = bandwidth_plot();
        let (_, area) = plot.render_canvas(&Decorations::default());
        let (width, height, pixels) = decode(&plot.render_png());
        assert_eq!((width, height), (800, 500));
        for index in 0..plot.series.len() {
            let count = count_colour_in(&pixels, width, area, series_colour(index));
            assert!(count > 100, "series {index} drew only {count} pixels");
        }

        // The same series without points leaves the plot area free of its colour.
        let mut empty = plot.clone();
        for series in &mut empty.series {
            series.points.clear();
        }
        let (_, empty_area) = empty.render_canvas(&Decorations::default());
        let (_, _, empty_pixels) = decode(&empty.render_png());
        assert_eq!(
            count_colour_in(&empty_pixels, width, empty_area, series_colour(0)),
            0
        );
    }

    #[test]
    fn marker_is_drawn_at_the_data_point() {
        let plot = Plot {
            series: vec![Series {
                name: "one".to_owned(),
                points: vec![(1.0, 1.0), (2.0, 3.0)],
            }],
            ..Plot::default()
        };
        let (canvas, area) = plot.render_canvas(&Decorations::default());
        let x_axis = nice_axis(1.0, 2.0, false);
        let y_axis = nice_axis(1.0, 3.0, true);
        let (x, y) = (area.map_x(&x_axis, 2.0), area.map_y(&y_axis, 3.0));
        assert_eq!(canvas.get(x, y), Some(series_colour(0)));
        assert_eq!(
            canvas.get(x + MARKER_HALF, y - MARKER_HALF),
            Some(series_colour(0))
        );
    }

    #[test]
    fn spread_bars_are_drawn_on_a_log10_axis() {
        let plot = Plot {
            series: vec![Series {
                name: "one".to_owned(),
                points: vec![(1.0, 10.0), (4.0, 1000.0)],
            }],
            log2_x: true,
            ..Plot::default()
        };
        let decorations = Decorations {
            log10_y: true,
            spread: vec![vec![(4.0, 300.0, 3000.0), (1.0, -1.0, 20.0)]],
            dashed: vec![true],
        };
        let (canvas, area) = plot.render_canvas(&decorations);
        let x_axis = log2_axis([1.0, 4.0].into_iter());
        // 10 .. 3000: the axis runs over whole decades, 10 to 10 000.
        let y_axis = log10_axis(1.0, 3000f64.log10());
        assert_eq!(
            y_axis
                .ticks
                .iter()
                .map(|t| t.label.as_str())
                .collect::<Vec<_>>(),
            ["10", "100", "1000", "10000"]
        );
        let x = area.map_x(&x_axis, 2.0);
        // The bar at x = 4 reaches from 300 to 3000, well away from the marker at 1000.
        let top = area.map_y(&y_axis, 3000f64.log10());
        let low = area.map_y(&y_axis, 300f64.log10());
        assert_eq!(canvas.get(x, top), Some(series_colour(0)));
        assert_eq!(canvas.get(x, low), Some(series_colour(0)));
        assert_eq!(canvas.get(x + BAR_CAP_HALF, top), Some(series_colour(0)));
        // A bar whose low end is not positive cannot be placed on a log axis: skipped.
        let x1 = area.map_x(&x_axis, 0.0);
        assert_ne!(
            canvas.get(x1, area.map_y(&y_axis, 20f64.log10())),
            Some(series_colour(0))
        );
        // Without decorations, the same plot renders as before.
        assert_eq!(
            plot.render_png(),
            plot.render_png_decorated(&Decorations::default())
        );
    }

    #[test]
    fn edge_cases_render_valid_pngs() {
        let one = |points: Vec<(f64, f64)>| Series {
            name: "s".to_owned(),
            points,
        };
        let cases = [
            Plot::default(),
            Plot {
                series: vec![one(vec![])],
                ..Plot::default()
            },
            Plot {
                series: vec![one(vec![(3.0, 4.0)])],
                ..Plot::default()
            },
            Plot {
                series: vec![one(vec![(3.0, 4.0)])],
                log2_x: true,
                ..Plot::default()
            },
            Plot {
                series: vec![one(vec![(1.0, 0.0), (2.0, 0.0), (4.0, 0.0)])],
                log2_x: true,
                ..Plot::default()
            },
            Plot {
                series: vec![one(vec![(-1.0, -5.0), (0.0, -2.0)])],
                ..Plot::default()
            },
            Plot {
                series: vec![one(vec![
                    (f64::NAN, 1.0),
                    (1.0, f64::INFINITY),
                    (f64::NEG_INFINITY, 2.0),
                    (0.0, 1.0),
                    (-4.0, 1.0),
                    (2.0, f64::NAN),
                ])],
                log2_x: true,
                ..Plot::default()
            },
            Plot {
                series: vec![one(vec![(-f64::MAX, f64::MAX), (f64::MAX, -f64::MAX)])],
                ..Plot::default()
            },
            Plot {
                series: vec![one(vec![(1e-300, 1e-300), (2e-300, 3e-300)])],
                log2_x: true,
                ..Plot::default()
            },
            Plot {
                series: vec![one(vec![(1e20, 1e20), (1e20 + 1e5, 1e20)])],
                ..Plot::default()
            },
            Plot {
                title: "\u{1F600} unknown \t glyphs ~ ".repeat(10),
                x_label: "x".repeat(200),
                y_label: "y".repeat(200),
                series: (0..30)
                    .map(|i| Series {
                        name: format!("series number {i} with a long name"),
                        points: vec![(f64::from(i), 1.0)],
                    })
                    .collect(),
                ..Plot::default()
            },
        ];
        for plot in &cases {
            let (width, height, _) = decode(&plot.render_png());
            assert_eq!((width, height), (800, 500));
        }
    }

    #[test]
    fn log2_axis_ticks_at_data_values() {
        let axis = log2_axis([8192.0, 128.0, 256.0, 128.0, 1024.0].into_iter());
        let labels: Vec<&str> = axis.ticks.iter().map(|tick| tick.label.as_str()).collect();
        assert_eq!(labels, ["128", "256", "1024", "8192"]);
        assert!(axis.min < 7.0 && axis.max > 13.0);
    }

    #[test]
    fn nice_axis_picks_round_ticks_from_zero() {
        let labels = |axis: Axis| {
            axis.ticks
                .into_iter()
                .map(|tick| tick.label)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            labels(nice_axis(120.0, 7_500.0, true)),
            ["0", "2000", "4000", "6000", "8000"]
        );
        assert_eq!(
            labels(nice_axis(0.0, 1.0, true)),
            ["0.0", "0.2", "0.4", "0.6", "0.8", "1.0"]
        );
        assert_eq!(
            labels(nice_axis(0.0, 0.0, true)),
            ["0.0", "0.2", "0.4", "0.6", "0.8", "1.0"]
        );
        assert_eq!(
            labels(nice_axis(0.0, 0.05, true)),
            ["0.00", "0.01", "0.02", "0.03", "0.04", "0.05"]
        );
        assert_eq!(labels(nice_axis(0.0, 3e9, true))[1], "1e9");
        let negative = nice_axis(-5.0, -2.0, true);
        assert!(negative.min <= -5.0 && negative.max >= 0.0);
    }

    #[test]
    fn label_stride_keeps_labels_apart() {
        assert_eq!(label_stride(&[], 12), 1);
        assert_eq!(label_stride(&[(0, 30)], 12), 1);
        assert_eq!(label_stride(&[(0, 30), (50, 80), (100, 130)], 12), 1);
        assert_eq!(
            label_stride(&[(0, 30), (35, 65), (70, 100), (105, 135)], 12),
            2
        );
        assert_eq!(label_stride(&[(0, 100), (10, 110)], 12), 2);
    }

    #[test]
    fn font_covers_required_characters() {
        let required = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz .,-_/()=:%+";
        for ch in (' '..='~').chain(required.chars()) {
            assert!(known_glyph(ch).is_some(), "missing glyph for {ch:?}");
        }
        assert_eq!(glyph('\t'), UNKNOWN_GLYPH);
        assert_eq!(glyph('\u{e9}'), UNKNOWN_GLYPH);
        assert!(glyph('A').iter().all(|&row| row < 1 << GLYPH_WIDTH));
    }

    #[test]
    fn text_is_drawn_and_clipped() {
        let mut canvas = Canvas::new(40, 20);
        draw_text(&mut canvas, 0, 0, "1", TEXT);
        // '1' has its top pixel in the middle column (column 2).
        assert_eq!(canvas.get(2 * FONT_SCALE, 0), Some(TEXT));
        assert_eq!(canvas.get(0, 0), Some(BACKGROUND));
        draw_text(&mut canvas, -100, -100, "clipped away entirely", TEXT);
        draw_text_upwards(&mut canvas, 30, 1000, "also clipped", TEXT);
        assert_eq!(text_width(""), 0);
        assert_eq!(text_width("ab"), 2 * CHAR_ADVANCE - FONT_SCALE);
    }

    #[test]
    fn write_png_writes_the_rendered_bytes() {
        let path =
            std::env::temp_dir().join(format!("tessera-plot-test-{}.png", std::process::id()));
        let plot = bandwidth_plot();
        plot.write_png(&path).unwrap();
        let written = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(written, plot.render_png());
    }
}
