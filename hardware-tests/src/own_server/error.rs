//! The problems an operator meets when pointing the demo at their own
//! server, each with what to do about it: the messages `ci/demo --bmc`
//! ends with (and `tests/qemu/bed_own_server.rs` checks).

use std::path::PathBuf;

/// Why `ci/demo --bmc` stopped; every message says how to fix it.
#[derive(Debug, thiserror::Error)]
pub enum Problem {
    /// A flag is missing or malformed.
    #[error("{flag}: {reason} (ci/demo --help lists every flag)")]
    Flag {
        /// The flag, e.g. `--mac`.
        flag: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A file a flag names cannot be read or parsed.
    #[error("{flag} {path}: {reason}")]
    File {
        /// The flag.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// No connection to the BMC.
    #[error(
        "cannot reach the BMC at {url}: {reason}. Fix: check the address in --bmc and that this \
         machine has a route to it (try `curl -k {url}`)"
    )]
    BmcUnreachable {
        /// The URL tried.
        url: String,
        /// The connection error.
        reason: String,
    },
    /// The BMC's certificate is not trusted.
    #[error(
        "the BMC's TLS certificate at {url} was refused: {reason}. Fix: give the CA that signed it \
         with --bmc-ca FILE (a self-signed BMC certificate is its own CA: export it from the BMC's \
         web interface, or `openssl s_client -showcerts -connect HOST:PORT`), or skip the check \
         with --bmc-insecure"
    )]
    BmcCertificate {
        /// The URL tried.
        url: String,
        /// The TLS error.
        reason: String,
    },
    /// The BMC refused the credentials.
    #[error(
        "the BMC at {url} refused user {user:?} (HTTP {status}). Fix: check --bmc-user and the \
         password in --bmc-password-file (one line; a trailing newline is ignored)"
    )]
    BmcCredentials {
        /// The URL tried.
        url: String,
        /// The user name given.
        user: String,
        /// The HTTP status (401 or 403).
        status: u16,
    },
    /// The system path does not exist on the BMC.
    #[error(
        "the BMC has no system {path} (HTTP {status}); it lists {members}. Fix: put one of them \
         in --bmc"
    )]
    NoSystem {
        /// The path asked for.
        path: String,
        /// The HTTP status.
        status: u16,
        /// What `/redfish/v1/Systems` lists.
        members: String,
    },
    /// Another Redfish answer the demo cannot use.
    #[error("the BMC answered {what} with {reason}")]
    BmcAnswer {
        /// The request.
        what: String,
        /// What was wrong.
        reason: String,
    },
    /// No virtual media CD on the BMC.
    #[error(
        "the BMC offers no virtual media CD for {system} (looked at {looked}). Fix: enable or \
         license virtual media on the BMC (some vendors sell it separately)"
    )]
    VirtualMediaUnsupported {
        /// The system.
        system: String,
        /// The collections looked at.
        looked: String,
    },
    /// The virtual media CD already holds an image.
    #[error(
        "the BMC's virtual media {device} already holds {image:?}: another tool or a person is \
         using it. Fix: eject it (the BMC's web interface, or POST {device}/Actions/\
         VirtualMedia.EjectMedia) and run again"
    )]
    VirtualMediaBusy {
        /// The virtual media resource.
        device: String,
        /// What is inserted.
        image: String,
    },
    /// `--http-address` is not an address this machine can serve on.
    #[error(
        "--http-address {addr}: cannot serve on it ({reason}). Fix: give an address of this \
         machine that the BMC and the server can reach (`ip -br addr` lists them), with ports \
         {ports} free"
    )]
    HttpAddress {
        /// The address given.
        addr: String,
        /// The bind error.
        reason: String,
        /// The ports needed.
        ports: String,
    },
    /// The BMC never fetched the ISO Ironic published.
    #[error(
        "the BMC did not read the boot ISO from {url} within {secs} s{last_error}. The BMC \
         cannot reach this machine's HTTP address. Fix: give --http-address an address of this \
         machine that the BMC can reach (and open TCP ports 8088 and 6385 in any firewall \
         between them)"
    )]
    IsoNotRead {
        /// Where Ironic published the ISO.
        url: String,
        /// How long the demo waited.
        secs: u64,
        /// `: Ironic says …` when Ironic reported an error.
        last_error: String,
    },
    /// The server never fetched the agent by PXE.
    #[error(
        "the server did not boot the agent by PXE within {secs} s: {seen}{last_error}. Fix: \
         make sure the server's firmware boots from the network in UEFI mode, that the NIC with \
         --mac is on the network of --http-address (no router between them: DHCP does not \
         cross one without a relay), and that no other DHCP server answers it with boot \
         options; or use --boot vmedia"
    )]
    PxeNotBooted {
        /// How long the demo waited.
        secs: u64,
        /// How far it got, from dnsmasq's log and the HTTP access log.
        seen: String,
        /// `: Ironic says …` when Ironic reported an error.
        last_error: String,
    },
    /// The server booted the agent but it never reached Ironic.
    #[error(
        "{booted}, but the agent on the server never reached Ironic at {api} \
         within {secs} s (no first heartbeat){last}. Fix: watch the server's console: check \
         --network-data (address, netmask, gateway, the MAC of the NIC it names) and that the \
         NIC with --mac can reach {api}"
    )]
    NoHeartbeat {
        /// How the agent got to the server: `the BMC read the boot ISO`.
        booted: String,
        /// Ironic's API URL the agent should call.
        api: String,
        /// How long the demo waited.
        secs: u64,
        /// `; the BMC's newest log entry: …`, or that it keeps none.
        last: String,
    },
    /// No `--confirm-disk`: stop before anything is written.
    #[error(
        "stopped before cleaning and deploying: the image would be written to {disk}, which \
         cleaning erases. Fix: if that disk may be erased, run again with --confirm-disk {serial}"
    )]
    NotConfirmed {
        /// The disk the agent would write, described.
        disk: String,
        /// Its serial.
        serial: String,
    },
    /// `--confirm-disk` names another disk than the one the agent chose.
    #[error(
        "stopped before cleaning and deploying: --confirm-disk {given} does not name the disk \
         the image would be written to, {disk}. Fix: run again with --confirm-disk {serial} if \
         that disk may be erased"
    )]
    WrongDisk {
        /// The serial given.
        given: String,
        /// The disk the agent would write, described.
        disk: String,
        /// Its serial.
        serial: String,
    },
    /// SIGINT or SIGTERM.
    #[error("interrupted (the BMC was cleaned up)")]
    Interrupted,
}
