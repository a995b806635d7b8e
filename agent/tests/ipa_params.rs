//! IPA 13's parameters: the table of `agent/docs/ipa-parameters.md` is
//! `config::ipa_params::PARAMS` row for row, and every option it calls
//! supported is really parsed (its example value changes the agent's
//! configuration, or the part of the ramdisk that reads it).

use agent_base::config::ipa_params::{Param, Status, PARAMS};
use agent_base::config::{files, Config, KernelParams};

/// The rows of `agent/docs/ipa-parameters.md`'s table: `option`,
/// `kernel parameter`, `status`, `where or why`.
fn doc_rows() -> Vec<[String; 4]> {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/ipa-parameters.md"
    ))
    .expect("agent/docs/ipa-parameters.md");
    assert!(
        doc.starts_with("# IPA parameters\n"),
        "agent/docs/ipa-parameters.md is the IPA parameters page"
    );
    doc.lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<String> = l
                .trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().trim_matches('`').to_string())
                .collect();
            assert_eq!(cells.len(), 4, "table row {l:?}");
            [
                cells[0].clone(),
                cells[1].clone(),
                cells[2].clone(),
                cells[3].clone(),
            ]
        })
        .collect()
}

fn row(p: &Param) -> [String; 4] {
    [
        p.option.to_string(),
        p.kernel.unwrap_or("").to_string(),
        p.status.word().to_string(),
        p.status.text().to_string(),
    ]
}

#[test]
fn the_documented_table_is_the_code_table() {
    let doc = doc_rows();
    let code: Vec<[String; 4]> = PARAMS.iter().map(row).collect();
    for (i, (r, c)) in doc.iter().zip(&code).enumerate() {
        assert_eq!(
            r,
            c,
            "agent/docs/ipa-parameters.md row {} differs from the code",
            i + 1
        );
    }
    assert_eq!(
        doc.len(),
        code.len(),
        "agent/docs/ipa-parameters.md has {} rows, the code {}",
        doc.len(),
        code.len()
    );
}

/// Every option of IPA 13.0.0's `config.py` is in the table (the list is
/// IPA's, option for option).
#[test]
fn every_ipa_13_option_is_in_the_table() {
    const IPA_13: &[&str] = &[
        "api_url",
        "global_request_id",
        "listen_host",
        "listen_port",
        "listen_tls",
        "tls_cert_file",
        "tls_key_file",
        "enable_auto_tls",
        "auto_tls_allowed_clock_skew",
        "tls_min_version",
        "tls_cipher_suites",
        "tls_certificate_curve",
        "advertise_host",
        "advertise_port",
        "advertise_protocol",
        "ip_lookup_attempts",
        "ip_lookup_sleep",
        "network_interface",
        "lookup_timeout",
        "lookup_interval",
        "lldp_timeout",
        "collect_lldp",
        "inspection_callback_url",
        "inspection_collectors",
        "inspection_dhcp_wait_timeout",
        "inspection_dhcp_all_interfaces",
        "hardware_initialization_delay",
        "disk_wait_attempts",
        "disk_wait_delay",
        "insecure",
        "cafile",
        "certfile",
        "keyfile",
        "introspection_daemon",
        "introspection_daemon_post_interval",
        "ntp_server",
        "fail_if_clock_not_set",
        "agent_token",
        "image_server_user",
        "image_server_password",
        "image_server_auth_strategy",
        "image_download_connection_timeout",
        "image_download_connection_retries",
        "image_download_connection_retry_interval",
        "image_download_max_duration",
        "ironic_api_version",
        "enable_vlan_interfaces",
        "ignore_bootloader_failure",
        "inject_files_priority",
        "guard-special-filesystems",
        "enable_discard_erase",
        "md5_enabled",
        "http_request_timeout",
        "config_drive_rebuild",
        "disable_deep_image_inspection",
        "permitted_image_formats",
        "disable_bootc_deploy",
        "enable_bios_bootloader_install",
        "disk_utils.efi_system_partition_size",
        "disk_utils.bios_boot_partition_size",
        "dd_block_size",
        "partition_detection_attempts",
        "partprobe_attempts",
        "image_convert_memory_limit",
        "image_convert_attempts",
        "check_device_interval",
        "check_device_max_retries",
        "container.allow_arbitrary_containers",
        "container.allowed_containers",
        "container.container_steps_file",
        "container.runner",
        "container.pull_options",
        "container.run_options",
    ];
    for o in IPA_13 {
        assert!(
            PARAMS.iter().any(|p| p.option == *o),
            "{o} is missing from the table"
        );
    }
    assert_eq!(IPA_13.len(), 73);
}

fn config_of(cmdline: &str) -> (String, usize) {
    let (c, errors) = Config::from_kernel_params(&KernelParams::parse(cmdline));
    (format!("{c:?}"), errors.len())
}

#[test]
fn every_supported_parameter_is_parsed() {
    let (default, _) = config_of("");
    let mut checked = 0;
    for p in PARAMS {
        let Status::Supported(_) = p.status else {
            continue;
        };
        let Some(kernel) = p.kernel else {
            continue;
        };
        if kernel == "ipa-enable-vlan-interfaces" {
            // Read by the ramdisk's init, not the agent's configuration.
            let plan = agent_devices::netconf::vlan::VlanPlan::parse(p.example);
            assert_eq!(plan.explicit, [("eth0".to_string(), 100)]);
            checked += 1;
            continue;
        }
        let (parsed, errors) = config_of(&format!("{kernel}={}", p.example));
        assert_eq!(errors, 0, "{kernel}={} is refused", p.example);
        assert_ne!(parsed, default, "{kernel}={} changes nothing", p.example);
        checked += 1;
    }
    assert!(checked >= 35, "only {checked} supported parameters checked");
}

/// Supported options given in an IPA configuration file change the
/// configuration too, under their option names: `[DEFAULT]`, or the
/// option's group (`mdns.interfaces` in `[mdns]`), read as the agent reads
/// them (`config::load` over an empty kernel command line).
#[test]
fn supported_options_are_taken_from_configuration_files() {
    let load = |file: Option<String>| {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join(files::DIR);
        std::fs::create_dir_all(&dir).unwrap();
        if let Some(text) = file {
            std::fs::write(dir.join("site.conf"), text).unwrap();
        }
        let cmdline = root.path().join("cmdline");
        std::fs::write(&cmdline, "").unwrap();
        let c = agent_base::config::load(Some(&cmdline), Some(root.path())).unwrap();
        // The configuration names its files' places: compare without them.
        format!("{c:?}").replace(&root.path().display().to_string(), "ROOT")
    };
    let default = load(None);
    for p in PARAMS {
        if !matches!(p.status, Status::Supported(_))
            || p.kernel == Some("ipa-enable-vlan-interfaces")
        {
            continue;
        }
        // The image server's three options act together: each is proven
        // by the three against the other two.
        if let Some(others) = image_server_others(p.option) {
            let all = image_server_text(&[]);
            assert_ne!(
                load(Some(all)),
                load(Some(image_server_text(&[p.option]))),
                "{} in a file changes nothing beside {others:?}",
                p.option
            );
            continue;
        }
        let text = match p.option.split_once('.') {
            Some((group, key)) => format!("[{group}]\n{key} = {}\n", p.example),
            None => format!("[DEFAULT]\n{} = {}\n", p.option, p.example),
        };
        assert_ne!(
            load(Some(text)),
            default,
            "{} in a file changes nothing",
            p.option
        );
    }
}

/// The other two of the image server's options, for one of them.
fn image_server_others(option: &str) -> Option<Vec<&'static str>> {
    let all = agent_base::config::image_server::OPTIONS;
    all.contains(&option)
        .then(|| all.into_iter().filter(|o| *o != option).collect())
}

/// `[DEFAULT]` with the image server's options, their table examples,
/// but those in `leave_out`.
fn image_server_text(leave_out: &[&str]) -> String {
    let mut text = "[DEFAULT]\n".to_string();
    for p in PARAMS {
        if agent_base::config::image_server::OPTIONS.contains(&p.option)
            && !leave_out.contains(&p.option)
        {
            text.push_str(&format!("{} = {}\n", p.option, p.example));
        }
    }
    text
}

/// Options that are not supported are reported when a file sets them.
#[test]
fn unsupported_options_in_files_are_reported_with_the_reason() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join(files::DIR);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("site.conf"),
        "[DEFAULT]\nlog_file = /var/log/ipa.log\nguard_special_filesystems = false\n",
    )
    .unwrap();
    let read = files::read(root.path());
    let notes = read.notes.join("\n");
    assert!(
        notes.contains("option log_file ignored: logs go to the console"),
        "{notes}"
    );
    // A supported option is taken, as its kernel parameter.
    assert!(
        read.params
            .contains(&("ipa-guard-special-filesystems".into(), "false".into())),
        "{:?}",
        read.params
    );
}
