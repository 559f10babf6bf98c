//! Authentication over a real TSD (docs/security.md): every route of the
//! route table and every telnet command without credentials and with each
//! role (401/403/served), the credential forms (Bearer, Basic, Token,
//! InfluxDB's u/p), reloads of the users file, brute force slowed and cut
//! off on telnet, fuzzed `Authorization` headers and `auth` lines, the
//! `tsdb auth` commands, and everything unchanged with authentication off.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use base64::Engine;
use proptest::prelude::*;

use crate::common::cli::tsdb;
use crate::common::server::{TestServer, http, telnet};
use rtsdb::auth::{Roles, Token, Users};

/// A TSD with authentication on and one user per role.
struct Fixture {
    srv: TestServer,
    read: Token,
    write: Token,
    admin: Token,
}

const ON: &[(&str, &str)] = &[
    ("tsd.core.authentication.enable", "true"),
    ("tsd.http.query.allow_delete", "true"),
    ("tsd.core.auto_create_metrics", "true"),
];

fn users_file(dir: &Path) -> std::path::PathBuf {
    dir.join("users")
}

fn fixture(extra: &[(&str, &str)]) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let mut users = Users::default();
    let mut add = |name: &str, roles: &str| {
        users
            .add(name, Roles::parse_list(roles).unwrap(), "default")
            .unwrap()
    };
    let read = add("reader", "read");
    let write = add("writer", "write");
    let admin = add("admin", "admin");
    users.save(&users_file(dir.path())).unwrap();
    let mut settings = ON.to_vec();
    settings.extend_from_slice(extra);
    Fixture {
        srv: TestServer::start_in(dir, &settings),
        read,
        write,
        admin,
    }
}

fn bearer(t: &Token) -> String {
    format!("Bearer {}", t.reveal())
}

fn send(f: &Fixture, method: &str, path: &str, body: &str, auth: Option<&str>) -> (u16, String) {
    let mut headers = vec![("Content-Type", "application/json")];
    if let Some(a) = auth {
        headers.push(("Authorization", a));
    }
    let r = http(f.srv.addr, method, path, &headers, body.as_bytes());
    let www = r.header("www-authenticate").map(str::to_string);
    if r.status == 401 {
        assert_eq!(www.as_deref(), Some("Bearer realm=\"rtsdb\""), "{path}");
        let v = r.json();
        assert_eq!(v["error"]["code"], 401, "{path}");
    }
    (r.status, r.text())
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Needs {
    Open,
    Read,
    Write,
    Admin,
}

const PUT: &str = r#"[{"metric":"auth.m","timestamp":1700000000,"value":1,"tags":{"h":"a"}}]"#;

/// Every route of the table (src/tsd/http/routes.rs and the Prometheus
/// paths), with what it needs.
fn routes() -> Vec<(&'static str, &'static str, &'static str, Needs)> {
    use Needs::*;
    vec![
        ("POST", "/api/put", PUT, Write),
        ("POST", "/api/v1/put?details", PUT, Write),
        ("POST", "/api/rollup", "[]", Write),
        ("POST", "/api/histogram", "[]", Write),
        ("GET", "/api/query?start=1h-ago&m=sum:auth.m", "", Read),
        ("POST", "/api/query/last", r#"{"queries":[]}"#, Read),
        ("GET", "/api/query/gexp?start=1h-ago&exp=sum(x)", "", Read),
        ("POST", "/api/query/exp", "{}", Read),
        (
            "DELETE",
            "/api/query?start=1h-ago&m=sum:auth.none",
            "",
            Admin,
        ),
        (
            "GET",
            "/api/query?start=1h-ago&m=sum:auth.none&method_override=delete",
            "",
            Admin,
        ),
        ("GET", "/api/annotation?start_time=1", "", Read),
        (
            "POST",
            "/api/annotation",
            r#"{"startTime":1700000000,"description":"d"}"#,
            Write,
        ),
        ("GET", "/api/annotations?start_time=1", "", Read),
        (
            "DELETE",
            "/api/annotations?start_time=1&end_time=2",
            "",
            Write,
        ),
        ("GET", "/api/version", "", Read),
        ("GET", "/version", "", Read),
        ("GET", "/api/aggregators", "", Read),
        ("GET", "/aggregators", "", Read),
        ("GET", "/api/dropcaches", "", Admin),
        ("GET", "/dropcaches", "", Admin),
        ("GET", "/api/stats", "", Read),
        ("GET", "/stats", "", Read),
        ("GET", "/api/stats/query", "", Read),
        ("GET", "/api/config", "", Admin),
        ("GET", "/api/serializers", "", Read),
        ("GET", "/api/suggest?type=metrics", "", Read),
        ("GET", "/suggest?type=metrics&q=", "", Read),
        ("GET", "/api/search/lookup?m=auth.m", "", Read),
        ("GET", "/api/uid/uidmeta?uid=000001&type=metric", "", Read),
        ("GET", "/api/uid/assign?metric=auth.assigned", "", Admin),
        (
            "POST",
            "/api/uid/assign",
            r#"{"metric":["auth.a2"]}"#,
            Admin,
        ),
        ("GET", "/api/tree", "", Read),
        ("POST", "/api/tree", r#"{"name":"t"}"#, Admin),
        ("GET", "/metrics", "", Read),
        ("GET", "/", "", Open),
        ("GET", "/s/app.js", "", Open),
        ("GET", "/favicon.ico", "", Open),
        ("GET", "/q?start=1h-ago&m=sum:auth.m&ascii", "", Read),
        ("GET", "/logs", "", Admin),
        ("POST", "/api/backup", "{}", Admin),
        ("POST", "/api/v1/write", "", Write),
        ("POST", "/prometheus/api/v1/write", "", Write),
        ("GET", "/prometheus/api/v1/query?query=1", "", Read),
        ("POST", "/prometheus/api/v1/query_range", "", Read),
        ("GET", "/prometheus/api/v1/labels", "", Read),
        ("GET", "/prometheus/api/v1/metadata", "", Read),
        ("GET", "/no/such/path", "", Admin),
        ("POST", "/write?db=x", "auth.m,host=a v=1", Write),
        ("POST", "/api/v2/write?bucket=x", "auth.m,host=a v=1", Write),
        ("GET", "/ping?verbose", "", Open),
        ("GET", "/api/stats/query", "", Read),
        ("DELETE", "/api/stats/query?id=999999", "", Admin),
        ("GET", "/api/stats/cardinality", "", Read),
        ("GET", "/prometheus/api/v1/status/tsdb", "", Read),
    ]
}

#[test]
fn every_route_answers_401_without_credentials_403_without_the_role_and_serves_its_role() {
    let f = fixture(&[]);
    let users = [
        (Needs::Read, bearer(&f.read)),
        (Needs::Write, bearer(&f.write)),
        (Needs::Admin, bearer(&f.admin)),
    ];
    for (method, path, body, needs) in routes() {
        let (status, text) = send(&f, method, path, body, None);
        if needs == Needs::Open {
            assert_eq!(status, 200, "{method} {path}: {text}");
        } else {
            assert_eq!(status, 401, "{method} {path} without credentials: {text}");
        }
        let (status, _) = send(&f, method, path, body, Some("Bearer rt_1_nope"));
        if needs != Needs::Open {
            assert_eq!(status, 401, "{method} {path} with a malformed token");
        }
        for (role, auth) in &users {
            let (status, text) = send(&f, method, path, body, Some(auth));
            if needs == Needs::Open || needs == *role {
                assert!(
                    status != 401 && status != 403,
                    "{method} {path} as {role:?}: {status} {text}"
                );
            } else {
                assert_eq!(status, 403, "{method} {path} as {role:?}: {text}");
                assert!(text.contains("role"), "{text}");
            }
        }
    }
    // diediedie last: served to admin only, and it stops the server.
    assert_eq!(send(&f, "GET", "/diediedie", "", None).0, 401);
    assert_eq!(
        send(&f, "GET", "/diediedie", "", Some(&bearer(&f.write))).0,
        403
    );
    // The point the writer put is there, and the reader can query it.
    let (status, text) = send(
        &f,
        "GET",
        "/api/query?start=1699999000&end=1700001000&m=sum:auth.m",
        "",
        Some(&bearer(&f.read)),
    );
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("\"1700000000\":1"), "{text}");
}

#[test]
fn a_delete_query_in_a_body_needs_the_admin_role() {
    let f = fixture(&[]);
    let (s, _) = send(&f, "POST", "/api/put", PUT, Some(&bearer(&f.write)));
    assert_eq!(s, 204);
    let del = r#"{"start":1699999000,"end":1700001000,"delete":true,"queries":[{"aggregator":"sum","metric":"auth.m"}]}"#;
    let (s, text) = send(&f, "POST", "/api/query", del, Some(&bearer(&f.read)));
    assert_eq!(s, 403, "{text}");
    assert_eq!(f.srv.point_count("auth.m"), 1);
    let (s, text) = send(&f, "POST", "/api/query", del, Some(&bearer(&f.admin)));
    assert_eq!(s, 403, "admin alone cannot read: {text}");
    let mut users = Users::load(&users_file(f.srv.dir.path())).unwrap();
    let both = users
        .add("both", Roles::parse_list("read,admin").unwrap(), "default")
        .unwrap();
    users.save(&users_file(f.srv.dir.path())).unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    let (s, text) = send(&f, "POST", "/api/query", del, Some(&bearer(&both)));
    assert_eq!(s, 200, "{text}");
    assert_eq!(f.srv.point_count("auth.m"), 0);
}

#[test]
fn basic_token_and_influx_credentials_name_the_same_users() {
    let f = fixture(&[]);
    let b64 = |s: String| base64::engine::general_purpose::STANDARD.encode(s);
    let path = "/api/query?start=1h-ago&m=sum:auth.m";
    let ok = [
        format!("Basic {}", b64(format!("reader:{}", f.read.reveal()))),
        format!("Token {}", f.read.reveal()),
        format!("Token reader:{}", f.read.reveal()),
        format!("bearer {}", f.read.reveal()),
    ];
    for a in &ok {
        assert_ne!(send(&f, "GET", path, "", Some(a)).0, 401, "{a}");
    }
    // A name that is not the token's user's fails.
    let wrong = format!("Basic {}", b64(format!("writer:{}", f.read.reveal())));
    assert_eq!(send(&f, "GET", path, "", Some(&wrong)).0, 401);
    assert_eq!(send(&f, "GET", path, "", Some("Digest abc")).0, 401);
    let up = format!("{path}&u=reader&p={}", f.read.reveal());
    assert_ne!(send(&f, "GET", &up, "", None).0, 401);
    let up = format!("{path}&u=writer&p={}", f.read.reveal());
    assert_eq!(send(&f, "GET", &up, "", None).0, 401);
}

#[test]
fn the_users_file_is_read_again_without_a_restart() {
    let f = fixture(&[]);
    let path = "/api/version";
    let file = users_file(f.srv.dir.path());
    let mut users = Users::load(&file).unwrap();
    let late = users
        .add("late", Roles::parse_list("read").unwrap(), "default")
        .unwrap();
    users.save(&file).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while send(&f, "GET", path, "", Some(&bearer(&late))).0 != 200 {
        assert!(Instant::now() < deadline, "a new user was never accepted");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Rotation: the old token stops working, the new one works.
    let rotated = users.rotate("reader").unwrap();
    users.save(&file).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while send(&f, "GET", path, "", Some(&bearer(&f.read))).0 != 401 {
        assert!(Instant::now() < deadline, "a rotated token still works");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(send(&f, "GET", path, "", Some(&bearer(&rotated))).0, 200);
}

#[test]
fn the_version_can_be_left_open_for_health_checks() {
    let f = fixture(&[("tsd.core.authentication.open_version", "true")]);
    assert_eq!(send(&f, "GET", "/api/version", "", None).0, 200);
    assert_eq!(send(&f, "GET", "/api/stats", "", None).0, 401);
    let out = telnet(f.srv.addr, b"version\n");
    assert!(out.contains("net.opentsdb"), "{out}");
}

/// A telnet session: lines in, answer lines out.
struct Session {
    s: TcpStream,
    r: BufReader<TcpStream>,
}

impl Session {
    fn open(f: &Fixture) -> Session {
        let s = TcpStream::connect(f.srv.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let r = BufReader::new(s.try_clone().unwrap());
        Session { s, r }
    }

    fn ask(&mut self, line: &str) -> String {
        self.s.write_all(format!("{line}\n").as_bytes()).unwrap();
        let mut out = String::new();
        self.r.read_line(&mut out).unwrap();
        out
    }
}

#[test]
fn telnet_commands_need_auth_then_their_role() {
    let f = fixture(&[]);
    // Every command before `auth` gets an error (and the third closes).
    for cmd in ["put auth.t 1700000000 1 h=a", "stats", "version", "help"] {
        let out = telnet(f.srv.addr, format!("{cmd}\n").as_bytes());
        assert_eq!(
            out, "error: authentication required: send `auth NAME TOKEN` first\n",
            "{cmd}"
        );
    }
    for cmd in ["dropcaches", "diediedie", "rollup", "histogram", "nosuch"] {
        let out = telnet(f.srv.addr, format!("{cmd}\n").as_bytes());
        assert!(
            out.starts_with("error: authentication required"),
            "{cmd}: {out}"
        );
    }
    let mut w = Session::open(&f);
    assert_eq!(
        w.ask(&format!("auth writer {}", f.write.reveal())),
        "AUTH_SUCCESS.\r\n"
    );
    assert_eq!(
        w.ask("stats"),
        "stats: permission denied: the read role is needed\n"
    );
    assert_eq!(
        w.ask("dropcaches"),
        "dropcaches: permission denied: the admin role is needed\n"
    );
    w.ask("put auth.t 1700000000 1 h=a\nversion");
    let mut r = Session::open(&f);
    assert_eq!(
        r.ask(&format!("auth basic reader {}", f.read.reveal())),
        "AUTH_SUCCESS.\r\n"
    );
    assert_eq!(
        r.ask("put auth.t 1700000001 1 h=a"),
        "put: permission denied: the write role is needed\n"
    );
    assert!(r.ask("version").starts_with("net.opentsdb"));
    let mut a = Session::open(&f);
    assert_eq!(
        a.ask(&format!("auth admin {}", f.admin.reveal())),
        "AUTH_SUCCESS.\r\n"
    );
    assert_eq!(a.ask("dropcaches"), "Caches dropped.\n");
    let deadline = Instant::now() + Duration::from_secs(10);
    while f.srv.point_count("auth.t") != 1 {
        assert!(
            Instant::now() < deadline,
            "the writer's point never arrived"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn telnet_brute_force_is_slowed_and_cut_off() {
    let f = fixture(&[]);
    let mut s = Session::open(&f);
    let started = Instant::now();
    let forged = format!("rt_{}_{}", f.read.id, "0".repeat(64));
    for i in 0..3 {
        assert_eq!(
            s.ask(&format!("auth reader {forged}")),
            "AUTH_FAIL\r\n",
            "{i}"
        );
    }
    // 250 + 500 + 1000 ms of pauses.
    assert!(
        started.elapsed() >= Duration::from_millis(1750),
        "{:?}",
        started.elapsed()
    );
    let mut rest = String::new();
    assert_eq!(
        s.r.read_line(&mut rest).unwrap_or(0),
        0,
        "still open: {rest}"
    );
}

#[test]
fn telnet_lines_pipelined_after_auth_are_served() {
    let f = fixture(&[]);
    let input = format!(
        "auth writer {}\nput auth.p 1700000000 1 h=a\nput auth.p 1700000060 2 h=a\nexit\n",
        f.write.reveal()
    );
    let out = telnet(f.srv.addr, input.as_bytes());
    assert_eq!(out, "AUTH_SUCCESS.\r\n");
    let deadline = Instant::now() + Duration::from_secs(10);
    while f.srv.point_count("auth.p") != 2 {
        assert!(Instant::now() < deadline, "{}", f.srv.point_count("auth.p"));
        std::thread::sleep(Duration::from_millis(50));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn fuzzed_authorization_headers_and_auth_lines_never_panic(
        header in "[ -~]{0,80}",
        scheme in prop::sample::select(vec!["Bearer ", "Basic ", "Token ", "", "bEaReR "]),
        line in "auth[ -~]{0,100}",
    ) {
        thread_local! {
            static F: Fixture = fixture(&[]);
        }
        F.with(|f| {
            let value = format!("{scheme}{header}");
            let (status, _) = send(f, "GET", "/api/version", "", Some(&value));
            prop_assert_eq!(status, 401);
            let out = telnet(f.srv.addr, format!("{line}\nexit\n").as_bytes());
            prop_assert!(out.starts_with("AUTH_FAIL\r\n") || out.starts_with("error: authentication required"), "{}", out);
            Ok(())
        })?;
    }
}

#[test]
fn auth_commands_add_list_rotate_and_remove_users() {
    let dir = tempfile::tempdir().unwrap();
    let add = tsdb(
        dir.path(),
        &[
            "auth",
            "add",
            "ops",
            "--roles",
            "read,admin",
            "--tenant",
            "t1",
        ],
    );
    assert_eq!(add.code, 0, "{}", add.stderr);
    let token = add.stdout.trim().to_string();
    let parsed = Token::parse(&token).expect("a token on stdout");
    assert!(add.stderr.contains("shown once"));
    let list = tsdb(dir.path(), &["auth", "list"]);
    assert!(
        list.stdout.contains("ops\t1\tt1\tread,admin\t"),
        "{}",
        list.stdout
    );
    assert!(!list.stdout.contains(&token));
    let users = Users::load(&users_file(dir.path())).unwrap();
    assert!(parsed.verify(&users.get("ops").unwrap().hash));
    let dup = tsdb(dir.path(), &["auth", "add", "ops", "--roles", "read"]);
    assert_ne!(dup.code, 0);
    assert!(dup.stderr.contains("exists"), "{}", dup.stderr);
    let bad = tsdb(dir.path(), &["auth", "add", "x", "--roles", "root"]);
    assert_ne!(bad.code, 0);
    assert!(bad.stderr.contains("unknown role"), "{}", bad.stderr);
    let rot = tsdb(dir.path(), &["auth", "rotate", "ops"]);
    assert_eq!(rot.code, 0);
    let new = Token::parse(rot.stdout.trim()).unwrap();
    let users = Users::load(&users_file(dir.path())).unwrap();
    assert!(new.verify(&users.get("ops").unwrap().hash));
    assert!(!parsed.verify(&users.get("ops").unwrap().hash));
    assert_eq!(tsdb(dir.path(), &["auth", "remove", "ops"]).code, 0);
    assert_ne!(tsdb(dir.path(), &["auth", "remove", "ops"]).code, 0);
    assert!(!tsdb(dir.path(), &["auth", "list"]).stdout.contains("ops"));
}

#[test]
fn with_authentication_off_nothing_asks_for_credentials() {
    let srv = TestServer::start(&[("tsd.core.auto_create_metrics", "true")]);
    let json = [("Content-Type", "application/json")];
    let r = http(srv.addr, "POST", "/api/put", &json, PUT.as_bytes());
    assert_eq!(r.status, 204);
    assert!(r.header("www-authenticate").is_none());
    let out = telnet(srv.addr, b"version\nauth a b\n");
    assert!(out.starts_with("net.opentsdb"), "{out}");
    assert!(out.contains("unknown command: auth"), "{out}");
}
