//! How an image write's failures read in `command_error`: IPA's error
//! class of each [`ImageError`], and the failure of a task that crashed.

use super::{CommandError, ErrorKind};
use agent_contents::image::ImageError;

/// The IPA error class of an image write failure, for `command_error`.
pub fn error_kind(e: &ImageError) -> ErrorKind {
    match e {
        ImageError::InvalidParams(_) => ErrorKind::InvalidCommandParams,
        ImageError::Refused(_) => ErrorKind::ProtectedDevice,
        ImageError::HttpStatus { .. }
        | ImageError::Download { .. }
        | ImageError::TotalTimeout { .. }
        | ImageError::ChecksumFile { .. } => ErrorKind::ImageDownload,
        ImageError::ChecksumMismatch { .. } => ErrorKind::ImageChecksum,
        ImageError::NotPermitted { .. } => ErrorKind::InvalidImage,
        ImageError::Corrupt { .. }
        | ImageError::Unsupported { .. }
        | ImageError::TooLarge { .. }
        | ImageError::Write { .. } => ErrorKind::ImageWrite,
    }
}

/// `e` as the command's error.
pub fn image_error(e: ImageError) -> CommandError {
    CommandError::new(error_kind(&e), e.to_string())
}

/// A blocking task of the write that crashed (`what` names it).
pub fn crashed(what: &str, e: tokio::task::JoinError) -> CommandError {
    CommandError::new(ErrorKind::ImageWrite, format!("{what} crashed: {e}"))
}
