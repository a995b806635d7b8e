//! Errors of the command API. Every error reply is JSON with a string
//! `faultstring` (Ironic does substring tests on it, PROTOCOL.md §1.6) and a
//! `faultcode` of `Client` (< 500) or `Server`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

/// An error reply of the command API.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Missing or wrong `agent_token` (401).
    #[error("401 Unauthorized: Token invalid.")]
    InvalidToken,
    /// An async command is running (409).
    #[error("Agent is busy: executing command {0}")]
    Busy(String),
    /// Malformed request (400).
    #[error("Invalid command: {0}")]
    InvalidCommand(String),
    /// Parameters refused by the command's validator (400).
    #[error("Invalid command parameters: {0}")]
    InvalidParams(String),
    /// Unknown extension, command id or route (404).
    #[error("Not found: {0}")]
    NotFound(String),
    /// Wrong HTTP method for the route (405).
    #[error("405 Method Not Allowed: The method is not allowed for the requested URL.")]
    MethodNotAllowed,
    /// Body above the configured limit (413).
    #[error("413 Request Entity Too Large: request body larger than {0} bytes")]
    TooLarge(usize),
    /// Other requests' bodies already hold the shared budget (413).
    #[error("413 Request Entity Too Large: other requests being read already hold the {0} bytes that request bodies may buffer together; retry when they are done")]
    BodyBudget(usize),
    /// Unexpected failure (500).
    #[error("Internal error: {0}")]
    Internal(String),
    /// A hardware manager is misconfigured (500; the command's error,
    /// `Hardware manager configuration error: …`).
    #[error("{0}")]
    ManagerConfiguration(String),
}

impl ApiError {
    /// HTTP status of this error.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::InvalidToken => StatusCode::UNAUTHORIZED,
            Self::Busy(_) => StatusCode::CONFLICT,
            Self::InvalidCommand(_) | Self::InvalidParams(_) => StatusCode::BAD_REQUEST,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::TooLarge(_) | Self::BodyBudget(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Internal(_) | Self::ManagerConfiguration(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let faultcode = if status.is_server_error() {
            "Server"
        } else {
            "Client"
        };
        if status.is_server_error() {
            tracing::error!(error = %self, "command API error");
        } else {
            tracing::debug!(error = %self, status = status.as_u16(), "command API refused a request");
        }
        (
            status,
            Json(json!({"faultcode": faultcode, "faultstring": self.to_string()})),
        )
            .into_response()
    }
}
