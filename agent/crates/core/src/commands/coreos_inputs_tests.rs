//! Unit tests of `install_coreos`'s inputs in the container form.
use super::*;
use serde_json::json;

fn info(v: Value) -> InstanceInfo {
    serde_json::from_value(v).unwrap()
}

fn args(v: Value) -> InstallCoreosArgs {
    super::super::dispatch::params::parse(&v).unwrap()
}

#[test]
fn openshifts_default_call_is_offline_with_the_hostname() {
    let got = inputs(
        &args(json!({})),
        &info(json!({})),
        &HostEnv::default(),
        "w0",
    )
    .unwrap();
    assert_eq!(got.plan.image_url, None);
    assert!(got.plan.ignition);
    assert_eq!(
        got.ignition.unwrap()["storage"]["files"][0]["contents"]["source"],
        "data:,w0"
    );
    let p = Plan {
        device: "/dev/sda".into(),
        ..got.plan
    };
    assert_eq!(
        installer::args(&p),
        [
            "install",
            "--preserve-on-error",
            "--ignition-file",
            "/tmp/ironic.ign",
            "--offline",
            "/dev/sda"
        ]
    );
}

#[test]
fn every_input_from_the_node_and_the_environment() {
    let ii = info(json!({
        "image_source": "http://h/rhcos.raw.gz",
        "configdrive": {
            "user_data": "{\"ignition\": {\"version\": \"3.2.0\"}}",
            "meta_data": {"coreos_append_karg": ["a=1", "b"], "coreos_copy_network": false},
        },
    }));
    let env = HostEnv {
        ip_options: Some("ip=dhcp".into()),
        copy_network: true,
    };
    let got = inputs(&args(json!({})), &ii, &env, "").unwrap();
    assert_eq!(
        got.ignition,
        Some(json!({"ignition": {"version": "3.2.0"}}))
    );
    assert_eq!(
        got.plan,
        Plan {
            ignition: true,
            append_karg: vec!["a=1".into(), "b".into()],
            image_url: Some("http://h/rhcos.raw.gz".into()),
            ip_options: Some("ip=dhcp".into()),
            copy_network: false,
            device: PathBuf::new(),
        }
    );
    // meta_data's coreos_copy_network missing: the environment decides.
    let ii = info(json!({"configdrive": {"meta_data": {}}}));
    assert!(
        inputs(&args(json!({})), &ii, &env, "")
            .unwrap()
            .plan
            .copy_network
    );
    assert!(
        !inputs(&args(json!({})), &ii, &HostEnv::default(), "")
            .unwrap()
            .plan
            .copy_network
    );
    // The step's arguments win.
    let a = args(
        json!({"copy_network": false, "append_karg": "x=1", "ignition": {"ignition": {"version": "3.4.0"}}}),
    );
    let got = inputs(&a, &ii, &env, "").unwrap();
    assert!(!got.plan.copy_network);
    assert_eq!(got.plan.append_karg, ["x=1"]);
    assert_eq!(got.ignition.unwrap()["ignition"]["version"], "3.4.0");
    // No user data and no host name: no Ignition file.
    let got = inputs(&args(json!({})), &ii, &env, "").unwrap();
    assert_eq!((got.ignition, got.plan.ignition), (None, false));
}

#[test]
fn bad_inputs_fail_with_ipas_errors_before_the_disk() {
    let e = inputs(
        &args(json!({})),
        &info(json!({"configdrive": "H4sIAAAA"})),
        &HostEnv::default(),
        "h",
    )
    .unwrap_err();
    assert_eq!(e.details, PRE_RENDERED);
    assert_eq!(e.kind, ErrorKind::Deployment);
    // An empty string is no config drive (Python's `or {}`).
    assert!(inputs(
        &args(json!({})),
        &info(json!({"configdrive": ""})),
        &HostEnv::default(),
        "h"
    )
    .is_ok());
    let e = inputs(
        &args(json!({})),
        &info(json!({"configdrive": {"user_data": "#cloud-config\n"}})),
        &HostEnv::default(),
        "h",
    )
    .unwrap_err();
    assert!(
        e.details.contains("not a JSON Ignition config"),
        "{}",
        e.details
    );
    let e = inputs(
        &args(json!({"image_info": {"id": "x"}})),
        &info(json!({})),
        &HostEnv::default(),
        "h",
    )
    .unwrap_err();
    assert!(
        e.details.contains("image_info argument is not used"),
        "{}",
        e.details
    );
    let e = inputs(
        &args(json!({})),
        &info(json!({"configdrive": {"meta_data": {"coreos_copy_network": "maybe"}}})),
        &HostEnv::default(),
        "h",
    )
    .unwrap_err();
    assert!(e.details.contains("coreos_copy_network"), "{}", e.details);
    let e = inputs(
        &args(json!({"ignition": "not json"})),
        &info(json!({})),
        &HostEnv::default(),
        "h",
    )
    .unwrap_err();
    assert!(
        e.details.contains("ignition argument is not JSON"),
        "{}",
        e.details
    );
}
