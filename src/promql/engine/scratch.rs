use super::Engine;
use crate::promql::memory::MemoryStorage;
use crate::promql::value::QueryValue;

#[test]
fn scratch() {
    let dir = "/tmp/eng-prom";
    let base: i64 = std::fs::read_to_string(format!("{dir}/base")).unwrap().trim().parse().unwrap();
    let mut s = MemoryStorage::new();
    for line in std::fs::read_to_string(format!("{dir}/om.txt")).unwrap().lines() {
        if line.starts_with('#') { continue; }
        let (head, rest) = line.split_once('}').unwrap();
        let (name, labs) = head.split_once('{').unwrap();
        let mut pairs = vec![("__name__".to_string(), name.to_string())];
        for kv in labs.split(',') { let (k, v) = kv.split_once('=').unwrap(); pairs.push((k.to_string(), v.trim_matches('"').to_string())); }
        let mut it = rest.split_whitespace();
        let v: f64 = match it.next().unwrap() { "NaN" => f64::NAN, x => x.parse().unwrap() };
        let t: i64 = it.next().unwrap().parse().unwrap();
        let p: Vec<(&str, &str)> = pairs.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        s.add_series(&p, &[(t * 1000, v)]);
    }
    for off in [60i64, 600] {
    let t = (base + off) * 1000;
    let mut out = String::new();
    for q in std::fs::read_to_string(format!("{dir}/queries.txt")).unwrap().lines() {
        let (q, res) = match q.strip_prefix("R ") {
            Some(r) => (q, Engine::default().range(&s, r, (base - 120) * 1000, (base + 1000) * 1000, 60_000)),
            None => (q, Engine::default().instant(&s, q, t)),
        };
        match res {
            Ok(QueryValue::Vector(v)) => { let x: Vec<String> = v.iter().map(|s| format!("{}={}", s.labels, super::aggregate::go_float(s.v))).collect(); out += &format!("Q {q} \n  {}\n", x.join(" | ")); }
            Ok(QueryValue::Matrix(m)) => { let x: Vec<String> = m.iter().map(|s| format!("{}={:?}", s.labels, s.samples.iter().map(|p| (p.t/1000 - base, super::aggregate::go_float(p.v))).collect::<Vec<_>>())).collect(); out += &format!("Q {q} \n  {}\n", x.join(" | ")); }
            Ok(QueryValue::Scalar(v)) => out += &format!("Q {q} \n  scalar {}\n", super::aggregate::go_float(v.v)),
            Ok(v) => out += &format!("Q {q} \n  {v:?}\n"),
            Err(e) => out += &format!("Q {q} \n  ERR {} {}\n", e.kind.as_str(), e.message),
        }
    }
    std::fs::write(format!("{dir}/mine{off}.txt"), out).unwrap();
    }
}
