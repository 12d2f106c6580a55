//! A failure talking to PostgreSQL, as text that names the server's reason: every part
//! of the store reports through it (a leaf: it imports nothing of the store's).

use tokio_postgres::error::SqlState;

/// Any failure talking to the database, as text for [`StoreError::Unavailable`].
pub(crate) struct DbError {
    pub(crate) text: String,
    /// PostgreSQL's SQLSTATE, when the server answered with an error.
    pub(crate) code: Option<SqlState>,
}

impl DbError {
    /// Whether the table or the role's rights on it changed under us (the table was
    /// dropped, a column is missing, a grant revoked): readiness checks the schema
    /// again rather than reporting ready.
    pub(crate) fn schema_suspect(&self) -> bool {
        self.code.as_ref().is_some_and(|c| {
            [
                SqlState::UNDEFINED_TABLE,
                SqlState::UNDEFINED_COLUMN,
                SqlState::INSUFFICIENT_PRIVILEGE,
            ]
            .contains(c)
        })
    }
}

impl From<tokio_postgres::Error> for DbError {
    fn from(e: tokio_postgres::Error) -> DbError {
        DbError {
            code: e.code().cloned(),
            text: describe(&e),
        }
    }
}

/// A driver error with its cause: for an error the server sent, PostgreSQL's message,
/// SQLSTATE, detail and hint (the driver's own `Display` says only "db error");
/// otherwise the driver's text and its chain of sources (e.g. the I/O error behind
/// "error connecting to server").
pub(crate) fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut text = format!("{} (SQLSTATE {})", db.message(), db.code().code());
        if let Some(detail) = db.detail() {
            text.push_str(&format!("; detail: {detail}"));
        }
        if let Some(hint) = db.hint() {
            text.push_str(&format!("; hint: {hint}"));
        }
        return text;
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(&format!(": {cause_text}"));
        }
        source = cause.source();
    }
    text
}
