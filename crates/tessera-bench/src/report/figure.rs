//! The figures of the papers, drawn with `plotters` as SVG and PNG.
//!
//! A [`Figure`] is one image of side-by-side [`Panel`]s (e.g. writes and reads) and one
//! legend to their right. A panel holds [`Line`]s, one per method, of [`Point`]s whose
//! height is the median over the repetitions and whose error bar spans their minimum and
//! maximum ([`Spread`]). Each line name gets its own style, the same in every panel: a
//! colour from a 12-colour palette and a dash pattern from 5, assigned so that no two names of
//! a figure (up to 60) look alike. Axes may be logarithmic ([`Scale`]) where the paper's were;
//! the points are drawn in the scale's space (log2 or log10 of the value) and the tick labels
//! give the values back. The legend's width comes from its longest name, so no name is cut.
//!
//! Text needs a font: DejaVu Sans (Debian's `fonts-dejavu-core`) is loaded at run time and
//! registered with plotters' `ab_glyph` renderer for both backends.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;

use super::Spread;

/// The font files tried, in order (Debian's `fonts-dejavu-core`).
const FONT_PATHS: [&str; 2] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
];

/// Width and height of one panel, in pixels.
const PANEL_SIZE: (u32, u32) = (600, 460);
/// Height of the figure's title band.
const TITLE_HEIGHT: u32 = 40;
/// Height of one legend entry.
const LEGEND_ROW: i32 = 22;
/// Width of the line sample in front of a legend name.
const LEGEND_SAMPLE: i32 = 44;
/// Lines a figure can tell apart (colours x dash patterns).
pub const LINES_MAX: usize = PALETTE.len() * DASHES.len();

/// Tableau's ten colours and two darker ones.
const PALETTE: [(u8, u8, u8); 12] = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
    (0, 0, 128),
    (128, 0, 0),
];

/// Dash patterns (dash, gap) in pixels; `None` is a solid line.
const DASHES: [Option<(u32, u32)>; 5] = [
    None,
    Some((10, 5)),
    Some((3, 4)),
    Some((18, 6)),
    Some((6, 10)),
];

// 12 and 5 are coprime, so name i's (i % 12, i % 5) differs for every i below 60.
const _: () = assert!(LINES_MAX == 60);

/// How an axis maps its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// Evenly spaced values.
    Linear,
    /// Powers of two evenly spaced (sizes 128 B .. 8 KiB); values must be positive.
    Log2,
    /// Powers of ten evenly spaced; values must be positive.
    Log10,
}

impl Scale {
    /// Where `value` lies on this axis, `None` when a log axis cannot show it.
    fn place(self, value: f64) -> Option<f64> {
        let placed = match self {
            Self::Linear => value,
            Self::Log2 if value > 0.0 => value.log2(),
            Self::Log10 if value > 0.0 => value.log10(),
            Self::Log2 | Self::Log10 => return None,
        };
        placed.is_finite().then_some(placed)
    }

    /// The value at axis position `placed`.
    fn value(self, placed: f64) -> f64 {
        match self {
            Self::Linear => placed,
            Self::Log2 => placed.exp2(),
            Self::Log10 => 10f64.powf(placed),
        }
    }

    /// A tick label for axis position `placed`: a log2 axis labels whole powers only (sizes),
    /// a log10 axis every tick, to two significant digits.
    fn label(self, placed: f64) -> String {
        match self {
            Self::Log2 if (placed - placed.round()).abs() > 1e-6 => String::new(),
            Self::Log10 => significant(self.value(placed)),
            Self::Linear | Self::Log2 => compact(self.value(placed)),
        }
    }
}

/// A number short enough for a tick: 1.5, 128, 64k, 2M.
fn compact(value: f64) -> String {
    let magnitude = value.abs();
    if magnitude >= 1e6 && (value / f64::from(1u32 << 20)).fract() == 0.0 {
        format!("{}M", value / f64::from(1u32 << 20))
    } else if magnitude >= 1e4 && (value / 1024.0).fract() == 0.0 {
        format!("{}k", value / 1024.0)
    } else if magnitude >= 100.0 || (value - value.round()).abs() < 1e-9 {
        format!("{value:.0}")
    } else if magnitude >= 1.0 {
        format!("{value:.1}")
    } else {
        let text = format!("{value:.3}");
        text.trim_end_matches('0').to_owned()
    }
}

/// `value` to two significant digits: 0.025, 3.2, 41, 1200.
fn significant(value: f64) -> String {
    if value.abs() >= 10.0 || value == 0.0 || !value.is_finite() {
        return format!("{value:.0}");
    }
    // Decimals that leave two significant digits: 1 for [1, 10), 2 for [0.1, 1), ...
    let decimals = whole(1.0 - value.abs().log10().floor()).unwrap_or(0);
    format!("{value:.decimals$}")
}

/// One measured point: its x and the spread of its y over the repetitions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// Where on the x axis (a category's index on a category axis).
    pub x: f64,
    /// The median (drawn) and the minimum and maximum (the error bar).
    pub y: Spread,
}

/// The points of one method.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    /// The legend name, which also picks the style.
    pub name: String,
    /// The points, drawn joined in increasing x.
    pub points: Vec<Point>,
}

/// One chart of a figure.
#[derive(Debug, Clone, PartialEq)]
pub struct Panel {
    /// Caption above the chart.
    pub title: String,
    /// Label under the x axis.
    pub x_label: String,
    /// Label beside the y axis.
    pub y_label: String,
    /// How the x axis maps values (ignored with `categories`).
    pub x_scale: Scale,
    /// How the y axis maps values.
    pub y_scale: Scale,
    /// Names of the x positions 0, 1, ... when x is a category (a method, a step).
    pub categories: Vec<String>,
    /// The lines.
    pub lines: Vec<Line>,
}

impl Panel {
    /// A panel of numeric x and y axes, without lines yet.
    pub fn new(
        title: &str,
        (x_label, x_scale): (&str, Scale),
        (y_label, y_scale): (&str, Scale),
    ) -> Self {
        Self {
            title: title.to_owned(),
            x_label: x_label.to_owned(),
            y_label: y_label.to_owned(),
            x_scale,
            y_scale,
            categories: Vec::new(),
            lines: Vec::new(),
        }
    }
}

impl Panel {
    /// A panel of one direction's MiB/s (all processes) against a size on a log2 axis.
    pub fn of_direction(direction: super::Direction, x_label: &str) -> Self {
        Self::new(
            &format!("{direction}s"),
            (x_label, Scale::Log2),
            ("MiB/s (all processes)", Scale::Linear),
        )
    }

    /// A panel whose x positions 0, 1, ... are the `categories` (methods, cases), without
    /// lines yet.
    pub fn categorical<I, S>(
        title: &str,
        (x_label, categories): (&str, I),
        (y_label, y_scale): (&str, Scale),
    ) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            categories: categories.into_iter().map(Into::into).collect(),
            ..Self::new(title, (x_label, Scale::Linear), (y_label, y_scale))
        }
    }
}

/// One image: panels side by side, a title and a legend.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    /// File name without extension: the figure goes to `STEM.svg` and `STEM.png`.
    pub stem: String,
    /// Title above the panels.
    pub title: String,
    /// The charts, left to right.
    pub panels: Vec<Panel>,
}

impl Figure {
    /// Every line name, first appearance first: the legend, and the index that picks each
    /// name's style.
    fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for line in self.panels.iter().flat_map(|panel| &panel.lines) {
            if !names.contains(&line.name.as_str()) {
                names.push(&line.name);
            }
        }
        names
    }

    /// Writes `DIR/STEM.svg` and `DIR/STEM.png`; returns their paths.
    pub fn write(&self, dir: &Path) -> Result<Vec<PathBuf>, String> {
        std::fs::create_dir_all(dir)
            .map_err(|err| format!("cannot create {}: {err}", dir.display()))?;
        let size = self.size()?;
        let svg = dir.join(format!("{}.svg", self.stem));
        self.draw(&SVGBackend::new(&svg, size).into_drawing_area())
            .map_err(|err| format!("cannot draw {}: {err}", svg.display()))?;
        let png = dir.join(format!("{}.png", self.stem));
        self.draw(&BitMapBackend::new(&png, size).into_drawing_area())
            .map_err(|err| format!("cannot draw {}: {err}", png.display()))?;
        Ok(vec![svg, png])
    }

    /// The image size: the panels, and a legend column as wide as its longest name.
    fn size(&self) -> Result<(u32, u32), String> {
        load_font()?;
        let names = self.names();
        if names.len() > LINES_MAX {
            return Err(format!(
                "figure {}: {} lines, more than the {LINES_MAX} it can tell apart",
                self.stem,
                names.len()
            ));
        }
        let font = legend_font();
        let mut widest = 0;
        for name in &names {
            let (width, _) = font.box_size(name).map_err(|err| {
                format!("figure {}: cannot measure \"{name}\": {err:?}", self.stem)
            })?;
            widest = widest.max(width);
        }
        let legend_width = LEGEND_SAMPLE.unsigned_abs() + widest + 30;
        let rows = u32::try_from(names.len()).map_err(|err| err.to_string())?;
        let height = PANEL_SIZE.1.max(rows * LEGEND_ROW.unsigned_abs() + 40) + TITLE_HEIGHT;
        let (title_width, _) = title_font()
            .box_size(&self.title)
            .map_err(|err| format!("figure {}: cannot measure its title: {err:?}", self.stem))?;
        let width = (self.panels_width()? + legend_width).max(title_width + 40);
        Ok((width, height))
    }

    /// The width of the panels together: each at least [`PANEL_SIZE`], wider where its
    /// category labels need the room.
    fn panels_width(&self) -> Result<u32, String> {
        let font = tick_font();
        let mut panel_width = PANEL_SIZE.0;
        for panel in &self.panels {
            let mut widest = 0;
            for category in &panel.categories {
                let (width, _) = font.box_size(category).map_err(|err| {
                    format!(
                        "figure {}: cannot measure \"{category}\": {err:?}",
                        self.stem
                    )
                })?;
                widest = widest.max(width);
            }
            let count = u32::try_from(panel.categories.len()).map_err(|err| err.to_string())?;
            panel_width = panel_width.max(count * (widest + 24) + 120);
        }
        let panels = u32::try_from(self.panels.len().max(1)).map_err(|err| err.to_string())?;
        Ok(panels * panel_width)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        let failed = |err: DrawingAreaErrorKind<DB::ErrorType>| format!("{err:?}");
        root.fill(&WHITE).map_err(failed)?;
        let body = root.titled(&self.title, title_font()).map_err(failed)?;
        let (charts, legend) = body.split_horizontally(self.panels_width()?);
        let names = self.names();
        let areas = charts.split_evenly((1, self.panels.len().max(1)));
        for (panel, area) in self.panels.iter().zip(&areas) {
            draw_panel(area, panel, &names)?;
        }
        let font = legend_font();
        for (index, name) in names.iter().enumerate() {
            let row = i32::try_from(index).map_err(|err| err.to_string())?;
            let y = 30 + row * LEGEND_ROW;
            let style = line_style(index);
            let sample = [(8, y), (LEGEND_SAMPLE, y)];
            match DASHES[index % DASHES.len()] {
                None => legend
                    .draw(&PathElement::new(sample, style))
                    .map_err(failed)?,
                Some((dash, gap)) => legend
                    .draw(&DashedPathElement::new(sample, dash, gap, style))
                    .map_err(failed)?,
            }
            legend
                .draw(&Circle::new(
                    (i32::midpoint(8, LEGEND_SAMPLE), y),
                    3,
                    style.filled(),
                ))
                .map_err(failed)?;
            legend
                .draw(&Text::new(
                    (*name).to_owned(),
                    (LEGEND_SAMPLE + 6, y - 9),
                    font.clone(),
                ))
                .map_err(failed)?;
        }
        root.present().map_err(failed)?;
        Ok(())
    }
}

/// The style of the line whose name is `index`th in its figure.
fn line_style(index: usize) -> ShapeStyle {
    let (red, green, blue) = PALETTE[index % PALETTE.len()];
    RGBColor(red, green, blue).stroke_width(2)
}

fn legend_font() -> FontDesc<'static> {
    ("sans-serif", 15).into_font()
}

fn title_font() -> FontDesc<'static> {
    ("sans-serif", 20).into_font()
}

fn tick_font() -> FontDesc<'static> {
    ("sans-serif", 13).into_font()
}

/// A range holding `values` with a margin; `from_zero` starts a linear y axis at 0.
fn span(values: impl Iterator<Item = f64>, from_zero: bool) -> std::ops::Range<f64> {
    let (mut low, mut high) = values
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(low, high), value| {
            (low.min(value), high.max(value))
        });
    if !low.is_finite() || !high.is_finite() {
        return 0.0..1.0;
    }
    if from_zero && low >= 0.0 {
        low = 0.0;
    }
    if high - low < 1e-9 {
        high += 0.5;
        low -= if from_zero { 0.0 } else { 0.5 };
    }
    let margin = (high - low) * 0.06;
    (if from_zero && low == 0.0 {
        0.0
    } else {
        low - margin
    })..(high + margin)
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    panel: &Panel,
    names: &[&str],
) -> Result<(), String> {
    let failed = |err: DrawingAreaErrorKind<DB::ErrorType>| format!("{err:?}");
    let categorical = !panel.categories.is_empty();
    let x_scale = if categorical {
        Scale::Linear
    } else {
        panel.x_scale
    };
    // The points each line can show, in axis space: (x, min, median, max).
    let placed: Vec<Vec<(f64, f64, f64, f64)>> = panel
        .lines
        .iter()
        .map(|line| {
            let mut points: Vec<(f64, f64, f64, f64)> = line
                .points
                .iter()
                .filter_map(|point| {
                    Some((
                        x_scale.place(point.x)?,
                        panel.y_scale.place(point.y.min)?,
                        panel.y_scale.place(point.y.median)?,
                        panel.y_scale.place(point.y.max)?,
                    ))
                })
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            points
        })
        .collect();
    let x_range = if categorical {
        -0.5..(panel.categories.len() as f64 - 0.5)
    } else {
        span(placed.iter().flatten().map(|point| point.0), false)
    };
    let y_range = span(
        placed.iter().flatten().flat_map(|point| [point.1, point.3]),
        panel.y_scale == Scale::Linear,
    );
    let x_labels = if categorical {
        panel.categories.len()
    } else if x_scale == Scale::Linear {
        8
    } else {
        // One label per whole power.
        whole(x_range.end - x_range.start + 1.0).map_or(2, |count| count.min(16))
    };
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, ("sans-serif", 16).into_font())
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(x_range, y_range)
        .map_err(failed)?;
    let categories = &panel.categories;
    let x_label = |placed: &f64| {
        if categorical {
            if (placed - placed.round()).abs() > 1e-6 {
                return String::new();
            }
            whole(*placed)
                .and_then(|index| categories.get(index).cloned())
                .unwrap_or_default()
        } else {
            x_scale.label(*placed)
        }
    };
    let y_scale = panel.y_scale;
    let y_label = |placed: &f64| y_scale.label(*placed);
    chart
        .configure_mesh()
        .x_desc(&panel.x_label)
        .y_desc(&panel.y_label)
        .x_labels(x_labels)
        .y_labels(10)
        .x_label_formatter(&x_label)
        .y_label_formatter(&y_label)
        .label_style(tick_font())
        .axis_desc_style(("sans-serif", 14).into_font())
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(failed)?;
    for (line, points) in panel.lines.iter().zip(&placed) {
        let index = names
            .iter()
            .position(|name| *name == line.name)
            .expect("every line's name is in the figure's names");
        let style = line_style(index);
        let path = points.iter().map(|point| (point.0, point.2));
        match DASHES[index % DASHES.len()] {
            None => chart
                .draw_series(LineSeries::new(path, style))
                .map_err(failed)?,
            Some((dash, gap)) => chart
                .draw_series(DashedLineSeries::new(path, dash, gap, style))
                .map_err(failed)?,
        };
        chart
            .draw_series(points.iter().map(|&(x, low, median, high)| {
                ErrorBar::new_vertical(x, low, median, high, style.stroke_width(1).filled(), 8)
            }))
            .map_err(failed)?;
    }
    Ok(())
}

/// `value` rounded to a count, `None` when negative or past any tick count (4096).
fn whole(value: f64) -> Option<usize> {
    let rounded = value.round();
    // Checked to lie in 0..=4096, so the cast neither truncates nor loses a sign.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    (0.0..=4096.0)
        .contains(&rounded)
        .then_some(rounded as usize)
}

/// Registers DejaVu Sans as plotters' "sans-serif" once per process.
fn load_font() -> Result<(), String> {
    static LOADED: OnceLock<Result<(), String>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            let path = FONT_PATHS
                .iter()
                .find(|path| Path::new(path).exists())
                .ok_or_else(|| {
                    format!(
                        "no font for the figures' text: none of {} exists (apt-get install fonts-dejavu-core)",
                        FONT_PATHS.join(", ")
                    )
                })?;
            let bytes = std::fs::read(path).map_err(|err| format!("cannot read {path}: {err}"))?;
            // plotters keeps registered fonts for the life of the process.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
                .map_err(|_| format!("{path} is not a font plotters can read"))
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figure(names: &[&str]) -> Figure {
        let lines = names
            .iter()
            .enumerate()
            .map(|(index, name)| Line {
                name: (*name).to_owned(),
                points: [128.0, 1024.0, 8192.0]
                    .into_iter()
                    .map(|x| Point {
                        x,
                        y: Spread {
                            min: index as f64 + 1.0,
                            median: index as f64 + 2.0,
                            max: index as f64 + 3.5,
                        },
                    })
                    .collect(),
            })
            .collect();
        let mut panel = Panel::new(
            "writes",
            ("piece size (bytes)", Scale::Log2),
            ("MiB/s", Scale::Log10),
        );
        panel.lines = lines;
        Figure {
            stem: "test".to_owned(),
            title: "a test figure".to_owned(),
            panels: vec![
                panel.clone(),
                Panel {
                    title: "reads".to_owned(),
                    ..panel
                },
            ],
        }
    }

    #[test]
    fn svg_legend_names_every_line_and_png_has_text() {
        // Thirteen names: more than the palette's twelve colours, one with a comma, one long.
        let mut owned: Vec<String> = (1..=11).map(|index| format!("method {index}")).collect();
        owned.push("gather, unchecked".to_owned());
        owned.push("a rather long method name that must not be cut off".to_owned());
        let names: Vec<&str> = owned.iter().map(String::as_str).collect();
        let dir = tempfile::tempdir().unwrap();
        let paths = figure(&names).write(dir.path()).unwrap();
        assert_eq!(paths.len(), 2);
        let svg = std::fs::read_to_string(dir.path().join("test.svg")).unwrap();
        if let Ok(keep) = std::env::var("TESSERA_FIGURE_TEST_KEEP") {
            figure(&names).write(Path::new(&keep)).unwrap();
        }
        for name in &names {
            assert!(
                svg.contains(&format!("{name}\n</text>")),
                "legend lacks {name}"
            );
        }
        assert!(
            svg.contains("stroke-dasharray") || svg.matches("<polyline").count() > names.len(),
            "no dashed lines"
        );
        let png = std::fs::read(dir.path().join("test.png")).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        assert!(png.len() < 400_000, "PNG of {} bytes", png.len());
    }

    #[test]
    fn styles_differ_for_every_name() {
        let styles: Vec<(usize, usize)> = (0..LINES_MAX)
            .map(|index| (index % PALETTE.len(), index % DASHES.len()))
            .collect();
        for (index, style) in styles.iter().enumerate() {
            assert!(
                !styles[..index].contains(style),
                "line {index} repeats a style"
            );
        }
        let too_many: Vec<String> = (0..=LINES_MAX)
            .map(|index| format!("line {index}"))
            .collect();
        let names: Vec<&str> = too_many.iter().map(String::as_str).collect();
        let err = figure(&names)
            .write(tempfile::tempdir().unwrap().path())
            .unwrap_err();
        assert!(err.contains("more than the 60"), "{err}");
    }

    #[test]
    fn log_ticks_label_whole_powers_only() {
        assert_eq!(Scale::Log2.label(7.0), "128");
        assert_eq!(Scale::Log2.label(13.0), "8192");
        assert_eq!(Scale::Log2.label(16.0), "64k");
        assert_eq!(Scale::Log2.label(7.5), "");
        assert_eq!(Scale::Log10.label(-1.0), "0.10");
        assert_eq!(Scale::Log10.label(0.5), "3.2");
        assert_eq!(Scale::Log10.label(-1.6), "0.025");
        assert_eq!(Scale::Log10.label(3.0), "1000");
        assert_eq!(Scale::Linear.label(2.5), "2.5");
        assert_eq!(Scale::Log10.place(0.0), None);
    }
}
