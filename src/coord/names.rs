//! Where each thing lives in ZooKeeper: the znode paths under the base
//! directory (`tsd.storage.zk_basedir`), and how a UID name becomes one
//! znode name. The layout is described once, in docs/cluster.md.
//!
//! Names are spread over directories because ZooKeeper answers a listing
//! in one packet, capped by the server's `jute.maxbuffer` (1 MB by
//! default): one directory for every tag value of a large deployment
//! would stop being listable. Forward mappings sit under the hex of the
//! name's first two bytes (so a prefix scan lists only the directories
//! that can match, in name order) and then under one of 16 hash
//! sub-directories (so one popular prefix, `host…`, still spreads).
//! Reverse mappings sit under the UID divided by [`IDS_PER_DIR`].

use crate::model::{Uid, UidKind, UidWidth};

/// Hash sub-directories per two-byte name prefix.
pub const NAME_SPREAD: u32 = 16;
/// UIDs per reverse-mapping directory (16 Ki children of ≤ 16 hex digits
/// list in well under 1 MB).
pub const IDS_PER_DIR: u64 = 1 << 14;

/// The znode paths of one deployment, all under `base`.
#[derive(Debug, Clone)]
pub struct Layout {
    base: String,
}

impl Layout {
    /// `base` is `tsd.storage.zk_basedir`: absolute, without a trailing
    /// slash (`/` alone means the root).
    pub fn new(base: &str) -> Layout {
        let trimmed = base.trim().trim_end_matches('/');
        let base = if trimmed.is_empty() {
            String::new()
        } else if trimmed.starts_with('/') {
            trimmed.to_string()
        } else {
            format!("/{trimmed}")
        };
        Layout { base }
    }

    /// The base directory itself (`/` for the root).
    pub fn base(&self) -> &str {
        if self.base.is_empty() {
            "/"
        } else {
            &self.base
        }
    }

    fn kind_dir(&self, kind: UidKind) -> String {
        format!("{}/uid/{}", self.base, kind.qualifier())
    }

    /// The kind's counter: the highest UID reserved so far, in decimal.
    pub fn max_id(&self, kind: UidKind) -> String {
        format!("{}/maxid", self.kind_dir(kind))
    }

    /// Written (data bumped) by every rename and delete of the kind: the
    /// znode other TSDs watch to drop their caches.
    pub fn changes(&self, kind: UidKind) -> String {
        format!("{}/changes", self.kind_dir(kind))
    }

    /// Parent of every forward-mapping directory of a kind.
    pub fn names_root(&self, kind: UidKind) -> String {
        format!("{}/names", self.kind_dir(kind))
    }

    /// The directory of names whose first two bytes have hex `prefix_dir`.
    pub fn names_prefix_dir(&self, kind: UidKind, prefix_dir: &str) -> String {
        format!("{}/{prefix_dir}", self.names_root(kind))
    }

    /// name → UID (data: the UID's bytes).
    pub fn forward(&self, kind: UidKind, name: &str) -> String {
        format!(
            "{}/{:x}/{}",
            self.names_prefix_dir(kind, &prefix_dir_of(name.as_bytes())),
            spread_of(name),
            escape(name)
        )
    }

    /// Parent of every reverse-mapping directory of a kind.
    pub fn ids_root(&self, kind: UidKind) -> String {
        format!("{}/ids", self.kind_dir(kind))
    }

    /// UID → name (data: the name's UTF-8 bytes).
    pub fn reverse(&self, kind: UidKind, uid: Uid, width: UidWidth) -> String {
        format!(
            "{}/{:x}/{}",
            self.ids_root(kind),
            uid.id() / IDS_PER_DIR,
            hex(&uid.to_bytes(width))
        )
    }

    /// Parent of the cluster-wide locks' directories.
    pub fn lock_dir(&self, name: &str) -> String {
        format!("{}/locks/{}", self.base, escape(name))
    }

    /// A change counter ([`crate::storage::coordinator::Coordinator::bump`]):
    /// its data version is the count.
    pub fn generation(&self, name: &str) -> String {
        format!("{}/{}", self.generations(), escape(name))
    }

    /// The parent of every change counter: what each TSD watches.
    pub fn generations(&self) -> String {
        format!("{}/generations", self.base)
    }

    /// A write-once record ([`crate::storage::coordinator::Coordinator::get_or_create`]).
    pub fn record(&self, name: &str) -> String {
        format!("{}/records/{}", self.base, escape(name))
    }
}

/// Hex of the first two bytes of a name: its forward directory. Hex keeps
/// byte order, and a one-byte name's directory ("61") sorts before the
/// longer ones it prefixes ("6162"), as the names do.
pub fn prefix_dir_of(name: &[u8]) -> String {
    hex(&name[..name.len().min(2)])
}

fn spread_of(name: &str) -> u32 {
    crc32fast::hash(name.as_bytes()) % NAME_SPREAD
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A name as one znode name: bytes other than ASCII letters, digits, `-`,
/// `_` and `.` become `%XX`, and so do the dots of the names `.` and `..`
/// (which ZooKeeper reserves). The empty name (never valid) would be `%`.
pub fn escape(name: &str) -> String {
    if name == "." || name == ".." {
        return "%2E".repeat(name.len());
    }
    if name.is_empty() {
        return "%".to_string();
    }
    let mut out = String::with_capacity(name.len());
    for &b in name.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The name [`escape`] made `znode` from; `None` if it is not one of ours.
pub fn unescape(znode: &str) -> Option<String> {
    let bytes = znode.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = znode.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_survive_escaping_and_stay_single_znodes() {
        for name in [
            "sys.cpu.user",
            "a/b",
            "x%y",
            "ünï",
            ".",
            "..",
            "a b",
            "web-01_x",
        ] {
            let e = escape(name);
            assert!(!e.contains('/') && e != "." && e != "..", "{name} → {e}");
            assert_eq!(unescape(&e).as_deref(), Some(name));
        }
        assert_eq!(escape("sys.cpu"), "sys.cpu");
        assert_eq!(unescape("%zz"), None);
    }

    #[test]
    fn prefix_dirs_sort_as_names() {
        let mut names = ["ab", "a", "b", "abc", "\u{e9}"];
        let mut dirs: Vec<String> = names.iter().map(|n| prefix_dir_of(n.as_bytes())).collect();
        names.sort();
        dirs.sort();
        let want: Vec<String> = names.iter().map(|n| prefix_dir_of(n.as_bytes())).collect();
        assert_eq!(dirs, want);
    }

    #[test]
    fn paths_sit_under_the_base() {
        let l = Layout::new("rtsdb/");
        assert_eq!(l.base(), "/rtsdb");
        assert_eq!(l.max_id(UidKind::Metric), "/rtsdb/uid/metrics/maxid");
        let w = UidWidth::new(3).unwrap();
        let uid = Uid::new(20_000, w).unwrap();
        assert_eq!(
            l.reverse(UidKind::TagKey, uid, w),
            "/rtsdb/uid/tagk/ids/1/004e20"
        );
        assert!(
            l.forward(UidKind::TagValue, "ab")
                .starts_with("/rtsdb/uid/tagv/names/6162/")
        );
        assert_eq!(
            Layout::new("/").max_id(UidKind::Metric),
            "/uid/metrics/maxid"
        );
    }
}
