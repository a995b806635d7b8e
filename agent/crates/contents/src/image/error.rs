//! Typed errors of an image write: each names the input (URL, device,
//! format) and the reason. `commands::image::error_kind` maps them
//! to the IPA error class Ironic shows.

use agent_devices::disk::Refusal;

/// Why an image write failed. The target never boots after any of these.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// Bad or missing parameters.
    #[error("invalid image parameters: {0}")]
    InvalidParams(String),
    /// The target may not be written.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The server answered with a client error (not retried).
    #[error("downloading {url}: the server answered HTTP {status}")]
    HttpStatus {
        /// The URL.
        url: String,
        /// HTTP status code.
        status: u16,
    },
    /// The download failed after every retry.
    #[error("downloading {url} failed after {attempts} attempts at byte {offset}: {reason}")]
    Download {
        /// The URL tried last.
        url: String,
        /// Attempts made.
        attempts: u32,
        /// Bytes received when it gave up.
        offset: u64,
        /// The last failure.
        reason: String,
    },
    /// The whole download took longer than allowed.
    #[error("downloading {url} took longer than the {secs} s limit (at byte {offset})")]
    TotalTimeout {
        /// The URL.
        url: String,
        /// The limit.
        secs: u64,
        /// Bytes received.
        offset: u64,
    },
    /// A checksum file could not be fetched or did not list the image.
    #[error("checksum file {url}: {reason}")]
    ChecksumFile {
        /// Where the file came from.
        url: String,
        /// What was wrong.
        reason: String,
    },
    /// The downloaded bytes do not have the expected digest.
    #[error("image checksum mismatch for {url}: expected {algo} {expected}, computed {actual} over {bytes} bytes")]
    ChecksumMismatch {
        /// The image URL.
        url: String,
        /// Algorithm.
        algo: &'static str,
        /// Expected digest.
        expected: String,
        /// Computed digest.
        actual: String,
        /// Bytes hashed.
        bytes: u64,
    },
    /// The image content is not a valid image of its format.
    #[error("{format} image {url} is invalid: {reason}")]
    Corrupt {
        /// Detected format.
        format: &'static str,
        /// The image URL.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// The image is in a format the agent does not write.
    #[error("image {url} is in an unsupported format: {reason}")]
    Unsupported {
        /// The image URL.
        url: String,
        /// What was detected.
        reason: String,
    },
    /// The image's format is not one the conductor permits (deep image
    /// inspection), or not the `disk_format` it announced.
    #[error("image {url} refused: {reason}")]
    NotPermitted {
        /// The image URL.
        url: String,
        /// IPA's wording of the check that failed.
        reason: String,
    },
    /// The image does not fit on the device.
    #[error("the image needs at least {needed} bytes but {device} holds {size} bytes")]
    TooLarge {
        /// Target.
        device: String,
        /// Bytes the image needs.
        needed: u64,
        /// Device size.
        size: u64,
    },
    /// Writing, flushing or wiping the target failed.
    #[error("writing {device}: {reason}")]
    Write {
        /// Target.
        device: String,
        /// What failed.
        reason: String,
    },
}

impl ImageError {
    /// True for errors found before the device was touched.
    pub fn before_write(&self) -> bool {
        matches!(
            self,
            Self::InvalidParams(_) | Self::Refused(_) | Self::ChecksumFile { .. }
        )
    }
}
