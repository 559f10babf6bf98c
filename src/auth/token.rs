//! Tokens: `rt_<id>_<secret>`, the user's id in decimal and 32 random
//! bytes in hex. The id says which user's hash to check, so a check costs
//! one argon2 verification, never a search through every user's hash.
//! Only the secret's argon2id hash (PHC string, salt and parameters
//! included) is stored.

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use std::fmt;

use super::AuthError;

const PREFIX: &str = "rt_";
const SECRET_BYTES: usize = 32;
/// A token longer than this is not one of ours; it is refused before any
/// work is done on it.
pub const MAX_TOKEN_LEN: usize = 128;

/// A token as a client presented it, split into its id and secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Token {
    pub id: u64,
    secret: String,
}

impl fmt::Debug for Token {
    // The secret never reaches a log line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Token {{ id: {}, secret: <hidden> }}", self.id)
    }
}

impl Token {
    /// A new token for user `id` from the system's random source.
    pub fn generate(id: u64) -> Result<Token, AuthError> {
        let mut bytes = [0u8; SECRET_BYTES];
        getrandom::getrandom(&mut bytes).map_err(|e| AuthError::Random(e.to_string()))?;
        let mut secret = String::with_capacity(SECRET_BYTES * 2);
        for b in bytes {
            secret.push_str(&format!("{b:02x}"));
        }
        Ok(Token { id, secret })
    }

    /// Reads `rt_<id>_<secret>`; `None` for anything else.
    pub fn parse(text: &str) -> Option<Token> {
        if text.len() > MAX_TOKEN_LEN {
            return None;
        }
        let rest = text.strip_prefix(PREFIX)?;
        let (id, secret) = rest.split_once('_')?;
        if id.is_empty() || id.len() > 20 || !id.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        if secret.len() != SECRET_BYTES * 2 || !secret.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        Some(Token {
            id: id.parse().ok()?,
            secret: secret.to_string(),
        })
    }

    /// The secret part, what the stored hash is of.
    pub(crate) fn secret(&self) -> &[u8] {
        self.secret.as_bytes()
    }

    /// The token as the user is given it (printed once).
    pub fn reveal(&self) -> String {
        format!("{PREFIX}{}_{}", self.id, self.secret)
    }

    /// The argon2id hash of the secret, with a fresh salt, as a PHC string.
    pub fn hash(&self) -> Result<String, AuthError> {
        let mut salt = [0u8; 16];
        getrandom::getrandom(&mut salt).map_err(|e| AuthError::Random(e.to_string()))?;
        let salt = SaltString::encode_b64(&salt).map_err(|e| AuthError::Hash(e.to_string()))?;
        Argon2::default()
            .hash_password(self.secret(), &salt)
            .map(|h| h.to_string())
            .map_err(|e| AuthError::Hash(e.to_string()))
    }

    /// Whether the secret matches a stored PHC hash (argon2's comparison
    /// of the computed and stored digests is constant-time). A hash that
    /// does not parse matches nothing.
    pub fn verify(&self, phc: &str) -> bool {
        match PasswordHash::new(phc) {
            Ok(h) => Argon2::default().verify_password(self.secret(), &h).is_ok(),
            Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_reads_back_and_verifies_only_against_its_own_hash() {
        let t = Token::generate(7).unwrap();
        let text = t.reveal();
        assert!(text.starts_with("rt_7_"));
        let back = Token::parse(&text).unwrap();
        assert_eq!(back, t);
        let hash = t.hash().unwrap();
        assert!(hash.starts_with("$argon2id$"));
        assert!(back.verify(&hash));
        let other = Token::generate(7).unwrap();
        assert!(!other.verify(&hash));
        assert!(!t.verify("not a hash"));
    }

    #[test]
    fn malformed_tokens_are_refused() {
        let good = Token::generate(1).unwrap().reveal();
        for bad in [
            "",
            "rt_",
            "rt__abc",
            "rt_x_00",
            &good[..good.len() - 1],
            &format!("{good}0"),
            &good.replace("rt_", "RT_"),
            "rt_99999999999999999999999_00",
        ] {
            assert!(Token::parse(bad).is_none(), "{bad}");
        }
    }
}
