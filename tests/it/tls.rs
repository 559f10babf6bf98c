//! TLS on the one port with real clients (docs/security.md): curl over
//! HTTPS (with authentication on, `-u NAME:TOKEN`), Python's `ssl` for
//! telnet over TLS, plaintext still served beside it unless
//! `tsd.network.tls.required`, and certificates swapped by a reload and by
//! SIGHUP while an open TLS connection goes on working. Certificates are
//! made in the test with `openssl req`. A missing openssl, curl or
//! python3 skips a test with a printed reason, and fails it in CI.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::server::{TestServer, telnet};
use rtsdb::auth::{Roles, Users};

/// Whether `tool` runs; false (the test then skips) outside CI, a panic
/// in CI.
fn have(tool: &str) -> bool {
    // openssl knows `version`, not `--version`.
    let flag = if tool == "openssl" {
        "version"
    } else {
        "--version"
    };
    let ok = Command::new(tool)
        .arg(flag)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{tool} is needed by the TLS tests in CI"
        );
        eprintln!("skipped: {tool} not found");
    }
    ok
}

/// A self-signed certificate for localhost/127.0.0.1: (cert, key).
fn make_cert(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let cert = dir.join(format!("{name}.crt"));
    let key = dir.join(format!("{name}.key"));
    let out = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
        .arg("ec_paramgen_curve:prime256v1")
        .args(["-nodes", "-days", "2", "-subj"])
        .arg(format!("/CN=localhost/O={name}"))
        .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        // A leaf, not a CA: rustls (tsdb backup) refuses a CA certificate
        // as a server's own.
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (cert, key)
}

fn start(cert: &Path, key: &Path, extra: &[(&str, &str)]) -> TestServer {
    let data = tempfile::tempdir().unwrap();
    let (c, k) = (cert.display().to_string(), key.display().to_string());
    let mut settings = vec![
        ("tsd.network.tls.cert_file", c.as_str()),
        ("tsd.network.tls.key_file", k.as_str()),
        ("tsd.core.auto_create_metrics", "true"),
    ];
    settings.extend_from_slice(extra);
    TestServer::start_in(data, &settings)
}

/// curl over HTTPS trusting `ca`: (exit code, body).
fn curl(srv: &TestServer, ca: &Path, args: &[&str], path: &str) -> (i32, String) {
    let port = srv.addr.port();
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "20", "--cacert"])
        .arg(ca)
        .arg("--resolve")
        .arg(format!("localhost:{port}:127.0.0.1"))
        .args(args)
        .arg(format!("https://localhost:{port}{path}"))
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// Telnet over TLS with Python's `ssl`: sends each line given after the
/// port and CA file, printing the answer line of each but `put`, then for each line on stdin sends `version` again
/// on the same connection and prints the answer.
const PY_TELNET: &str = r#"
import socket, ssl, sys
ctx = ssl.create_default_context(cafile=sys.argv[2])
s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", int(sys.argv[1]))), server_hostname="localhost")
f = s.makefile("rwb")
def ask(line):
    f.write(line.encode() + b"\n"); f.flush()
    if not line.startswith("put "):  # a stored point is not answered
        print(f.readline().decode().strip(), flush=True)
    if line == "version":  # its second line: "Built on ..."
        f.readline()
for line in sys.argv[3:]:
    ask(line)
for _ in sys.stdin:
    ask("version")
"#;

#[test]
fn http_and_telnet_over_tls_share_the_port_with_plaintext() {
    if !(have("openssl") && have("curl") && have("python3")) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = make_cert(dir.path(), "one");
    let mut srv = start(&cert, &key, &[]);
    let (code, body) = curl(&srv, &cert, &[], "/api/version");
    assert_eq!(code, 0, "{body}");
    assert!(body.contains("\"version\""), "{body}");
    let (code, body) = curl(
        &srv,
        &cert,
        &[
            "-H",
            "Content-Type: application/json",
            "--data",
            r#"[{"metric":"tls.m","timestamp":1700000000,"value":1,"tags":{"h":"a"}}]"#,
        ],
        "/api/put",
    );
    assert_eq!(code, 0, "{body}");
    let out = Command::new("python3")
        .args(["-c", PY_TELNET, &srv.addr.port().to_string()])
        .arg(&cert)
        .args(["put tls.m 1700000060 2 h=a", "version"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("net.opentsdb"), "{text}");
    // Plaintext telnet and HTTP still answer on the same port.
    assert!(telnet(srv.addr, b"version\n").starts_with("net.opentsdb"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while srv.point_count("tls.m") != 2 {
        assert!(Instant::now() < deadline, "{}", srv.point_count("tls.m"));
        std::thread::sleep(Duration::from_millis(50));
    }
    srv.stop();
}

#[test]
fn tls_required_closes_plaintext_and_auth_works_over_tls() {
    if !(have("openssl") && have("curl")) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = make_cert(dir.path(), "req");
    let data = tempfile::tempdir().unwrap();
    let mut users = Users::default();
    let token = users
        .add("reader", Roles::parse_list("read").unwrap(), "default")
        .unwrap()
        .reveal();
    users.save(&data.path().join("users")).unwrap();
    let (c, k) = (cert.display().to_string(), key.display().to_string());
    let srv = TestServer::start_in(
        data,
        &[
            ("tsd.network.tls.cert_file", &c),
            ("tsd.network.tls.key_file", &k),
            ("tsd.network.tls.required", "true"),
            ("tsd.core.authentication.enable", "true"),
        ],
    );
    // Plaintext is closed unanswered (the write may already fail).
    let mut s = std::net::TcpStream::connect(srv.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let _ = s.write_all(b"version\n");
    let mut answer = Vec::new();
    let _ = std::io::Read::read_to_end(&mut s, &mut answer);
    assert!(answer.is_empty(), "{}", String::from_utf8_lossy(&answer));
    let (code, body) = curl(
        &srv,
        &cert,
        &["-o", "/dev/null", "-w", "%{http_code}"],
        "/api/stats",
    );
    assert_eq!((code, body.as_str()), (0, "401"));
    let user = format!("reader:{token}");
    let (code, body) = curl(&srv, &cert, &["-u", &user], "/api/stats");
    assert_eq!(code, 0, "{body}");
    assert!(body.starts_with('['), "{body}");
}

#[test]
fn certificates_are_reloaded_without_dropping_connections() {
    if !(have("openssl") && have("curl") && have("python3")) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = make_cert(dir.path(), "first");
    let live = (dir.path().join("live.crt"), dir.path().join("live.key"));
    std::fs::copy(&cert, &live.0).unwrap();
    std::fs::copy(&key, &live.1).unwrap();
    let srv = start(&live.0, &live.1, &[]);
    // An open telnet-over-TLS connection, kept across the reloads.
    let mut py = Command::new("python3")
        .args(["-c", PY_TELNET, &srv.addr.port().to_string()])
        .arg(&cert)
        .arg("version")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut py_in = py.stdin.take().unwrap();
    let mut py_out = BufReader::new(py.stdout.take().unwrap());
    let mut line = String::new();
    py_out.read_line(&mut line).unwrap();
    assert!(line.starts_with("net.opentsdb"), "{line}");

    let (second, second_key) = make_cert(dir.path(), "second");
    std::fs::copy(&second, &live.0).unwrap();
    std::fs::copy(&second_key, &live.1).unwrap();
    // Still the first certificate until reloaded.
    assert_eq!(curl(&srv, &cert, &[], "/api/version").0, 0);
    assert!(srv.state.reload_tls().unwrap());
    assert_ne!(curl(&srv, &cert, &[], "/api/version").0, 0);
    assert_eq!(curl(&srv, &second, &[], "/api/version").0, 0);

    // SIGHUP does the same (the TSD's handler is installed: TLS is on).
    let (third, third_key) = make_cert(dir.path(), "third");
    std::fs::copy(&third, &live.0).unwrap();
    std::fs::copy(&third_key, &live.1).unwrap();
    unsafe {
        libc::kill(libc::getpid(), libc::SIGHUP);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while curl(&srv, &third, &[], "/api/version").0 != 0 {
        assert!(Instant::now() < deadline, "SIGHUP did not reload");
        std::thread::sleep(Duration::from_millis(100));
    }
    // A key that does not match leaves the pair in use.
    std::fs::copy(&key, &live.1).unwrap();
    assert!(srv.state.reload_tls().is_err());
    assert_eq!(curl(&srv, &third, &[], "/api/version").0, 0);

    // The connection opened before both reloads still answers.
    writeln!(py_in, "again").unwrap();
    line.clear();
    py_out.read_line(&mut line).unwrap();
    assert!(line.starts_with("net.opentsdb"), "{line}");
    drop(py_in);
    let _ = py.wait();
}

#[test]
fn backup_reaches_a_tsd_over_tls_with_a_token() {
    if !have("openssl") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = make_cert(dir.path(), "backup");
    let data = tempfile::tempdir().unwrap();
    let mut users = Users::default();
    let admin = users
        .add("ops", Roles::parse_list("admin").unwrap(), "default")
        .unwrap()
        .reveal();
    let reader = users
        .add("viewer", Roles::parse_list("read").unwrap(), "default")
        .unwrap()
        .reveal();
    users.save(&data.path().join("users")).unwrap();
    let target = data.path().join("backups").join("one");
    let (c, k) = (cert.display().to_string(), key.display().to_string());
    let srv = TestServer::start_in(
        data,
        &[
            ("tsd.network.tls.cert_file", &c),
            ("tsd.network.tls.key_file", &k),
            ("tsd.core.authentication.enable", "true"),
            ("tsd.backup.enable", "true"),
        ],
    );
    let addr = srv.addr.to_string();
    let cli = tempfile::tempdir().unwrap();
    let ask = |token: &str, to: &Path| {
        crate::common::cli::tsdb(
            cli.path(),
            &[
                "backup",
                "--tsd",
                &addr,
                "--ca-file",
                &c,
                "--token",
                token,
                &to.display().to_string(),
            ],
        )
    };
    let refused = ask(&reader, &target);
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    assert!(refused.stderr.contains("403"), "{}", refused.stderr);
    let made = ask(&admin, &target);
    assert_eq!(made.code, 0, "{}", made.stderr);
    assert!(
        made.stdout.starts_with("backup written to"),
        "{}",
        made.stdout
    );
}
