//! The options that shape a picture ([`PlotParams`]): size, axes and
//! their ranges, labels and formats, the key's place, colours, smoothing
//! and point style, in gnuplot's terms. `/q` fills them from its query
//! string (`tsd::http::graph::params`).

use std::sync::LazyLock;

use regex::Regex;

/// The smoothings gnuplot knows (OpenTSDB's pattern for `smooth`).
pub(crate) const SMOOTH: &str = "unique|frequency|fnormal|cumulative|cnormal|bins|csplines|acsplines|mcsplines|bezier|sbezier|unwrap|zsort";
pub(crate) static SMOOTH_RE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(SMOOTH).expect("a constant pattern"));

/// Gnuplot's default picture size.
pub(crate) const DEFAULT_SIZE: (u32, u32) = (1024, 768);

/// How points are drawn (`style`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Style {
    /// Lines through the points, each point marked (gnuplot's
    /// `linespoints`, OpenTSDB's default).
    #[default]
    LinesPoints,
    Points,
    Circles,
    Dots,
}

/// A y range; either end may be left to the data (`[0:]`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct Range {
    pub min: Option<f64>,
    pub max: Option<f64>,
}

/// Where the key (legend) goes, from gnuplot's `set key` words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeyPlace {
    pub left: bool,
    pub bottom: bool,
    pub center: bool,
    pub outside: bool,
    pub boxed: bool,
    /// `top` said outright (it is also the default, but `center top`
    /// differs from `center` alone).
    pub top: bool,
    /// `horiz`: entries side by side rather than stacked.
    pub horizontal: bool,
}

impl Default for KeyPlace {
    /// `set key right box`.
    fn default() -> Self {
        KeyPlace {
            left: false,
            bottom: false,
            center: false,
            outside: false,
            boxed: true,
            top: false,
            horizontal: false,
        }
    }
}

/// Every option that shapes the picture.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct PlotParams {
    pub size: Option<(u32, u32)>,
    pub yrange: Option<Range>,
    pub y2range: Option<Range>,
    pub ylabel: Option<String>,
    pub y2label: Option<String>,
    pub yformat: Option<String>,
    pub y2format: Option<String>,
    pub xformat: Option<String>,
    pub ylog: bool,
    pub y2log: bool,
    /// `None`: no key (`nokey`).
    pub key: Option<KeyPlace>,
    pub title: Option<String>,
    pub bgcolor: Option<[u8; 3]>,
    pub fgcolor: Option<[u8; 3]>,
    pub smooth: Option<String>,
    pub style: Style,
}

/// The key's place from gnuplot's `set key` words.
pub(crate) fn parse_key(v: &str) -> KeyPlace {
    let words: Vec<&str> = v.split_whitespace().collect();
    let has = |w: &str| words.contains(&w);
    KeyPlace {
        left: has("left"),
        bottom: has("bottom"),
        center: has("center"),
        outside: has("out"),
        boxed: has("box"),
        top: has("top"),
        horizontal: has("horiz"),
    }
}

impl PlotParams {
    /// The picture's size.
    pub(crate) fn size(&self) -> (u32, u32) {
        self.size.unwrap_or(DEFAULT_SIZE)
    }

    /// The smoothing the value of `smooth` names (the first the pattern
    /// finds, as gnuplot reads the first word).
    pub(crate) fn smoothing(&self) -> Option<&str> {
        let s = self.smooth.as_deref()?;
        SMOOTH_RE.find(s).map(|m| m.as_str())
    }
}
