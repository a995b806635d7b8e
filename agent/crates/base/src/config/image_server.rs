//! `[DEFAULT] image_server_auth_strategy`, `image_server_user` and
//! `image_server_password` of IPA's configuration files: credentials for
//! the image server when the conductor's `image_info` brings none of its
//! own (IPA 13's `_gen_auth_from_oslo_conf_user_pass`; `image_info`'s
//! `image_server_*` and `image_request_authorization` win).

use std::collections::BTreeMap;

/// The three option names.
pub const OPTIONS: [&str; 3] = [
    "image_server_auth_strategy",
    "image_server_user",
    "image_server_password",
];

/// What the files configure.
#[derive(Clone, Default, PartialEq, Eq)]
pub enum ImageServerAuth {
    /// `noauth` (IPA's default) or nothing set.
    #[default]
    None,
    /// `http_basic` with both a user and a password.
    Basic {
        /// `image_server_user`.
        user: String,
        /// `image_server_password`.
        password: String,
    },
}

impl std::fmt::Debug for ImageServerAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::None => f.write_str("None"),
            Self::Basic { user, .. } => write!(f, "Basic {{ user: {user:?}, password: <hidden> }}"),
        }
    }
}

/// The setting from the files' values of [`OPTIONS`] (option → value),
/// and a note for anything that cannot be used.
pub fn from_options(values: &BTreeMap<String, String>, notes: &mut Vec<String>) -> ImageServerAuth {
    let get = |k: &str| values.get(k).map(String::as_str).filter(|v| !v.is_empty());
    match get("image_server_auth_strategy").unwrap_or("noauth") {
        "noauth" => {
            if get("image_server_user").is_some() || get("image_server_password").is_some() {
                notes.push(
                    "image_server_user/image_server_password are set but image_server_auth_strategy is noauth: not sent, as in IPA"
                        .into(),
                );
            }
            ImageServerAuth::None
        }
        "http_basic" => match (get("image_server_user"), get("image_server_password")) {
            (Some(user), Some(password)) => {
                notes.push(format!(
                    "image downloads without credentials of their own use HTTP basic authentication as {user:?}"
                ));
                ImageServerAuth::Basic {
                    user: user.to_string(),
                    password: password.to_string(),
                }
            }
            _ => {
                notes.push(
                    "ERROR: image_server_auth_strategy = http_basic needs image_server_user and image_server_password; image downloads go without credentials (IPA refuses them before connecting; here the server's refusal fails them)"
                        .into(),
                );
                ImageServerAuth::None
            }
        },
        other => {
            notes.push(format!(
                "image_server_auth_strategy = {other:?} is not one of noauth, http_basic; no credentials sent"
            ));
            ImageServerAuth::None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn basic_needs_both_and_noauth_sends_nothing() {
        let mut notes = Vec::new();
        assert_eq!(from_options(&opts(&[]), &mut notes), ImageServerAuth::None);
        assert!(notes.is_empty());
        let basic = from_options(
            &opts(&[
                ("image_server_auth_strategy", "http_basic"),
                ("image_server_user", "glance"),
                ("image_server_password", "s3cret"),
            ]),
            &mut notes,
        );
        assert_eq!(
            basic,
            ImageServerAuth::Basic {
                user: "glance".into(),
                password: "s3cret".into()
            }
        );
        assert!(
            !format!("{basic:?}").contains("s3cret"),
            "the password never reaches a log"
        );
        notes.clear();
        let half = opts(&[
            ("image_server_auth_strategy", "http_basic"),
            ("image_server_user", "glance"),
        ]);
        assert_eq!(from_options(&half, &mut notes), ImageServerAuth::None);
        assert!(
            notes[0].starts_with("ERROR") && notes[0].contains("image_server_password"),
            "{notes:?}"
        );
        notes.clear();
        let noauth = opts(&[
            ("image_server_user", "glance"),
            ("image_server_password", "p"),
        ]);
        assert_eq!(from_options(&noauth, &mut notes), ImageServerAuth::None);
        assert!(notes[0].contains("noauth"), "{notes:?}");
        notes.clear();
        let odd = opts(&[("image_server_auth_strategy", "kerberos")]);
        assert_eq!(from_options(&odd, &mut notes), ImageServerAuth::None);
        assert!(notes[0].contains("\"kerberos\""), "{notes:?}");
    }
}
