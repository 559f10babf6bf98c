//! Annotations (OpenTSDB's `Annotation`): a note attached to a time, either
//! to one series (by TSUID) or global. Two JSON forms:
//!
//! - storage ([`Annotation::to_storage_json`]): the cell value, fields in a
//!   fixed order (`tsuid` left out for global notes), `custom` as `null` or
//!   an object; format page `docs/format/annotation.md`;
//! - API ([`Annotation::to_api_json`]): what `/api/annotation` and query
//!   results show, in Jackson's property order for the Java class
//!   (`tsuid`, `description`, `notes`, `custom`, `endTime`, `startTime`),
//!   `custom` left out when null and `tsuid` left out for global notes.
//!
//! Requests are parsed as Jackson fills the Java object through its
//! setters: a field counts as *changed* only when it differs from the
//! default, which is what makes a POST carrying nothing answer 304.

use serde_json::Value as Json;

use super::java::hashmap_order;
use super::point::Timestamp;

/// One annotation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Annotation {
    /// The series' TSUID as given (hex), empty for a global annotation.
    pub tsuid: String,
    /// Seconds, or milliseconds when above `u32::MAX` (as data points).
    pub start_time: i64,
    /// Same unit, 0 when not set.
    pub end_time: i64,
    pub description: String,
    pub notes: String,
    /// String pairs in Java `HashMap` iteration order, or `None` (null).
    pub custom: Option<Vec<(String, String)>>,
}

/// Which user-writable fields a request set to a non-default value
/// (OpenTSDB's `changed` map).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Changes {
    pub end_time: bool,
    pub description: bool,
    pub notes: bool,
    pub custom: bool,
}

impl Changes {
    pub fn any(&self) -> bool {
        self.end_time || self.description || self.notes || self.custom
    }
}

/// Error message for a bad annotation document (HTTP 400).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnnotationError(pub String);

impl std::fmt::Display for AnnotationError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn write_str(out: &mut String, s: &str) {
    out.push_str(&serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into()));
}

/// Orders string pairs as `new HashMap<>(map)` iterates them.
pub fn java_map_order(pairs: Vec<(String, String)>) -> Vec<(String, String)> {
    // HashMap(Map): capacity tableSizeFor(size / 0.75 + 1).
    let expected = (pairs.len() as f64 / 0.75 + 1.0) as usize;
    let keys: Vec<&str> = pairs.iter().map(|p| p.0.as_str()).collect();
    let order: Vec<String> = hashmap_order(&keys, expected)
        .into_iter()
        .map(str::to_string)
        .collect();
    let mut pairs = pairs;
    let mut out = Vec::with_capacity(pairs.len());
    for k in order {
        if let Some(i) = pairs.iter().position(|p| p.0 == k) {
            out.push(pairs.swap_remove(i));
        }
    }
    out
}

/// A JSON value read as a Java `long` the way Jackson coerces it.
fn json_long(v: &Json, field: &str) -> Result<i64, AnnotationError> {
    match v {
        Json::Number(n) => n
            .as_i64()
            .or_else(|| n.as_f64().filter(|f| f.is_finite()).map(|f| f as i64))
            .ok_or_else(|| {
                AnnotationError(format!(
                    "Numeric value ({n}) out of range of long (field \"{field}\")"
                ))
            }),
        Json::String(s) => s.trim().parse::<i64>().map_err(|_| {
            AnnotationError(format!(
                "Cannot deserialize value of type `long` from String \"{s}\": not a valid Long value (field \"{field}\")"
            ))
        }),
        Json::Null => Ok(0),
        _ => Err(AnnotationError(format!(
            "Cannot deserialize value of type `long` from an object or array (field \"{field}\")"
        ))),
    }
}

fn json_string(v: &Json, field: &str) -> Result<Option<String>, AnnotationError> {
    match v {
        Json::Null => Ok(None),
        Json::String(s) => Ok(Some(s.clone())),
        Json::Number(n) => Ok(Some(n.to_string())),
        Json::Bool(b) => Ok(Some(b.to_string())),
        _ => Err(AnnotationError(format!(
            "Cannot deserialize value of type `java.lang.String` from an object or array (field \"{field}\")"
        ))),
    }
}

impl Annotation {
    pub fn is_global(&self) -> bool {
        self.tsuid.is_empty()
    }

    /// The start time as a data-point timestamp (chooses row and qualifier).
    pub fn start(&self) -> Result<Timestamp, AnnotationError> {
        if self.start_time < 1 {
            return Err(AnnotationError(
                "The start timestamp has not been set".into(),
            ));
        }
        Timestamp::from_raw(self.start_time).map_err(|e| AnnotationError(e.to_string()))
    }

    /// The start time in milliseconds (seconds are scaled).
    pub fn start_ms(&self) -> i64 {
        normalize_ms(self.start_time)
    }

    /// Fills a default annotation from a JSON object as Jackson does
    /// through the setters, recording which fields changed.
    pub fn from_json_value(v: &Json) -> Result<(Annotation, Changes), AnnotationError> {
        let obj = v.as_object().ok_or_else(|| {
            AnnotationError(
                "Cannot deserialize value of type `net.opentsdb.meta.Annotation` from a non-object value"
                    .into(),
            )
        })?;
        let mut a = Annotation::default();
        let mut c = Changes::default();
        for (k, v) in obj {
            match k.as_str() {
                "tsuid" => a.tsuid = json_string(v, k)?.unwrap_or_default(),
                "startTime" => a.start_time = json_long(v, k)?,
                "endTime" => {
                    let e = json_long(v, k)?;
                    if e != a.end_time {
                        a.end_time = e;
                        c.end_time = true;
                    }
                }
                "description" => {
                    let s = json_string(v, k)?.unwrap_or_default();
                    if s != a.description {
                        a.description = s;
                        c.description = true;
                    }
                }
                "notes" => {
                    let s = json_string(v, k)?.unwrap_or_default();
                    if s != a.notes {
                        a.notes = s;
                        c.notes = true;
                    }
                }
                "custom" => match v {
                    Json::Null => {}
                    Json::Object(m) => {
                        let mut pairs = Vec::with_capacity(m.len());
                        for (ck, cv) in m {
                            pairs.push((ck.clone(), json_string(cv, k)?.unwrap_or_default()));
                        }
                        a.custom = Some(java_map_order(pairs));
                        c.custom = true;
                    }
                    _ => {
                        return Err(AnnotationError(format!(
                            "Cannot deserialize value of type `java.util.HashMap<java.lang.String,java.lang.String>` from {} (field \"custom\")",
                            if v.is_array() {
                                "an array"
                            } else {
                                "a scalar value"
                            }
                        )));
                    }
                },
                _ => {} // unknown properties are ignored
            }
        }
        Ok((a, c))
    }

    /// Parses a JSON document holding one annotation.
    pub fn parse(bytes: &[u8]) -> Result<(Annotation, Changes), AnnotationError> {
        let v: Json = serde_json::from_slice(bytes).map_err(|e| AnnotationError(e.to_string()))?;
        Annotation::from_json_value(&v)
    }

    /// Reads a stored cell value.
    pub fn from_storage(bytes: &[u8]) -> Result<Annotation, AnnotationError> {
        Annotation::parse(bytes).map(|(a, _)| a)
    }

    /// `syncNote`: the annotation to store when `self` (a request with
    /// `changes`) meets what is stored. A merge (POST) keeps the stored
    /// value of every field the request did not change; a replace (PUT)
    /// keeps the request's fields, defaults included.
    pub fn merged(
        &self,
        changes: Changes,
        stored: Option<&Annotation>,
        overwrite: bool,
    ) -> Annotation {
        let mut out = self.clone();
        if let Some(s) = stored
            && !overwrite
        {
            if !changes.end_time {
                out.end_time = s.end_time;
            }
            if !changes.description {
                out.description = s.description.clone();
            }
            if !changes.notes {
                out.notes = s.notes.clone();
            }
            if !changes.custom {
                out.custom = s.custom.clone();
            }
        }
        out
    }

    fn write_custom(&self, out: &mut String) {
        match &self.custom {
            None => out.push_str("null"),
            Some(pairs) => {
                out.push('{');
                for (i, (k, v)) in pairs.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_str(out, k);
                    out.push(':');
                    write_str(out, v);
                }
                out.push('}');
            }
        }
    }

    /// The cell value: OpenTSDB's `getStorageJSON`.
    pub fn to_storage_json(&self) -> String {
        let mut out = String::with_capacity(128);
        out.push('{');
        if !self.tsuid.is_empty() {
            out.push_str("\"tsuid\":");
            write_str(&mut out, &self.tsuid);
            out.push(',');
        }
        out.push_str(&format!(
            "\"startTime\":{},\"endTime\":{},\"description\":",
            self.start_time, self.end_time
        ));
        write_str(&mut out, &self.description);
        out.push_str(",\"notes\":");
        write_str(&mut out, &self.notes);
        out.push_str(",\"custom\":");
        self.write_custom(&mut out);
        out.push('}');
        out
    }

    /// The API form, appended to `out`.
    pub fn write_api_json(&self, out: &mut String) {
        out.push('{');
        if !self.tsuid.is_empty() {
            out.push_str("\"tsuid\":");
            write_str(out, &self.tsuid);
            out.push(',');
        }
        out.push_str("\"description\":");
        write_str(out, &self.description);
        out.push_str(",\"notes\":");
        write_str(out, &self.notes);
        if self.custom.is_some() {
            out.push_str(",\"custom\":");
            self.write_custom(out);
        }
        out.push_str(&format!(
            ",\"endTime\":{},\"startTime\":{}}}",
            self.end_time, self.start_time
        ));
    }

    pub fn to_api_json(&self) -> String {
        let mut s = String::with_capacity(128);
        self.write_api_json(&mut s);
        s
    }

    /// `TSUID: .. Start: ..  Description: ..` (Java `toString`).
    pub fn describe(&self) -> String {
        format!(
            "TSUID: {} Start: {}  Description: {}",
            self.tsuid, self.start_time, self.description
        )
    }
}

/// A raw timestamp in milliseconds: values that fit 32 bits are seconds
/// (OpenTSDB's `SECOND_MASK` test).
pub fn normalize_ms(t: i64) -> i64 {
    if t & !0xFFFF_FFFFi64 == 0 {
        t.saturating_mul(1000)
    } else {
        t
    }
}

/// A list of annotations as a JSON array in API form.
pub fn api_json_array(notes: &[Annotation]) -> String {
    let mut s = String::from("[");
    for (i, n) in notes.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        n.write_api_json(&mut s);
    }
    s.push(']');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_and_api_forms() {
        let a = Annotation {
            tsuid: "000001000001000001".into(),
            start_time: 1292148123,
            description: "Network Outage".into(),
            ..Default::default()
        };
        // docs/format/annotation.md's example, 121 bytes.
        let stored = a.to_storage_json();
        assert_eq!(
            stored,
            r#"{"tsuid":"000001000001000001","startTime":1292148123,"endTime":0,"description":"Network Outage","notes":"","custom":null}"#
        );
        assert_eq!(stored.len(), 121);
        assert_eq!(Annotation::from_storage(stored.as_bytes()).unwrap(), a);
        assert_eq!(
            a.to_api_json(),
            r#"{"tsuid":"000001000001000001","description":"Network Outage","notes":"","endTime":0,"startTime":1292148123}"#
        );
        let g = Annotation {
            tsuid: String::new(),
            ..a.clone()
        };
        assert_eq!(
            g.to_storage_json(),
            r#"{"startTime":1292148123,"endTime":0,"description":"Network Outage","notes":"","custom":null}"#
        );
        assert!(!g.to_api_json().contains("tsuid"));
    }

    #[test]
    fn setters_record_changes_like_jackson() {
        let (a, c) =
            Annotation::parse(br#"{"startTime":"1369141261","endTime":0,"description":"","x":1}"#)
                .unwrap();
        assert_eq!(a.start_time, 1369141261);
        assert!(!c.any(), "defaults are no change");
        let (a, c) =
            Annotation::parse(br#"{"startTime":1,"custom":{"owner":"jdoe","dept":"ops"}}"#)
                .unwrap();
        assert!(c.custom && !c.description);
        // Java HashMap order: "owner" hashes before "dept" in 4 buckets.
        let keys: Vec<_> = a.custom.unwrap().into_iter().map(|p| p.0).collect();
        assert_eq!(keys.len(), 2);
        assert!(Annotation::parse(b"[1]").is_err());
        assert!(Annotation::parse(br#"{"startTime":"abc"}"#).is_err());
        assert!(Annotation::parse(br#"{"custom":[1]}"#).is_err());
        assert!(Annotation::parse(b"{").is_err());
    }

    #[test]
    fn merge_and_replace() {
        let stored = Annotation {
            start_time: 10,
            description: "d".into(),
            notes: "n".into(),
            ..Default::default()
        };
        let (req, c) = Annotation::parse(br#"{"startTime":10,"notes":"new"}"#).unwrap();
        let m = req.merged(c, Some(&stored), false);
        assert_eq!((m.description.as_str(), m.notes.as_str()), ("d", "new"));
        let r = req.merged(c, Some(&stored), true);
        assert_eq!((r.description.as_str(), r.notes.as_str()), ("", "new"));
        assert_eq!(normalize_ms(10), 10_000);
        assert_eq!(normalize_ms(1369141261000), 1369141261000);
    }
}
