//! The postgres plugin's monitoring role: with `--postgres-admin-user`, the installer logs in
//! as that administrator and makes sure the role the broker's check uses exists, may log in,
//! and is a member of `pg_monitor` (the statistics views, replication state and locks without
//! superuser rights). Asked before it is told, so a re-run changes nothing.

use std::time::Duration;

use tokio_postgres::NoTls;

use crate::report::Outcome;

/// How long the administrator's session may take, connection included.
const SESSION_TIMEOUT_MS: u64 = 10_000;
/// Longest role name PostgreSQL keeps (NAMEDATALEN − 1).
const ROLE_BYTES_MAX: usize = 63;

/// Who logs in to create the role.
pub struct Admin<'a> {
    /// The server, `host:port`.
    pub target: &'a str,
    pub user: &'a str,
    pub password: Option<&'a str>,
}

/// A role name as a quoted SQL identifier; names outside letters, digits and `_` are refused
/// (the role is also written into the check's config and shown in reports).
fn identifier(role: &str) -> Result<String, String> {
    let ok = !role.is_empty()
        && role.len() <= ROLE_BYTES_MAX
        && role.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !ok {
        return Err(format!(
            "--postgres-user {role}: use 1 to {ROLE_BYTES_MAX} letters, digits or `_`"
        ));
    }
    Ok(format!("\"{role}\""))
}

/// Ensures `role` exists with LOGIN and membership in `pg_monitor`.
pub fn ensure_monitoring_role(admin: &Admin, role: &str, dry_run: bool) -> Result<Outcome, String> {
    let quoted = identifier(role)?;
    let (host, port) = admin
        .target
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
        .ok_or_else(|| format!("--postgres-target {}: expected HOST:PORT", admin.target))?;
    let mut config = tokio_postgres::Config::new();
    config
        .host(host)
        .port(port)
        .user(admin.user)
        .dbname("postgres")
        .application_name("strata install")
        .connect_timeout(Duration::from_millis(SESSION_TIMEOUT_MS));
    if let Some(p) = admin.password {
        config.password(p);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting the PostgreSQL client: {e}"))?;
    let session = async {
        let (client, connection) = config
            .connect(NoTls)
            .await
            .map_err(|e| format!("PostgreSQL {} as {}: {e}", admin.target, admin.user))?;
        let task = tokio::spawn(connection);
        let outcome = converge(&client, role, &quoted, dry_run).await;
        drop(client);
        let _ = task.await;
        outcome
    };
    runtime.block_on(async {
        tokio::time::timeout(Duration::from_millis(SESSION_TIMEOUT_MS), session)
            .await
            .map_err(|_| format!("PostgreSQL {}: no answer within 10 s", admin.target))?
    })
}

async fn converge(
    client: &tokio_postgres::Client,
    role: &str,
    quoted: &str,
    dry_run: bool,
) -> Result<Outcome, String> {
    let sql_error = |e: tokio_postgres::Error| match e.as_db_error() {
        Some(db) => format!("PostgreSQL: {}", db.message()),
        None => format!("PostgreSQL: {e}"),
    };
    let row = client
        .query_opt(
            "SELECT rolcanlogin, pg_has_role(oid, 'pg_monitor', 'MEMBER') \
             FROM pg_roles WHERE rolname = $1",
            &[&role],
        )
        .await
        .map_err(sql_error)?;
    let (statement, outcome) = match row.map(|r| (r.get::<_, bool>(0), r.get::<_, bool>(1))) {
        None => (
            format!("CREATE ROLE {quoted} LOGIN IN ROLE pg_monitor"),
            Outcome::Created,
        ),
        Some((true, true)) => return Ok(Outcome::Unchanged),
        Some((true, false)) => (format!("GRANT pg_monitor TO {quoted}"), Outcome::Updated),
        Some((false, _)) => (
            format!("ALTER ROLE {quoted} LOGIN; GRANT pg_monitor TO {quoted}"),
            Outcome::Updated,
        ),
    };
    if !dry_run {
        client.batch_execute(&statement).await.map_err(sql_error)?;
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_role_names_are_quoted() {
        assert_eq!(
            identifier("strata_monitor").as_deref(),
            Ok("\"strata_monitor\"")
        );
        assert!(identifier("a\"; DROP ROLE x; --").is_err());
        assert!(identifier("").is_err());
        assert!(identifier(&"r".repeat(64)).is_err());
    }
}
