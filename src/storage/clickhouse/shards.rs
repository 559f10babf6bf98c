//! Which shard holds a key, and which configured endpoints are that
//! shard's replicas, so that a read of known keys asks the shard's local
//! table directly.
//!
//! A select through a `Distributed` table asks every shard (ClickHouse
//! 18.16 cannot skip shards by the sharding key) and merges their
//! answers: a one-key read took ~5–9 ms that way where the shard's local
//! table answered in ~2–3 ms (docs/scale-out.md "Measured"). The local
//! read must go where the `Distributed` table would have gone, or a row
//! just inserted would be missed while replication catches up: inserts go
//! through the `Distributed` table of the endpoint statements go to first
//! (the last that answered), which writes its own shard's rows locally
//! (`prefer_localhost_replica`) and each other shard's to its first live
//! replica in `remote_servers` order (`load_balancing = in_order`). So a
//! direct read goes to that endpoint for its own shard, and to the first
//! replica in `remote_servers` order that answers for the others; a shard
//! whose replicas are not all among the configured endpoints is read
//! through the `Distributed` table as before.

use std::collections::HashMap;
use std::hash::Hasher;

use super::http::Http;

/// The shards of the cluster, in `remote_servers` order, as far as the
/// configured endpoints reach them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shards {
    /// Per shard: its replicas as indexes into the configured endpoints,
    /// in `remote_servers` order; `None` when one of its replicas is not
    /// a configured endpoint.
    replicas: Vec<Option<Vec<usize>>>,
    /// The shard of each weight slot: the `Distributed` table sends a row
    /// to `slots[sipHash64(sharding input) % slots.len()]`.
    slots: Vec<usize>,
    /// The shard each configured endpoint is a replica of.
    shard_of_endpoint: Vec<Option<usize>>,
}

/// One replica in `system.clusters`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Member {
    pub(crate) shard_num: u32,
    pub(crate) weight: u32,
    /// What identifies the server: its `shard` and `replica` macros,
    /// which every server of a cluster rtsdb's tables live on has (the
    /// replicated tables' paths use them).
    pub(crate) identity: String,
}

/// The statement that tells a server's identity ([`Member::identity`]).
const IDENTITY: &str = "SELECT macro, substitution FROM system.macros WHERE macro IN ('shard', 'replica') ORDER BY macro";

/// ClickHouse's `sipHash64` of `bytes`: SipHash-2-4 with a zero key.
pub(crate) fn sip_hash64(bytes: &[u8]) -> u64 {
    let mut h = siphasher::sip::SipHasher24::new_with_keys(0, 0);
    h.write(bytes);
    h.finish()
}

impl Shards {
    /// The map from `members` (`system.clusters` rows of the cluster, any
    /// order) and the identity each configured endpoint answered with
    /// (`None`: it did not answer). `None` when no shard can be read
    /// directly.
    pub(crate) fn new(members: &[Member], endpoints: &[Option<String>]) -> Option<Shards> {
        let mut members = members.to_vec();
        members.sort_by_key(|m| m.shard_num);
        let mut shard_nums: Vec<u32> = members.iter().map(|m| m.shard_num).collect();
        shard_nums.dedup();
        // Two endpoints with one identity (or a member none answers for)
        // cannot be told apart: such a shard is read as before.
        let mut by_identity: HashMap<&str, Option<usize>> = HashMap::new();
        for (i, id) in endpoints.iter().enumerate() {
            if let Some(id) = id {
                by_identity
                    .entry(id.as_str())
                    .and_modify(|e| *e = None)
                    .or_insert(Some(i));
            }
        }
        let mut replicas = Vec::new();
        let mut slots = Vec::new();
        let mut shard_of_endpoint = vec![None; endpoints.len()];
        for (shard, num) in shard_nums.iter().enumerate() {
            let of_shard: Vec<&Member> = members.iter().filter(|m| m.shard_num == *num).collect();
            let weight = of_shard.first().map_or(0, |m| m.weight);
            slots.extend(std::iter::repeat_n(shard, weight as usize));
            let found: Option<Vec<usize>> = of_shard
                .iter()
                .map(|m| by_identity.get(m.identity.as_str()).copied().flatten())
                .collect();
            if let Some(found) = &found {
                for &e in found {
                    shard_of_endpoint[e] = Some(shard);
                }
            }
            replicas.push(found);
        }
        if slots.is_empty() || replicas.iter().all(Option::is_none) {
            return None;
        }
        Some(Shards {
            replicas,
            slots,
            shard_of_endpoint,
        })
    }

    /// Asks the cluster: its members (through any endpoint), each
    /// member's identity (through `remote()` from that endpoint), and each
    /// configured endpoint's own. `None` when that fails: every read then
    /// goes through the `Distributed` tables.
    pub(crate) fn discover(http: &Http, cluster: &str) -> Option<Shards> {
        let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
        let listed = http
            .post(
                "",
                &[],
                format!(
                    "SELECT shard_num, shard_weight, host_address, port FROM system.clusters \
                     WHERE cluster = '{cluster}' ORDER BY shard_num, replica_num"
                )
                .as_bytes(),
            )
            .map(text);
        let listed = match listed {
            Ok(t) => t,
            Err(e) => {
                tracing::info!(error = %e, "cannot list the ClickHouse cluster's shards; reading through the Distributed tables");
                return None;
            }
        };
        let mut members = Vec::new();
        for line in listed.lines() {
            let f: Vec<&str> = line.split('\t').collect();
            let [shard, weight, host, port] = f[..] else {
                return None;
            };
            let host = if host.contains(':') {
                format!("[{host}]")
            } else {
                host.to_string()
            };
            let sql = IDENTITY.replace(
                "system.macros",
                &format!("remote('{host}:{port}', system.macros)"),
            );
            // A member that is down now leaves its shard read as before.
            let Ok(identity) = http.post("", &[], sql.as_bytes()).map(text) else {
                tracing::info!(member = %format!("{host}:{port}"), "a ClickHouse member did not answer; its shard is read through the Distributed tables");
                continue;
            };
            members.push(Member {
                shard_num: shard.parse().ok()?,
                weight: weight.parse().ok()?,
                identity,
            });
        }
        let identities: Vec<Option<String>> = (0..http.endpoints().len())
            .map(|i| {
                http.post_first(&[i], "", &[], IDENTITY.as_bytes())
                    .ok()
                    .map(|(_, b)| text(b))
            })
            .collect();
        let shards = Shards::new(&members, &identities);
        tracing::debug!(?shards, "ClickHouse shards read directly");
        shards
    }

    /// The shard the `Distributed` table puts a row whose sharding input
    /// (the `series` column) is `series` in.
    pub(crate) fn shard_of(&self, series: &[u8]) -> usize {
        self.slots[(sip_hash64(series) % self.slots.len() as u64) as usize]
    }

    /// The shard endpoint `endpoint` is a replica of, if known.
    pub(crate) fn shard_of_endpoint(&self, endpoint: usize) -> Option<usize> {
        self.shard_of_endpoint.get(endpoint).copied().flatten()
    }

    /// The endpoints to read `shard`'s local table from, in the order to
    /// try them, when `preferred` is the endpoint statements go to first;
    /// `None` when the shard must be read through the `Distributed`
    /// table.
    pub(crate) fn read_order(&self, shard: usize, preferred: usize) -> Option<Vec<usize>> {
        let replicas = self.replicas.get(shard)?.as_ref()?;
        let mut order = Vec::with_capacity(replicas.len());
        // The `Distributed` table of the preferred endpoint reads and
        // writes its own shard locally.
        if self.shard_of_endpoint(preferred) == Some(shard) {
            order.push(preferred);
        }
        order.extend(replicas.iter().copied().filter(|&e| e != preferred));
        Some(order)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sip_hash64_is_clickhouses() {
        // `SELECT sipHash64('abc'), sipHash64('')` on ClickHouse 18.16.
        assert_eq!(sip_hash64(b"abc"), 4596069200710135518);
        assert_eq!(sip_hash64(b""), 2202906307356721367);
    }

    fn member(shard_num: u32, weight: u32, identity: &str) -> Member {
        Member {
            shard_num,
            weight,
            identity: identity.into(),
        }
    }

    #[test]
    fn shards_follow_remote_servers_and_weights() {
        let members = [
            member(2, 2, "s2r1"),
            member(1, 1, "s1r1"),
            member(1, 1, "s1r2"),
            member(2, 2, "s2r2"),
        ];
        // Endpoints configured in another order than remote_servers.
        let endpoints = ["s2r2", "s1r1", "s2r1", "s1r2"].map(|s| Some(s.to_string()));
        let shards = Shards::new(&members, &endpoints).unwrap();
        assert_eq!(shards.slots, vec![0, 1, 1]);
        // Preferred endpoint in shard 1 (index 1): read locally there.
        assert_eq!(shards.read_order(0, 1), Some(vec![1, 3]));
        // Another shard: its replicas in remote_servers order.
        assert_eq!(shards.read_order(1, 1), Some(vec![2, 0]));
        // Preferred endpoint is shard 2's second replica.
        assert_eq!(shards.read_order(1, 0), Some(vec![0, 2]));
        for series in [&b"a"[..], b"series", b""] {
            let slot = (sip_hash64(series) % 3) as usize;
            assert_eq!(shards.shard_of(series), [0, 1, 1][slot]);
        }
    }

    #[test]
    fn a_shard_not_wholly_configured_is_read_as_before() {
        let members = [
            member(1, 1, "s1r1"),
            member(1, 1, "s1r2"),
            member(2, 1, "s2r1"),
            member(2, 1, "s2r2"),
        ];
        let endpoints = [
            Some("s1r1".to_string()),
            Some("s1r2".into()),
            Some("s2r2".into()),
            None,
        ];
        let shards = Shards::new(&members, &endpoints).unwrap();
        assert_eq!(shards.read_order(0, 0), Some(vec![0, 1]));
        assert_eq!(shards.read_order(1, 0), None);
        // Nothing mapped, or two endpoints claiming one identity.
        assert_eq!(Shards::new(&members, &[None, None]), None);
        let twins = [Some("s1r1".to_string()), Some("s1r1".into())];
        assert_eq!(Shards::new(&members[..2], &twins), None);
    }
}
