//! How a fetch, and one attempt of an HTTP download, ends when it does not
//! reach the end of the image.

use crate::image::ImageError;

/// How a fetch ended other than by reaching the end of the image.
#[derive(Debug)]
pub enum FetchEnd {
    /// A later stage stopped taking data (its own error is the cause).
    Stopped,
    /// The source failed.
    Failed(ImageError),
}

impl From<ImageError> for FetchEnd {
    fn from(e: ImageError) -> Self {
        Self::Failed(e)
    }
}

/// One attempt's failure: retried, or final.
#[derive(Debug)]
pub(super) enum AttemptError {
    Retry(String),
    Fatal(FetchEnd),
}

impl AttemptError {
    /// A final download failure at `offset` of `url`.
    pub(super) fn fatal(url: &str, offset: u64, reason: String) -> Self {
        Self::Fatal(FetchEnd::Failed(ImageError::Download {
            url: url.to_string(),
            attempts: 1,
            offset,
            reason,
        }))
    }
}

impl From<FetchEnd> for AttemptError {
    fn from(e: FetchEnd) -> Self {
        Self::Fatal(e)
    }
}
