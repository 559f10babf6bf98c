//! Credentials as clients send them, read without a server so they can be
//! tested and fuzzed alone: HTTP's `Authorization` header (`Bearer
//! TOKEN`, `Basic base64(NAME:TOKEN)`, InfluxDB 2.x's `Token TOKEN` and
//! its 1.x-compatible `Token NAME:TOKEN`), InfluxDB 1.x's `u`/`p` query
//! parameters, and telnet's `auth NAME TOKEN` line (also OpenTSDB 2.4's
//! `auth basic NAME TOKEN`).

use base64::Engine;

use super::token::MAX_TOKEN_LEN;

/// A header longer than this is refused unread.
const MAX_HEADER_LEN: usize = 512;

/// What a client claims to be: a token, and the name it gave with it, if
/// any (a name that does not match the token's user fails).
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub name: Option<String>,
    pub token: String,
}

impl std::fmt::Debug for Credentials {
    // Tokens never reach a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Credentials {{ name: {:?}, token: <hidden> }}",
            self.name
        )
    }
}

/// Why credentials could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    #[error("unsupported authorization scheme (use Bearer, Basic or Token)")]
    Scheme,
    #[error("malformed credentials")]
    Malformed,
}

impl Credentials {
    /// The value of an `Authorization` header.
    pub fn from_authorization(value: &[u8]) -> Result<Credentials, CredentialError> {
        if value.len() > MAX_HEADER_LEN {
            return Err(CredentialError::Malformed);
        }
        let value = std::str::from_utf8(value).map_err(|_| CredentialError::Malformed)?;
        let (scheme, rest) = value
            .trim()
            .split_once(' ')
            .ok_or(CredentialError::Malformed)?;
        let rest = rest.trim();
        if scheme.eq_ignore_ascii_case("bearer") {
            Credentials::token_only(rest)
        } else if scheme.eq_ignore_ascii_case("basic") {
            let raw = base64::engine::general_purpose::STANDARD
                .decode(rest)
                .map_err(|_| CredentialError::Malformed)?;
            let text = String::from_utf8(raw).map_err(|_| CredentialError::Malformed)?;
            Credentials::name_and_token(&text)
        } else if scheme.eq_ignore_ascii_case("token") {
            if rest.contains(':') {
                Credentials::name_and_token(rest)
            } else {
                Credentials::token_only(rest)
            }
        } else {
            Err(CredentialError::Scheme)
        }
    }

    /// InfluxDB 1.x's `u` and `p` query parameters.
    pub fn from_user_password(user: &str, password: &str) -> Result<Credentials, CredentialError> {
        Credentials::checked(Some(user), password)
    }

    /// The words of a telnet `auth` line, `auth` included: `auth NAME
    /// TOKEN`, or OpenTSDB 2.4's `auth basic NAME TOKEN`.
    pub fn from_telnet(words: &[&str]) -> Result<Credentials, CredentialError> {
        match words {
            [_, name, token] => Credentials::checked(Some(name), token),
            [_, scheme, name, token] if scheme.eq_ignore_ascii_case("basic") => {
                Credentials::checked(Some(name), token)
            }
            _ => Err(CredentialError::Malformed),
        }
    }

    fn token_only(token: &str) -> Result<Credentials, CredentialError> {
        Credentials::checked(None, token)
    }

    fn name_and_token(text: &str) -> Result<Credentials, CredentialError> {
        let (name, token) = text.split_once(':').ok_or(CredentialError::Malformed)?;
        Credentials::checked(Some(name), token)
    }

    fn checked(name: Option<&str>, token: &str) -> Result<Credentials, CredentialError> {
        if token.is_empty() || token.len() > MAX_TOKEN_LEN {
            return Err(CredentialError::Malformed);
        }
        if name.is_some_and(|n| n.is_empty() || n.len() > 64) {
            return Err(CredentialError::Malformed);
        }
        Ok(Credentials {
            name: name.map(str::to_string),
            token: token.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(s: &str) -> Vec<u8> {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(s)
        )
        .into_bytes()
    }

    #[test]
    fn each_scheme_gives_the_token_and_the_name_if_one_was_sent() {
        let c = Credentials::from_authorization(b"Bearer rt_1_ab").unwrap();
        assert_eq!((c.name, c.token.as_str()), (None, "rt_1_ab"));
        let c = Credentials::from_authorization(&basic("alice:rt_1_ab")).unwrap();
        assert_eq!(
            (c.name.as_deref(), c.token.as_str()),
            (Some("alice"), "rt_1_ab")
        );
        let c = Credentials::from_authorization(b"token alice:rt_1_ab").unwrap();
        assert_eq!(c.name.as_deref(), Some("alice"));
        let c = Credentials::from_authorization(b"Token rt_1_ab").unwrap();
        assert_eq!(c.name, None);
        let c = Credentials::from_telnet(&["auth", "basic", "bob", "rt_2_cd"]).unwrap();
        assert_eq!(
            (c.name.as_deref(), c.token.as_str()),
            (Some("bob"), "rt_2_cd")
        );
        assert!(Credentials::from_telnet(&["auth", "bob", "rt_2_cd"]).is_ok());
    }

    #[test]
    fn malformed_headers_and_lines_are_errors() {
        assert_eq!(
            Credentials::from_authorization(b"Digest x"),
            Err(CredentialError::Scheme)
        );
        for bad in [
            &b"Bearer"[..],
            b"Bearer ",
            b"Basic !!!",
            b"\xff\xfe",
            &basic("no-colon"),
            &basic(":rt_1_ab"),
        ] {
            assert_eq!(
                Credentials::from_authorization(bad),
                Err(CredentialError::Malformed),
                "{bad:?}"
            );
        }
        assert!(Credentials::from_authorization(&vec![b'a'; 1000]).is_err());
        assert!(Credentials::from_telnet(&["auth"]).is_err());
        assert!(Credentials::from_telnet(&["auth", "a", "b", "c", "d"]).is_err());
    }
}
