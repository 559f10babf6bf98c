//! The page at `/`, its files under `/s/`, `/favicon.ico`, and the files
//! of `tsd.http.staticroot` (OpenTSDB's `HomePage` and `StaticFileRpc`).
//!
//! The page and its scripts are compiled into the binary: nothing is
//! installed or fetched at run time. uPlot (MIT, licence beside it) draws
//! the charts. A file of the same name in `tsd.http.staticroot` is served
//! only where the binary has none.

use std::path::{Path, PathBuf};

use super::{Call, Reply, error_body, legacy_bad_request};

/// One compiled-in file.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    bytes: &'static [u8],
}

const HTML: &str = "text/html; charset=UTF-8";
const JS: &str = "text/javascript; charset=UTF-8";
const CSS: &str = "text/css; charset=UTF-8";
const TEXT: &str = "text/plain; charset=UTF-8";
const ICO: &str = "image/x-icon";

static INDEX: &[u8] = include_bytes!("assets/index.html");

static ASSETS: &[Asset] = &[
    Asset {
        name: "app.js",
        content_type: JS,
        bytes: include_bytes!("assets/app.js"),
    },
    Asset {
        name: "app.css",
        content_type: CSS,
        bytes: include_bytes!("assets/app.css"),
    },
    Asset {
        name: "uPlot.iife.min.js",
        content_type: JS,
        bytes: include_bytes!("assets/vendor/uPlot.iife.min.js"),
    },
    Asset {
        name: "uPlot.min.css",
        content_type: CSS,
        bytes: include_bytes!("assets/vendor/uPlot.min.css"),
    },
    Asset {
        name: "uPlot.LICENSE",
        content_type: TEXT,
        bytes: include_bytes!("assets/vendor/uPlot.LICENSE"),
    },
    Asset {
        name: "favicon.ico",
        content_type: ICO,
        bytes: include_bytes!("assets/favicon.ico"),
    },
];

/// `StaticFileRpc`'s cache lifetime for files: a year, unless the URI
/// says `nocache`.
const YEAR_S: u32 = 31_536_000;

fn asset(name: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|a| a.name == name)
}

/// Compiled-in files change with the binary, so browsers check again.
fn asset_reply(a: &Asset) -> Reply {
    Reply::new(200, a.content_type, a.bytes).with_header("Cache-Control", "no-cache")
}

/// `/`: the page.
pub(super) fn home(_: &Call) -> Reply {
    Reply::new(200, HTML, INDEX).with_header("Cache-Control", "no-cache")
}

/// `/favicon.ico`: the staticroot's, else the compiled-in one.
pub(super) fn favicon(c: &Call) -> Reply {
    if let Some(root) = &c.state.options.staticroot {
        let path = root.join("favicon.ico");
        if path.is_file() {
            return send_file(&path, YEAR_S);
        }
    }
    asset("favicon.ico")
        .map(asset_reply)
        .unwrap_or_else(file_not_found)
}

/// `/s/<file>`.
pub(super) fn static_file(c: &Call) -> Reply {
    let uri = c.head.uri.path();
    if uri.len() < 3 {
        return legacy_bad_request(&c.query, &format!("URI too short <code>{uri}</code>"));
    }
    // Any `..` is refused, as OpenTSDB does; and below, the file must
    // resolve inside the root (a symlink out of it is not followed).
    if uri[3.min(uri.len())..].contains("..") || uri.contains('\\') || uri.contains('\0') {
        return legacy_bad_request(&c.query, &format!("Malformed URI <code>{uri}</code>"));
    }
    let rel = uri.get(3..).unwrap_or("");
    if let Some(a) = asset(rel) {
        return asset_reply(a);
    }
    let Some(root) = &c.state.options.staticroot else {
        return file_not_found();
    };
    let max_age = if c.head.uri.to_string().contains("nocache") {
        0
    } else {
        YEAR_S
    };
    match inside(root, rel) {
        Some(path) => send_file(&path, max_age),
        None => file_not_found(),
    }
}

/// `root/rel`, if it is a file that really lies under `root`.
fn inside(root: &Path, rel: &str) -> Option<PathBuf> {
    let root = root.canonicalize().ok()?;
    let path = root.join(rel.trim_start_matches('/')).canonicalize().ok()?;
    (path.starts_with(&root) && path.is_file()).then_some(path)
}

/// `HttpQuery.sendFile`'s 404: the API's "not found" body.
fn file_not_found() -> Reply {
    Reply::new(
        404,
        "application/json",
        error_body(404, "Endpoint not found", ""),
    )
}

/// `guessMimeTypeFromUri`: by the last letters of the name.
fn mime_type(path: &Path) -> &'static str {
    let name = path.to_string_lossy();
    let ends = |s: &str| name.ends_with(s);
    if ends(".png") {
        "image/png"
    } else if ends("html") {
        "text/html; charset=UTF-8"
    } else if ends(".css") {
        "text/css"
    } else if ends(".js") {
        "text/javascript"
    } else if ends(".gif") {
        "image/gif"
    } else if ends(".ico") {
        "image/x-icon"
    } else {
        "text/plain"
    }
}

/// `sendFile`: the file with `Cache-Control` and its `Age`.
fn send_file(path: &Path, max_age: u32) -> Reply {
    let Ok(bytes) = std::fs::read(path) else {
        tracing::warn!(path = %path.display(), "file not found");
        return file_not_found();
    };
    let age = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .map(|d| d.as_secs())
        .unwrap_or(0);
    Reply::new(200, mime_type(path), bytes)
        .with_header("Age", age.to_string())
        .with_header("Cache-Control", format!("max-age={max_age}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_stay_inside_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("static");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/a.css"), "x").unwrap();
        std::fs::write(dir.path().join("secret"), "s").unwrap();
        assert!(inside(&root, "sub/a.css").is_some());
        assert!(inside(&root, "sub").is_none(), "directories are not files");
        assert!(inside(&root, "../secret").is_none());
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(dir.path().join("secret"), root.join("link")).unwrap();
            assert!(inside(&root, "link").is_none());
        }
        assert_eq!(mime_type(Path::new("x/a.css")), "text/css");
        assert_eq!(mime_type(Path::new("x/a.txt")), "text/plain");
    }

    #[test]
    fn the_page_names_only_files_it_serves() {
        let page = std::str::from_utf8(INDEX).unwrap();
        for a in ["app.js", "app.css", "uPlot.iife.min.js", "uPlot.min.css"] {
            assert!(page.contains(&format!("s/{a}")), "{a}");
            assert!(asset(a).is_some());
        }
        // Nothing from the network.
        assert!(!page.contains("http://") && !page.contains("https://"));
    }
}
