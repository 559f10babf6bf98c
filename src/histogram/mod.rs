//! OpenTSDB 2.4 histograms: the codecs configured by
//! `tsd.core.histograms.config` ([`Codecs`]) and the one codec OpenTSDB
//! ships, `SimpleHistogramDecoder` ([`simple::SimpleHistogram`]). Stored
//! cells hold the codec id and the codec's bytes (docs/format/histogram.md).

pub mod simple;

use std::collections::BTreeMap;

use thiserror::Error;

pub use simple::SimpleHistogram;

/// The class name of the only codec rtsdb has (OpenTSDB loads any class
/// by name; rtsdb knows this one).
pub const SIMPLE_CODEC: &str = "net.opentsdb.core.SimpleHistogramDecoder";

/// The configuration key.
pub const CONFIG_KEY: &str = "tsd.core.histograms.config";

/// What a histogram operation can fail with; the messages are 2.4.1's.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum HistogramError {
    /// `IllegalArgumentException`: bad input (too short, wrong id, no
    /// codec for an id, a bad configuration).
    #[error("{0}")]
    Invalid(String),
    /// The bytes end before the histogram does (Kryo's `KryoException`,
    /// a runtime exception rather than an illegal argument in 2.4.1).
    #[error("{0}")]
    Corrupt(String),
    /// `IllegalStateException` at start: a codec that cannot be loaded.
    #[error("{0}")]
    Unloadable(String),
    /// Reading the configuration file failed (`RuntimeException`).
    #[error("Unable to open plugin config file: {0}")]
    ConfigFile(String),
}

/// The codecs of `tsd.core.histograms.config` (`HistogramCodecManager`):
/// id → codec. rtsdb has one codec, so this records which ids name it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Codecs {
    /// Ids mapped to [`SIMPLE_CODEC`] (the JSON maps class → id, so a
    /// class has one id; kept as a set for clarity).
    simple_id: Option<u8>,
}

impl Codecs {
    /// Reads the configuration value: `None` (key absent or empty) means
    /// histograms are off. A value ending in `.json` is a file to read,
    /// anything else the JSON map itself (`{"<class>": <id>, ...}`). An
    /// empty map loads nothing (2.4.1 only warns: every histogram write
    /// and read then fails).
    pub fn from_config(value: Option<&str>) -> Result<Option<Codecs>, HistogramError> {
        let Some(value) = value.filter(|v| !v.is_empty()) else {
            return Ok(None);
        };
        let json = if value.ends_with(".json") {
            std::fs::read_to_string(value)
                .map_err(|e| HistogramError::ConfigFile(format!("{value}: {e}")))?
        } else {
            value.to_string()
        };
        Codecs::from_json(&json).map(Some)
    }

    fn from_json(json: &str) -> Result<Codecs, HistogramError> {
        // Jackson into Map<String, Integer>: numbers (or numeric strings)
        // as values; anything else is a parse error.
        let raw: BTreeMap<String, serde_json::Value> = serde_json::from_str(json)
            .map_err(|e| HistogramError::Invalid(format!("Unable to parse {CONFIG_KEY}: {e}")))?;
        let mut codecs = Codecs::default();
        if raw.is_empty() {
            tracing::warn!(
                "No histograms configured. Histogram writes and reads will throw exceptions."
            );
            return Ok(codecs);
        }
        let mut seen = Vec::new();
        for (class, v) in &raw {
            let id = match v {
                serde_json::Value::Number(n) => n.as_i64(),
                serde_json::Value::String(s) => s.trim().parse::<i64>().ok(),
                _ => None,
            }
            .ok_or_else(|| {
                HistogramError::Invalid(format!(
                    "Unable to parse {CONFIG_KEY}: bad ID for codec '{class}': {v}"
                ))
            })?;
            if !(0..=255).contains(&id) {
                return Err(HistogramError::Invalid(format!(
                    "ID for codec '{class}' must be from 0 to 255."
                )));
            }
            if seen.contains(&id) {
                return Err(HistogramError::Invalid(format!(
                    "Duplicate ID found for codec '{class}': {id}"
                )));
            }
            seen.push(id);
            if class != SIMPLE_CODEC {
                return Err(HistogramError::Unloadable(format!(
                    "Unable to find a decoder named '{class}'"
                )));
            }
            tracing::info!("Successfully loaded decoder '{class}' with ID {id}");
            codecs.simple_id = Some(id as u8);
        }
        Ok(codecs)
    }

    /// `getCodec(SimpleHistogramDecoder.class)`: the id of the simple
    /// codec (the `buckets` form of writes uses it).
    pub fn simple_id(&self) -> Result<u8, HistogramError> {
        self.simple_id.ok_or_else(|| {
            HistogramError::Invalid(format!(
                "No codec ID assigned to class class {}",
                SIMPLE_CODEC
            ))
        })
    }

    /// `getCodec(id)`: fails for an id no codec is mapped to.
    fn check_id(&self, id: i64) -> Result<u8, HistogramError> {
        match self.simple_id {
            Some(s) if s as i64 == id => Ok(s),
            _ => Err(HistogramError::Invalid(format!(
                "No codec found mapped to ID {id}"
            ))),
        }
    }

    /// Decodes `raw` with the codec of `id` (`HistogramCodecManager.decode`).
    pub fn decode(
        &self,
        id: i64,
        raw: &[u8],
        includes_id: bool,
    ) -> Result<SimpleHistogram, HistogramError> {
        let id = self.check_id(id)?;
        SimpleHistogram::decode(id, raw, includes_id)
    }

    /// Decodes a stored cell value: codec id byte, then the codec's bytes.
    pub fn decode_cell(&self, value: &[u8]) -> Result<SimpleHistogram, HistogramError> {
        let Some(&id) = value.first() else {
            return Err(HistogramError::Invalid(
                "The data array cannot be empty.".into(),
            ));
        };
        self.decode(id as i64, value, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// TestHistogramCodecManager.ctor, for the one codec rtsdb has.
    #[test]
    fn configuration() {
        assert_eq!(Codecs::from_config(None).unwrap(), None);
        assert_eq!(Codecs::from_config(Some("")).unwrap(), None);
        let c = Codecs::from_config(Some(r#"{"net.opentsdb.core.SimpleHistogramDecoder": 0}"#))
            .unwrap()
            .unwrap();
        assert_eq!(c.simple_id().unwrap(), 0);
        assert!(c.decode(0, &[0, 0, 0, 0, 0, 0], false).is_ok());
        assert_eq!(
            c.decode(43, &[], false).unwrap_err().to_string(),
            "No codec found mapped to ID 43"
        );
        let bad = |json: &str| Codecs::from_config(Some(json)).unwrap_err().to_string();
        assert!(
            bad(r#"{"net.opentsdb.core.SimpleHistogramDecoder": "#).starts_with("Unable to parse")
        );
        assert_eq!(
            bad(r#"{"net.opentsdb.core.SimpleHistogramDecoder":-1}"#),
            "ID for codec 'net.opentsdb.core.SimpleHistogramDecoder' must be from 0 to 255."
        );
        assert_eq!(
            bad(r#"{"net.opentsdb.core.SimpleHistogramDecoder":256}"#),
            "ID for codec 'net.opentsdb.core.SimpleHistogramDecoder' must be from 0 to 255."
        );
        assert_eq!(
            bad(r#"{"net.opentsdb.core.NoSuchPlugin":0}"#),
            "Unable to find a decoder named 'net.opentsdb.core.NoSuchPlugin'"
        );
        assert!(
            bad("/no/such/file.json")
                .starts_with("Unable to open plugin config file: /no/such/file.json")
        );
        let empty = Codecs::from_config(Some("{}")).unwrap().unwrap();
        assert!(empty.simple_id().is_err());
    }

    #[test]
    fn configuration_from_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("histos.json");
        std::fs::write(&f, r#"{"net.opentsdb.core.SimpleHistogramDecoder": 7}"#).unwrap();
        let c = Codecs::from_config(Some(f.to_str().unwrap()))
            .unwrap()
            .unwrap();
        assert_eq!(c.simple_id().unwrap(), 7);
    }
}
