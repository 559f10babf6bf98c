//! `tsdb auth`: the users a TSD with `tsd.core.authentication.enable`
//! accepts, kept in the users file (docs/security.md, docs/format/users.md).
//! The commands work on the file directly, so whoever may write it is an
//! administrator by nature; each change is logged on the audit target.
//! Running TSDs pick changes up within about a second.

use std::io::Write;

use clap::{Args, Subcommand};

use super::Context;
use crate::auth::{AUDIT_TARGET, AuthOptions, DEFAULT_TENANT, Roles, Token, Users};

#[derive(Debug, Args)]
pub struct AuthArgs {
    #[command(subcommand)]
    pub command: AuthCommand,
}

#[derive(Debug, Subcommand)]
pub enum AuthCommand {
    /// Create a user and print its token (shown this once only).
    Add {
        name: String,
        /// Comma-separated: read, write, admin.
        #[arg(long, value_name = "ROLES")]
        roles: String,
        /// The user's tenant (tenants are not isolated yet).
        #[arg(long, value_name = "T", default_value = DEFAULT_TENANT)]
        tenant: String,
    },
    /// List users: name, id, tenant, roles, when their token was issued.
    List,
    /// Remove a user; its token stops working.
    Remove { name: String },
    /// Give a user a new token (printed once); the old one stops working.
    Rotate { name: String },
}

pub(crate) fn run(
    ctx: &Context,
    args: AuthArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<i32> {
    let path = AuthOptions::from_config(&ctx.config).users_file;
    let mut users = Users::load(&path)?;
    let print_token = |out: &mut dyn Write, err: &mut dyn Write, t: &Token| {
        writeln!(out, "{}", t.reveal())?;
        writeln!(
            err,
            "This token is shown once; only its hash is kept in {}.",
            path.display()
        )?;
        anyhow::Ok(())
    };
    match args.command {
        AuthCommand::Add {
            name,
            roles,
            tenant,
        } => {
            let roles = Roles::parse_list(&roles)?;
            let token = users.add(&name, roles, &tenant)?;
            users.save(&path)?;
            tracing::info!(target: AUDIT_TARGET, action = "user.add", user = %name, %roles, %tenant, by = "cli", "user added");
            print_token(out, err, &token)?;
        }
        AuthCommand::List => {
            writeln!(out, "name\tid\ttenant\troles\tissued")?;
            for u in users.iter() {
                writeln!(
                    out,
                    "{}\t{}\t{}\t{}\t{}",
                    u.name, u.id, u.tenant, u.roles, u.issued
                )?;
            }
        }
        AuthCommand::Remove { name } => {
            users.remove(&name)?;
            users.save(&path)?;
            tracing::info!(target: AUDIT_TARGET, action = "user.remove", user = %name, by = "cli", "user removed");
        }
        AuthCommand::Rotate { name } => {
            let token = users.rotate(&name)?;
            users.save(&path)?;
            tracing::info!(target: AUDIT_TARGET, action = "user.rotate", user = %name, by = "cli", "token rotated");
            print_token(out, err, &token)?;
        }
    }
    Ok(0)
}
