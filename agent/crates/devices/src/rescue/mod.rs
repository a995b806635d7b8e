//! Rescue mode (Ironic's `rescue`, IPA's `rescue.finalize_rescue`): the
//! crypt hashes Ironic sends ([`crypt`]) and the `rescue` login written
//! into the system's account files ([`account`]). The command is
//! `commands/rescue.rs`; PID 1 (`init/`) starts the logins.

pub mod account;
pub mod crypt;
