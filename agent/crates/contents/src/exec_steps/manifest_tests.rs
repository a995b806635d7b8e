//! The manifest parser: a full manifest, the defaults, and each refusal
//! naming its file, step and field; the directory loader.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::dir::load_dir;
use super::manifest::*;

/// A directory with an executable `tool`, a non-executable `plain` and a
/// subdirectory `sub`.
fn dir() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let tool = d.path().join("tool");
    std::fs::write(&tool, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(d.path().join("plain"), "data").unwrap();
    std::fs::create_dir(d.path().join("sub")).unwrap();
    d
}

fn parse(d: &Path, text: &str) -> Result<ExecManager, ManifestError> {
    parse_manifest(text, &d.join("m.yaml"))
}

/// The message of the refusal of `text`, with the temp dir replaced by `D`.
fn refusal(text: &str) -> String {
    let d = dir();
    let e = parse(d.path(), text).expect_err("accepted");
    e.to_string().replace(&d.path().display().to_string(), "D")
}

const STEP: &str = "
name: acme
version: '1'
steps:
  - name: s
    executable: tool
    interface: deploy
    clean_priority: 5
";

#[test]
fn a_full_manifest() {
    let d = dir();
    let m = parse(
        d.path(),
        "
name: acme_raid
version: 2.1
support: 4
steps:
  - name: build_raid
    executable: ./tool
    args: [--mode, create]
    interface: raid
    clean_priority: 0
    deploy_priority: 60
    reboot_requested: true
    abortable: true
    timeout: 120
    argsinfo:
      level:
        description: RAID level
        required: true
      spare: {description: hot spare}
  - name: flash
    executable: tool
    interface: firmware
    service_priority: 10
erase_block_device:
  executable: tool
  args: [-v]
  timeout: 600
inspect:
  executable: ./tool
os_install_device: {executable: tool, timeout: 30}
",
    )
    .unwrap();
    let tool = d.path().join("./tool");
    assert_eq!(m.path, d.path().join("m.yaml"));
    assert_eq!(m.name, "acme_raid");
    assert_eq!(m.version, "2.1");
    assert_eq!(m.support, 4);
    assert_eq!(
        m.steps[0],
        ExecStep {
            name: "build_raid".into(),
            interface: Interface::Raid,
            clean_priority: Some(0),
            deploy_priority: Some(60),
            service_priority: None,
            reboot_requested: true,
            abortable: true,
            argsinfo: vec![
                ArgSpec {
                    name: "level".into(),
                    description: "RAID level".into(),
                    required: true
                },
                ArgSpec {
                    name: "spare".into(),
                    description: "hot spare".into(),
                    required: false
                },
            ],
            hook: Hook {
                executable: tool.clone(),
                args: vec!["--mode".into(), "create".into()],
                timeout: Duration::from_secs(120),
            },
        }
    );
    let flash = &m.steps[1];
    assert_eq!(flash.interface.as_str(), "firmware");
    assert_eq!(
        (
            flash.clean_priority,
            flash.deploy_priority,
            flash.service_priority
        ),
        (None, None, Some(10))
    );
    assert!(!flash.reboot_requested && !flash.abortable && flash.argsinfo.is_empty());
    assert_eq!(flash.hook.timeout, DEFAULT_TIMEOUT);
    assert_eq!(flash.hook.executable, d.path().join("tool"));
    let erase = m.erase_block_device.unwrap();
    assert_eq!(erase.args, ["-v"]);
    assert_eq!(erase.timeout, Duration::from_secs(600));
    assert_eq!(m.inspect.unwrap().executable, tool);
    let root = m.os_install_device.unwrap();
    assert_eq!(root.executable, d.path().join("tool"));
    assert_eq!(root.timeout, Duration::from_secs(30));
}

#[test]
fn defaults_and_absolute_executables() {
    let d = dir();
    let m = parse(
        d.path(),
        "name: x\nversion: v1\nsteps:\n  - {name: s, executable: /bin/sh, interface: deploy, deploy_priority: 0}\n",
    )
    .unwrap();
    assert_eq!(m.support, DEFAULT_SUPPORT);
    assert_eq!(m.steps[0].hook.executable, PathBuf::from("/bin/sh"));
    assert!(m.erase_block_device.is_none() && m.inspect.is_none());
    assert!(m.os_install_device.is_none());
    let m = parse(d.path(), "name: nothing\nversion: '0'\n").unwrap();
    assert!(m.steps.is_empty());
}

#[test]
fn refusals_name_the_file_the_step_and_the_field() {
    let cases: &[(&str, &str)] = &[
        (
            "name: acme\nversion: '1'\nsteps:\n  - name: hpe_raid\n    executable: ./ssacli-wrap\n    interface: raid\n    clean_priority: 0\n",
            "D/m.yaml: step \"hpe_raid\": executable ./ssacli-wrap does not exist",
        ),
        (&STEP.replace("executable: tool", "executable: plain"), "D/m.yaml: step \"s\": executable plain is not executable"),
        (&STEP.replace("executable: tool", "executable: sub"), "D/m.yaml: step \"s\": executable sub is not a file"),
        (&STEP.replace("executable: tool", "executable: ''"), "D/m.yaml: step \"s\": executable is empty"),
        (&STEP.replace("name: s", "name: 2fast"), "D/m.yaml: steps[0]: name \"2fast\" is not an identifier"),
        (&STEP.replace("name: acme", "name: a-b"), "D/m.yaml: name \"a-b\" is not an identifier"),
        (&STEP.replace("version: '1'", "version: [1]"), "D/m.yaml: version must be a string, not a list"),
        (&STEP.replace("version: '1'", "version: ''"), "D/m.yaml: version is empty"),
        (
            &STEP.replace("    clean_priority: 5\n", ""),
            "D/m.yaml: step \"s\": clean_priority is missing, and so are deploy_priority and service_priority: the step would be in no phase",
        ),
        (&format!("{STEP}    timeout: 0\n"), "D/m.yaml: step \"s\": timeout 0 is out of range (1 to 604800 seconds)"),
        (
            &format!("{STEP}    argsinfo: {{'bad name': {{description: x}}}}\n"),
            "D/m.yaml: step \"s\": argsinfo \"bad name\" is not an identifier",
        ),
        (
            &format!("{STEP}  - name: s\n    executable: tool\n    interface: raid\n    clean_priority: 1\n"),
            "D/m.yaml: step \"s\": name is declared twice",
        ),
        (
            &format!("{STEP}erase_block_device: {{executable: gone}}\n"),
            "D/m.yaml: erase_block_device.executable gone does not exist",
        ),
        (
            &format!("{STEP}inspect: {{executable: tool, timeout: 9999999}}\n"),
            "D/m.yaml: inspect.timeout 9999999 is out of range (1 to 604800 seconds)",
        ),
        (
            &format!("{STEP}os_install_device: {{executable: gone}}\n"),
            "D/m.yaml: os_install_device.executable gone does not exist",
        ),
    ];
    for (text, want) in cases {
        assert_eq!(refusal(text), *want, "{text}");
    }
}

#[test]
fn unknown_keys_and_wrong_types_are_refused_by_name() {
    let e = refusal(&format!("{STEP}    prio: 3\n"));
    assert!(
        e.starts_with("D/m.yaml: step \"s\": step is refused: unknown field `prio`"),
        "{e}"
    );
    let e = refusal(&format!("{STEP}colour: red\n"));
    assert!(e.starts_with("D/m.yaml: unknown field `colour`"), "{e}");
    assert!(e.ends_with("at line 9 column 1"), "{e}");
    let e = refusal(&STEP.replace("interface: deploy", "interface: vendor"));
    assert!(
        e.contains("step \"s\": step is refused: unknown variant `vendor`"),
        "{e}"
    );
    let e = refusal(&format!(
        "{STEP}    argsinfo: {{level: {{description: x, optional: true}}}}\n"
    ));
    assert!(e.contains("unknown field `optional`"), "{e}");
    let e = refusal(&format!("{STEP}inspect: {{executable: tool, env: {{}}}}\n"));
    assert!(
        e.starts_with("D/m.yaml: inspect is not a hook: unknown field `env`"),
        "{e}"
    );
    let e = refusal(&STEP.replace("clean_priority: 5", "clean_priority: -1"));
    assert!(
        e.contains("step \"s\": step is refused: invalid value"),
        "{e}"
    );
    let e = refusal("name: acme\n");
    assert!(e.contains("missing field `version`"), "{e}");
    let e = refusal("name: [unclosed\n");
    assert!(e.starts_with("D/m.yaml: "), "{e}");
    let e = refusal("- a list\n");
    assert!(e.starts_with("D/m.yaml: invalid type: sequence"), "{e}");
}

#[test]
fn a_directory_loads_in_name_order_and_refuses_clashes() {
    let d = dir();
    assert!(load_dir(&d.path().join("missing")).unwrap().is_empty());
    let write = |name: &str, text: &str| std::fs::write(d.path().join(name), text).unwrap();
    write(
        "b.yaml",
        &STEP
            .replace("name: s\n", "name: t\n")
            .replace("name: acme", "name: second"),
    );
    write("a.yaml", STEP);
    write("notes.txt", "not a manifest");
    write(
        "off.yaml",
        &format!("{}support: 0\n", STEP.replace("name: acme", "name: off")),
    );
    let names: Vec<_> = load_dir(d.path())
        .unwrap()
        .into_iter()
        .map(|m| m.name)
        .collect();
    assert_eq!(names, ["acme", "second"]);

    write("c.yaml", &STEP.replace("name: acme", "name: third"));
    let e = load_dir(d.path()).unwrap_err().to_string();
    let root = d.path().display();
    assert_eq!(
        e,
        format!("{root}/c.yaml: step \"s\" is already declared by {root}/a.yaml")
    );
    write("c.yaml", &STEP.replace("name: s\n", "name: u\n"));
    let e = load_dir(d.path()).unwrap_err().to_string();
    assert_eq!(
        e,
        format!("{root}/c.yaml: manager \"acme\" is already declared by {root}/a.yaml")
    );
    write("c.yaml", "name: [");
    assert!(matches!(
        load_dir(d.path()),
        Err(ManifestError::Syntax { .. })
    ));
    std::fs::remove_file(d.path().join("c.yaml")).unwrap();
    assert_eq!(load_dir(d.path()).unwrap().len(), 2);
}

#[test]
fn identifiers() {
    for ok in ["a", "_x", "erase_devices", "A1"] {
        assert!(is_identifier(ok), "{ok}");
    }
    for bad in ["", "1a", "a-b", "a b", "é", "a.b"] {
        assert!(!is_identifier(bad), "{bad}");
    }
}
