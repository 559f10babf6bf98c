//! Roles and the sets of them a user holds. Three roles, none implying
//! another: an ingest-only collector has `write` and cannot read, a
//! dashboard has `read` and cannot write (docs/security.md has the table
//! of which request needs which role).

use std::fmt;

use super::AuthError;

/// What a request needs and a user may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Queries, suggest, search, meta reads, `/q`, the page's data.
    Read,
    /// Points from every protocol, annotations.
    Write,
    /// UID assign/rename/delete, delete queries, trees, caches, shutdown,
    /// backup, configuration.
    Admin,
}

impl Role {
    /// Every role, in the order they are written.
    pub const ALL: [Role; 3] = [Role::Read, Role::Write, Role::Admin];

    pub fn name(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Write => "write",
            Role::Admin => "admin",
        }
    }

    fn bit(self) -> u8 {
        match self {
            Role::Read => 1,
            Role::Write => 2,
            Role::Admin => 4,
        }
    }

    /// A role's name as the CLI and the users file write it.
    pub fn parse(s: &str) -> Result<Role, AuthError> {
        Role::ALL
            .into_iter()
            .find(|r| r.name() == s.trim().to_ascii_lowercase())
            .ok_or_else(|| AuthError::BadRole(s.to_string()))
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a request or command needs before it is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Served to anyone: it shows no data and changes nothing (the page's
    /// static files, health checks when configured open).
    Open,
    /// Served to a user holding this role.
    Role(Role),
}

/// The roles one user holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Roles(u8);

impl Roles {
    pub fn has(self, role: Role) -> bool {
        self.0 & role.bit() != 0
    }

    pub fn with(self, role: Role) -> Roles {
        Roles(self.0 | role.bit())
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Each role held, in [`Role::ALL`]'s order.
    pub fn iter(self) -> impl Iterator<Item = Role> {
        Role::ALL.into_iter().filter(move |r| self.has(*r))
    }

    /// `read,write,admin` (any order, at least one role).
    pub fn parse_list(s: &str) -> Result<Roles, AuthError> {
        let mut roles = Roles::default();
        for part in s.split(',').filter(|p| !p.trim().is_empty()) {
            roles = roles.with(Role::parse(part)?);
        }
        if roles.is_empty() {
            return Err(AuthError::NoRoles);
        }
        Ok(roles)
    }
}

impl FromIterator<Role> for Roles {
    fn from_iter<I: IntoIterator<Item = Role>>(iter: I) -> Roles {
        iter.into_iter().fold(Roles::default(), Roles::with)
    }
}

impl fmt::Display for Roles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.iter().map(Role::name).collect();
        f.write_str(&names.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_of_roles_reads_back_as_written() {
        let r = Roles::parse_list("admin, read").unwrap();
        assert!(r.has(Role::Read) && r.has(Role::Admin) && !r.has(Role::Write));
        assert_eq!(r.to_string(), "read,admin");
        assert!(matches!(Roles::parse_list(""), Err(AuthError::NoRoles)));
        assert!(matches!(
            Roles::parse_list("read,root"),
            Err(AuthError::BadRole(r)) if r == "root"
        ));
    }
}
