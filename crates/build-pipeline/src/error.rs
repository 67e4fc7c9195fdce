//! The pipeline's error: what the user can act on ([`UserError`]), and the rest with the
//! context of the step that failed (`creating …`, `running cmake`), as a chain `context: cause`.

/// A failure the user can act on (the message says what to do): printed as-is, exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UserError(pub String);

/// Every failure of a build.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Missing dependencies, a failed configure, build or install, bad input.
    #[error(transparent)]
    User(#[from] UserError),
    /// A step that failed, and why (`creating /x: permission denied`).
    #[error("{context}: {err}")]
    Context { context: String, err: Box<Error> },
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// Something expected was not there (`no stdout pipe`).
    #[error("{0}")]
    Message(String),
    /// A recipe's own error (its `materialize`'s), shown as it shows itself.
    #[error("{0}")]
    Recipe(Box<dyn std::error::Error + Send + Sync>),
    /// The caller's (a recipe's `materialize`) failed: its whole chain in the message, and in
    /// `source()` for a CLI that maps the kinds of the errors inside.
    #[error("{}", chain(.0.as_ref()))]
    Caller(Box<dyn std::error::Error + Send + Sync>),
}

impl Error {
    /// Whether this is (or wraps) a [`UserError`].
    pub fn is_user(&self) -> bool {
        match self {
            Error::User(_) => true,
            Error::Context { err, .. } => err.is_user(),
            _ => false,
        }
    }

    /// A recipe's own error, shown as it is (a CLI finds its kind by its type).
    pub fn recipe(e: impl std::error::Error + Send + Sync + 'static) -> Error {
        Error::Recipe(Box::new(e))
    }

    /// Wraps an error of the caller's (the `materialize` callback's).
    pub fn caller(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Error {
        Error::Caller(e.into())
    }
}

fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A [`UserError`] as an [`Error`].
pub fn user_err(msg: impl Into<String>) -> Error {
    Error::User(UserError(msg.into()))
}

/// `context`/`with_context` on results and options, as `anyhow::Context` has them.
pub trait Context<T> {
    fn context(self, context: &str) -> Result<T>;
    fn with_context(self, context: impl FnOnce() -> String) -> Result<T>;
}

impl<T, E: Into<Error>> Context<T> for std::result::Result<T, E> {
    fn context(self, context: &str) -> Result<T> {
        self.with_context(|| context.to_string())
    }

    fn with_context(self, context: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::Context {
            context: context(),
            err: Box::new(e.into()),
        })
    }
}

impl<T> Context<T> for Option<T> {
    fn context(self, context: &str) -> Result<T> {
        self.ok_or_else(|| Error::Message(context.to_string()))
    }

    fn with_context(self, context: impl FnOnce() -> String) -> Result<T> {
        self.ok_or_else(|| Error::Message(context()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_reads_like_anyhow_and_user_errors_are_found_under_it() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        let e = Err::<(), _>(io).context("creating /x").unwrap_err();
        assert_eq!(e.to_string(), "creating /x: gone");
        assert!(!e.is_user());
        let e = Err::<(), _>(user_err("install cmake"))
            .context("configuring")
            .unwrap_err();
        assert_eq!(e.to_string(), "configuring: install cmake");
        assert!(e.is_user());
        let caller = anyhow::anyhow!("inner").context("outer");
        assert_eq!(Error::caller(caller).to_string(), "outer: inner");
    }
}
