//! The NVIDIA NIC firmware steps against stand-in tools ([`agent_testkit::mellanox`]):
//! no Mellanox/NVIDIA NIC exists on the machines these tests run on, so
//! mstflint, mstconfig, mstfwreset and lspci are shell scripts answering
//! with output in the shapes IPA 13's unit tests use (real ConnectX-6
//! output), and what they were asked to do is checked from their call log.
//! http(s) images come from the test image server on loopback.

use serde_json::{json, Value};

use super::image::{self, Env};
use super::query::*;
use super::{discovery, settings, NicFwError};
use crate::image::fetch::HttpOptions;
use agent_testkit::image_server::{Fault, ImageServer};
use agent_testkit::mellanox::{device_query, mstconfig_query, sysfs, Bed};

const PSID: &str = "MT_0000000228";
const FW: &[u8] = b"FS4 firmware image bytes\x00\x01\x02";

fn sha256(data: &[u8]) -> String {
    let mut h = crate::image::checksum::Hasher::new(crate::image::checksum::Algo::Sha256);
    h.update(data);
    h.finish_hex()
}

fn sha512(data: &[u8]) -> String {
    let mut h = crate::image::checksum::Hasher::new(crate::image::checksum::Algo::Sha512);
    h.update(data);
    h.finish_hex()
}

fn http() -> HttpOptions {
    HttpOptions {
        retries: 0,
        ..HttpOptions::default()
    }
}

/// Runs the image step on `images` with `bed`'s tools.
fn update(bed: &Bed, images: &Value) -> Result<image::Outcome, NicFwError> {
    let path = bed.path();
    let http = http();
    let scratch = bed.scratch();
    image::update(
        images,
        &Env {
            search_path: &path,
            http: &http,
            md5_allowed: false,
            scratch: &scratch,
        },
    )
}

/// A firmware file in `bed` and its image entry.
fn file_image(bed: &Bed, version: &str) -> Value {
    let file = bed.state.join("fw.bin");
    std::fs::write(&file, FW).unwrap();
    json!({"url": format!("file://{}", file.display()), "checksum": sha256(FW),
        "checksumType": "sha256", "componentFlavor": PSID, "version": version})
}

// --- parsing ---------------------------------------------------------------

#[test]
fn mstflint_query_output_gives_version_running_version_and_psid() {
    let q = parse_flint_query(&device_query("20.35.1012", None, PSID));
    assert_eq!(q.fw_ver.as_deref(), Some("20.35.1012"));
    assert_eq!(q.running_fw_ver, None);
    assert_eq!(q.psid.as_deref(), Some(PSID));
    assert!(!q.image_changed());
    let q = parse_flint_query(&device_query("20.35.1012", Some("20.34.1002"), PSID));
    assert_eq!(q.running_fw_ver.as_deref(), Some("20.34.1002"));
    assert!(q.image_changed());
    assert_eq!(parse_flint_query(""), FwQuery::default());
}

#[test]
fn odd_tool_output_never_panics() {
    for text in [
        "FW Version:",
        "FW Version: 1.2",
        "FW Version: 1.2.x",
        "FW Version:\t\t 12.34.56789 extra",
        "PSID:",
        "PSID: é",
        "FW Version(Running): .1.2",
        "Configurations:\nONLY_NAME\n\u{1F600} x\n",
        "\u{0}\u{ff}",
    ] {
        let _ = parse_flint_query(text);
        let _ = parse_lspci(text);
        let _ = parse_mstconfig_query(text);
        let _ = known_to_mstconfig(text, "PSID");
        let _ = ArrayParam::parse(text);
    }
    assert_eq!(
        parse_flint_query("FW Version:\t\t 12.34.56789 extra")
            .fw_ver
            .as_deref(),
        Some("12.34.56789")
    );
    assert_eq!(parse_flint_query("FW Version: 1.2.x").fw_ver, None);
}

#[test]
fn lspci_keeps_network_functions_and_names_a_bad_line() {
    let text = "0000:06:00.0 0200: 15b3:101b\n0000:06:00.1 0207: 15b3:101b (rev 01)\n0000:07:00.0 0300: 15b3:1234\n\n";
    let f = parse_lspci(text).unwrap();
    assert_eq!(
        f,
        vec![
            PciFunction {
                pci: "0000:06:00.0".into(),
                device_id: "101b".into()
            },
            PciFunction {
                pci: "0000:06:00.1".into(),
                device_id: "101b".into()
            },
        ]
    );
    let e = parse_lspci("0000:06:00.0\n").unwrap_err();
    assert!(e.contains("0000:06:00.0"), "{e}");
    let e = parse_lspci("0000:06:00.0 0200: 8086:1521\n").unwrap_err();
    assert!(e.contains("8086:1521"), "{e}");
}

#[test]
fn mstconfig_tables_and_array_parameters_read_as_ipa_reads_them() {
    let q = mstconfig_query(
        "0000:06:00.0",
        &[
            ("NUM_OF_VFS", "0"),
            ("SRIOV_EN", "False(0)"),
            ("ESWITCH_HAIRPIN_TOT_BUFFER_SIZE", "Array[0..7]"),
        ],
    );
    let t = parse_mstconfig_query(&q);
    assert_eq!(t.get("SRIOV_EN").map(String::as_str), Some("False(0)"));
    assert_eq!(t.len(), 3, "{t:?}");
    assert!(parse_mstconfig_query("Device: x\nNUM_OF_VFS 0\n").is_empty());

    let info = agent_testkit::mellanox::MSTCONFIG_INFO;
    assert!(known_to_mstconfig(info, "SRIOV_EN"));
    assert!(known_to_mstconfig(
        info,
        "ESWITCH_HAIRPIN_TOT_BUFFER_SIZE[0]"
    ));
    assert!(!known_to_mstconfig(info, "UNSUPPORTED_PARAM"));
    // IPA looks for any substring; a fragment of a name is not a name.
    assert!(!known_to_mstconfig(info, "SRIOV"));

    let v = "Array[0..7]";
    let fits = |p: &str| ArrayParam::parse(p).is_some_and(|a| a.fits(v));
    assert!(fits("ESWITCH_HAIRPIN_TOT_BUFFER_SIZE[0]"));
    assert!(fits("ESWITCH_HAIRPIN_TOT_BUFFER_SIZE[0..3]"));
    assert!(!fits("ESWITCH_HAIRPIN_TOT_BUFFER_SIZE[8]"));
    assert!(!fits("ESWITCH_HAIRPIN_TOT_BUFFER_SIZE[0..8]"));
    assert!(!fits("ESWITCH_HAIRPIN_TOT_BUFFER_SIZE[3..1]"));
    // IPA's bound excludes the last index.
    assert!(!fits("ESWITCH_HAIRPIN_TOT_BUFFER_SIZE[7]"));
    assert_eq!(ArrayParam::parse("SRIOV_EN"), None);
    assert_eq!(ArrayParam::parse("X[99999999999999999999999]"), None);
}

// --- detection --------------------------------------------------------------

#[test]
fn a_mellanox_nic_is_found_by_its_interfaces_pci_vendor() {
    let root = tempfile::tempdir().unwrap();
    assert!(!discovery::nic_present(root.path()), "no class/net at all");
    sysfs(root.path(), &[("eth0", "0x8086"), ("lo0", "")]);
    assert!(!discovery::nic_present(root.path()));
    sysfs(root.path(), &[("ens1f0", "0x15b3")]);
    assert!(discovery::nic_present(root.path()));
}

// --- the image step -----------------------------------------------------------

#[test]
fn a_missing_tool_fails_naming_it_and_the_ramdisk() {
    let bed = Bed::new();
    bed.remove("mstfwreset");
    let e = update(&bed, &json!([])).unwrap_err();
    assert!(
        matches!(
            e,
            NicFwError::ToolMissing {
                tool: "mstfwreset",
                ..
            }
        ),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(msg.starts_with("mstfwreset was not found in"), "{msg}");
    assert!(
        msg.contains("must be built into the deploy ramdisk"),
        "{msg}"
    );
    let e = settings::update(&json!([]), &bed.path()).unwrap_err();
    assert!(
        matches!(
            e,
            NicFwError::ToolMissing {
                tool: "mstfwreset",
                ..
            }
        ),
        "{e:?}"
    );
    // Not a list: refused before the tools are looked for, as in IPA.
    let e = update(&bed, &json!({"url": "x"})).unwrap_err();
    assert!(matches!(e, NicFwError::InvalidImageConfig(_)), "{e:?}");
}

/// A bed with one ConnectX NIC (`0000:03:00.0`) at firmware `nic`, and an
/// image file of our PSID at firmware `image`.
fn one_nic(nic: &str, image: &str) -> Bed {
    let bed = Bed::new();
    bed.nic("0000:03:00.0", "1017", &device_query(nic, None, PSID));
    bed.write("image.query", &device_query(image, None, PSID));
    bed
}

#[test]
fn an_image_at_the_nics_version_is_not_burnt() {
    let bed = one_nic("20.35.1012", "20.35.1012");
    let out = update(&bed, &json!([file_image(&bed, "20.35.1012")])).unwrap();
    assert_eq!(out.current, vec!["0000:03:00.0"]);
    assert!(out.burnt.is_empty());
    let calls = bed.calls();
    assert!(
        !calls
            .iter()
            .any(|c| c.contains("burn") || c.contains("mstfwreset")),
        "{calls:?}"
    );
    assert!(
        calls
            .iter()
            .any(|c| c.starts_with("mstflint -i ") && c.ends_with(" query")),
        "{calls:?}"
    );
    assert!(
        bed.state.join("fw.bin").exists(),
        "a file:// image is copied, not moved"
    );
    let left: Vec<_> = std::fs::read_dir(bed.scratch()).unwrap().collect();
    assert!(left.is_empty(), "the download is removed: {left:?}");
}

#[test]
fn an_older_nic_is_burnt_once_per_card_without_a_reset() {
    let bed = Bed::new();
    bed.nic(
        "0000:03:00.0",
        "1017",
        &device_query("20.33.1012", None, PSID),
    );
    bed.nic(
        "0000:03:00.1",
        "1017",
        &device_query("20.33.1012", None, PSID),
    );
    bed.nic(
        "0000:06:00.0",
        "101b",
        &device_query("16.35.1012", None, "MT_0000000652"),
    );
    bed.write("image.query", &device_query("20.35.1012", None, PSID));
    let out = update(&bed, &json!([file_image(&bed, "20.35.1012")])).unwrap();
    assert_eq!(out.burnt, vec!["0000:03:00.0"]);
    assert_eq!(bed.burnt("0000:03:00.0").as_deref(), Some(FW));
    assert_eq!(
        bed.burnt("0000:03:00.1"),
        None,
        "the card's second function"
    );
    assert_eq!(bed.burnt("0000:06:00.0"), None, "another PSID");
    let calls = bed.calls();
    assert!(
        !calls.iter().any(|c| c.starts_with("mstfwreset")),
        "{calls:?}"
    );
    let burn = calls.iter().find(|c| c.ends_with("-y burn")).unwrap();
    assert!(burn.starts_with("mstflint -d 0000:03:00.0 -i "), "{burn}");
}

#[test]
fn a_pending_image_is_reset_before_the_burn() {
    let bed = Bed::new();
    bed.nic(
        "0000:03:00.0",
        "1017",
        &device_query("20.34.1002", Some("20.33.1012"), PSID),
    );
    bed.write("image.query", &device_query("20.35.1012", None, PSID));
    update(&bed, &json!([file_image(&bed, "20.35.1012")])).unwrap();
    let calls = bed.calls();
    let reset = calls
        .iter()
        .position(|c| c == "mstfwreset -d 0000:03:00.0 -y --sync 1 reset");
    let burn = calls.iter().position(|c| c.ends_with("-y burn"));
    assert!(
        matches!((reset, burn), (Some(r), Some(b)) if r < b),
        "{calls:?}"
    );

    // A failed reset stops the step, naming the device.
    bed.write("fail-reset", "");
    let e = update(&bed, &json!([file_image(&bed, "20.35.1012")])).unwrap_err();
    assert!(matches!(e, NicFwError::Tool { .. }), "{e:?}");
    assert!(
        e.to_string().contains("resetting device 0000:03:00.0"),
        "{e}"
    );
}

#[test]
fn an_image_of_another_psid_or_version_than_said_is_refused() {
    let bed = Bed::new();
    bed.nic(
        "0000:03:00.0",
        "1017",
        &device_query("20.33.1012", None, PSID),
    );
    bed.write(
        "image.query",
        &device_query("20.35.1012", None, "MT_0000000652"),
    );
    let e = update(&bed, &json!([file_image(&bed, "20.35.1012")])).unwrap_err();
    let NicFwError::MismatchComponentFlavor(msg) = &e else {
        panic!("{e:?}")
    };
    assert!(
        msg.contains(PSID) && msg.contains("MT_0000000652") && msg.contains("fw.bin"),
        "{msg}"
    );

    bed.write("image.query", &device_query("20.36.1012", None, PSID));
    let e = update(&bed, &json!([file_image(&bed, "20.35.1012")])).unwrap_err();
    let NicFwError::MismatchFwVersion(msg) = &e else {
        panic!("{e:?}")
    };
    assert!(
        msg.contains("20.35.1012") && msg.contains("20.36.1012"),
        "{msg}"
    );
    assert_eq!(bed.burnt("0000:03:00.0"), None);
}

#[test]
fn an_http_image_is_downloaded_checked_and_burnt() {
    let bed = one_nic("20.33.1012", "20.35.1012");
    let file = bed.state.join("served.bin");
    std::fs::write(&file, FW).unwrap();
    let server = ImageServer::start().unwrap();
    server.route("/fw/fw.bin", &file, &[], Fault::None);
    let url = server.url("/fw/fw.bin");
    let good = json!([{"url": url, "checksum": sha512(FW), "checksumType": "sha512",
        "componentFlavor": PSID, "version": "20.35.1012"}]);
    let out = update(&bed, &good).unwrap();
    assert_eq!(out.burnt, vec!["0000:03:00.0"]);
    assert_eq!(bed.burnt("0000:03:00.0").as_deref(), Some(FW));

    // The server's bytes are not the ones the checksum names.
    std::fs::remove_file(bed.state.join("burnt-0000:03:00.0")).unwrap();
    let bad = json!([{"url": url, "checksum": sha512(b"other"), "checksumType": "sha512",
        "componentFlavor": PSID, "version": "20.35.1012"}]);
    let e = update(&bed, &bad).unwrap_err();
    let NicFwError::MismatchChecksum(msg) = &e else {
        panic!("{e:?}")
    };
    assert!(msg.contains(&url) && msg.contains(&sha512(FW)), "{msg}");
    assert_eq!(bed.burnt("0000:03:00.0"), None);

    // A server error is a download failure naming the URL.
    server.route("/fw/gone.bin", &file, &[], Fault::Status(404));
    let gone = json!([{"url": server.url("/fw/gone.bin"), "checksum": sha512(FW),
        "checksumType": "sha512", "componentFlavor": PSID, "version": "20.35.1012"}]);
    let e = update(&bed, &gone).unwrap_err();
    assert!(matches!(e, NicFwError::Download { .. }), "{e:?}");
    assert!(e.to_string().contains("/fw/gone.bin"), "{e}");
}

#[test]
fn a_bad_image_list_is_refused_naming_the_image() {
    let bed = Bed::new();
    bed.nic(
        "0000:03:00.0",
        "1017",
        &device_query("20.33.1012", None, PSID),
    );
    let mut image = file_image(&bed, "20.35.1012");
    image.as_object_mut().unwrap().remove("version");
    let e = update(&bed, &json!([file_image(&bed, "1.2.3"), image])).unwrap_err();
    let NicFwError::InvalidImageConfig(msg) = &e else {
        panic!("{e:?}")
    };
    assert!(
        msg.contains("image 1") && msg.ends_with("missing or invalid: version"),
        "{msg}"
    );

    let e = update(&bed, &json!(["file:///fw.bin"])).unwrap_err();
    assert!(matches!(e, NicFwError::InvalidImageConfig(_)), "{e:?}");

    let mut md5 = file_image(&bed, "20.35.1012");
    md5["checksumType"] = json!("md5");
    let e = update(&bed, &json!([md5])).unwrap_err();
    let NicFwError::InvalidImageConfig(msg) = &e else {
        panic!("{e:?}")
    };
    assert!(
        msg.contains("Checksum algorithm md5 is not supported for image 0"),
        "{msg}"
    );
    // MD5 when the conductor allows it.
    assert!(image::check_image(0, &md5, true).is_ok());

    let mut ftp = file_image(&bed, "20.35.1012");
    ftp["url"] = json!("ftp://h/fw.bin");
    let e = update(&bed, &json!([ftp])).unwrap_err();
    let NicFwError::InvalidUrlScheme(msg) = &e else {
        panic!("{e:?}")
    };
    assert!(
        msg.contains("\"ftp\"") && msg.contains("ftp://h/fw.bin"),
        "{msg}"
    );

    let twice = json!([
        file_image(&bed, "20.35.1012"),
        file_image(&bed, "20.35.1012")
    ]);
    let e = update(&bed, &twice).unwrap_err();
    let NicFwError::DuplicateComponentFlavor(msg) = &e else {
        panic!("{e:?}")
    };
    assert!(
        msg.contains(PSID) && msg.contains("images 0 and 1"),
        "{msg}"
    );
    assert!(!bed.calls().iter().any(|c| c.contains("burn")));
}

#[test]
fn a_failed_burn_names_the_image_and_device() {
    let bed = one_nic("20.33.1012", "20.35.1012");
    bed.write("fail-burn", "");
    let e = update(&bed, &json!([file_image(&bed, "20.35.1012")])).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("burning image 0") && msg.contains("on device 0000:03:00.0"),
        "{msg}"
    );
    assert!(msg.contains("Bad parameter"), "the tool's stderr: {msg}");
}

// --- the settings step ----------------------------------------------------------

fn settings_bed(rows: &[(&str, &str)]) -> Bed {
    let bed = Bed::new();
    for pci in ["0000:03:00.0", "0000:03:00.1"] {
        bed.nic(pci, "1017", &device_query("20.35.1012", None, PSID));
        bed.write(&format!("mstconfig-q-{pci}"), &mstconfig_query(pci, rows));
    }
    bed
}

const ROWS: &[(&str, &str)] = &[
    ("NUM_OF_VFS", "0"),
    ("SRIOV_EN", "True(1)"),
    ("PF_TOTAL_SF", "0"),
    ("ESWITCH_HAIRPIN_TOT_BUFFER_SIZE", "Array[0..7]"),
];

#[test]
fn supported_settings_are_set_per_function_and_equal_ones_skipped() {
    let bed = settings_bed(ROWS);
    let s = json!([{"deviceID": "1017",
        "globalConfig": {"NUM_OF_VFS": 127, "SRIOV_EN": true},
        "function0Config": {"PF_TOTAL_SF": 500, "ESWITCH_HAIRPIN_TOT_BUFFER_SIZE[2]": 16},
        "function1Config": {"PF_TOTAL_SF": "600"}}]);
    let out = settings::update(&s, &bed.path()).unwrap();
    assert!(out.reset.is_empty());
    let calls = bed.calls();
    assert!(calls.contains(&"mstconfig -d 0000:03:00.0 -y set NUM_OF_VFS=127 ESWITCH_HAIRPIN_TOT_BUFFER_SIZE[2]=16 PF_TOTAL_SF=500".to_string()), "{calls:?}");
    assert!(
        calls.contains(&"mstconfig -d 0000:03:00.1 -y set PF_TOTAL_SF=600".to_string()),
        "{calls:?}"
    );
    // A second run with the values in place sets nothing but the array.
    let bed = settings_bed(&[
        ("NUM_OF_VFS", "127"),
        ("SRIOV_EN", "True(1)"),
        ("PF_TOTAL_SF", "500"),
    ]);
    let s = json!([{"deviceID": "1017", "globalConfig": {"NUM_OF_VFS": 127, "SRIOV_EN": true},
        "function0Config": {"PF_TOTAL_SF": 500}}]);
    let out = settings::update(&s, &bed.path()).unwrap();
    assert!(out.set.is_empty(), "{out:?}");
    assert!(
        !bed.calls().iter().any(|c| c.contains(" set ")),
        "{:?}",
        bed.calls()
    );
}

#[test]
fn an_unsupported_setting_is_refused_naming_it_before_any_is_set() {
    let bed = settings_bed(ROWS);
    let s = json!([{"deviceID": "1017", "globalConfig": {"NUM_OF_VFS": 8, "NO_SUCH_PARAM": 1}}]);
    let e = settings::update(&s, &bed.path()).unwrap_err();
    let NicFwError::UnsupportedByMstconfig(msg) = &e else {
        panic!("{e:?}")
    };
    assert!(
        msg.contains("NO_SUCH_PARAM") && msg.contains("0000:03:00.0"),
        "{msg}"
    );
    assert!(!bed.calls().iter().any(|c| c.contains(" set ")));

    // Known to mstconfig, but not to this firmware.
    let bed = settings_bed(&[
        ("NUM_OF_VFS", "0"),
        ("ESWITCH_HAIRPIN_TOT_BUFFER_SIZE", "Array[0..7]"),
    ]);
    for param in ["SRIOV_EN", "ESWITCH_HAIRPIN_TOT_BUFFER_SIZE[8]"] {
        let s = json!([{"deviceID": "1017", "function1Config": {param: 1}}]);
        let e = settings::update(&s, &bed.path()).unwrap_err();
        let NicFwError::UnsupportedByFirmware(msg) = &e else {
            panic!("{e:?}")
        };
        assert!(msg.contains(param) && msg.contains("0000:03:00.1"), "{msg}");
    }
    assert!(!bed.calls().iter().any(|c| c.contains(" set ")));
}

#[test]
fn settings_entries_are_checked_and_matched_by_device_id() {
    let bed = settings_bed(ROWS);
    let e =
        settings::update(&json!([{"globalConfig": {"NUM_OF_VFS": 1}}]), &bed.path()).unwrap_err();
    assert!(
        matches!(e, NicFwError::InvalidSettingsConfig(ref m) if m.contains("no deviceID")),
        "{e:?}"
    );
    let twice = json!([{"deviceID": "1017"}, {"deviceID": "1017"}]);
    let e = settings::update(&twice, &bed.path()).unwrap_err();
    assert!(
        matches!(e, NicFwError::DuplicateDeviceId(ref m) if m.contains("1017")),
        "{e:?}"
    );
    let e = settings::update(&json!({"deviceID": "1017"}), &bed.path()).unwrap_err();
    assert!(matches!(e, NicFwError::InvalidSettingsConfig(_)), "{e:?}");
    let e = settings::update(
        &json!([{"deviceID": "1017", "globalConfig": {"NUM_OF_VFS": null}}]),
        &bed.path(),
    )
    .unwrap_err();
    assert!(
        matches!(e, NicFwError::InvalidSettingsConfig(ref m) if m.contains("globalConfig.NUM_OF_VFS")),
        "{e:?}"
    );
    // Another device's settings are left alone; the ID's case does not matter.
    let out = settings::update(
        &json!([{"deviceID": "101b", "globalConfig": {"NUM_OF_VFS": 1}}]),
        &bed.path(),
    )
    .unwrap();
    assert!(out.set.is_empty());
    let upper = settings_bed(ROWS);
    upper.write("lspci.out", "0000:03:00.0 0200: 15b3:101b\n");
    let out = settings::update(
        &json!([{"deviceID": "101B", "globalConfig": {"NUM_OF_VFS": 4}}]),
        &upper.path(),
    )
    .unwrap();
    assert_eq!(
        out.set.get("0000:03:00.0"),
        Some(&vec!["NUM_OF_VFS=4".to_string()])
    );
}

#[test]
fn a_card_whose_new_image_waits_is_reset_before_its_settings() {
    let bed = settings_bed(ROWS);
    bed.write(
        "dev-0000:03:00.0.query",
        &device_query("20.35.1012", Some("20.34.1002"), PSID),
    );
    let s = json!([{"deviceID": "1017", "globalConfig": {"NUM_OF_VFS": 4}}]);
    let out = settings::update(&s, &bed.path()).unwrap();
    assert_eq!(out.reset, vec!["0000:03:00.0"]);
    let calls = bed.calls();
    let reset = calls
        .iter()
        .position(|c| c.starts_with("mstfwreset -d 0000:03:00.0"));
    let set = calls.iter().position(|c| c.contains(" -y set "));
    assert!(
        matches!((reset, set), (Some(r), Some(s)) if r < s),
        "{calls:?}"
    );
    // A failed reset is logged, and the settings still go (IPA).
    bed.write("fail-reset", "");
    assert!(settings::update(&s, &bed.path()).is_ok());
}
