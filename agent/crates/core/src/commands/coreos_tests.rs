//! Tests of `coreos.rs`.

use super::*;

fn info(v: Value) -> InstanceInfo {
    serde_json::from_value(v).unwrap()
}

#[test]
fn image_info_comes_from_instance_info() {
    let ii = info(
        json!({"image_source": "http://h/img/fcos.raw", "image_os_hash_algo": "sha256",
        "image_os_hash_value": "ab", "image_checksum": null}),
    );
    assert_eq!(
        image_info_from_instance(&ii).unwrap(),
        json!({"id": "fcos.raw", "urls": ["http://h/img/fcos.raw"],
            "os_hash_algo": "sha256", "os_hash_value": "ab"})
    );
    let e = image_info_from_instance(&info(json!({}))).unwrap_err();
    assert_eq!(e.details, NO_OFFLINE_IMAGE);
    // No checksum: the image_info has none (written unverified).
    assert_eq!(
        image_info_from_instance(&info(json!({"image_source": "http://h/fcos.raw"}))).unwrap(),
        json!({"id": "fcos.raw", "urls": ["http://h/fcos.raw"]})
    );
    let e = image_info_from_instance(&info(json!({"image_source": "5f1c-glance"}))).unwrap_err();
    assert!(e.details.contains("not an http(s) URL"), "{}", e.details);
}

#[test]
fn kernel_args_from_the_argument_or_meta_data() {
    let args: InstallCoreosArgs =
        super::super::dispatch::params::parse(&json!({"append_karg": "console=ttyS0, ip=dhcp"}))
            .unwrap();
    let ii = info(json!({"configdrive": {"meta_data": {"coreos_append_karg": ["a=1"]}}}));
    assert_eq!(
        kernel_args(args.append_karg, &ii).unwrap(),
        vec!["console=ttyS0", "ip=dhcp"]
    );
    assert_eq!(kernel_args(None, &ii).unwrap(), vec!["a=1"]);
    assert!(kernel_args(None, &info(json!({}))).unwrap().is_empty());
    let bad = info(json!({"configdrive": {"meta_data": {"coreos_append_karg": ["a b"]}}}));
    let e = kernel_args(None, &bad).unwrap_err();
    assert_eq!(
        e.details,
        "meta_data.coreos_append_karg: kernel argument \"a b\" contains whitespace"
    );
    let bad = info(json!({"configdrive": {"meta_data": {"coreos_append_karg": 3}}}));
    assert!(kernel_args(None, &bad).is_err());
}

#[test]
fn copy_network_from_the_argument_or_meta_data() {
    let md = |v: Value| info(json!({"configdrive": {"meta_data": {"coreos_copy_network": v}}}));
    assert!(copy_network(None, &md(json!(true))).unwrap());
    assert!(copy_network(None, &md(json!("True"))).unwrap());
    assert!(!copy_network(None, &md(json!("false"))).unwrap());
    assert!(!copy_network(Some(false), &md(json!(true))).unwrap());
    assert!(copy_network(Some(true), &info(json!({}))).unwrap());
    assert!(!copy_network(None, &info(json!({"configdrive": "H4sI..."}))).unwrap());
    let e = copy_network(None, &md(json!("maybe"))).unwrap_err();
    assert_eq!(
        e.details,
        "meta_data.coreos_copy_network \"maybe\" is not a boolean"
    );
    assert!(copy_network(None, &md(json!([1]))).is_err());
}

#[test]
fn copy_network_needs_a_record_with_interfaces() {
    let e = network_keyfiles(None).unwrap_err();
    assert!(e.details.contains("--network-record"), "{}", e.details);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("network.json");
    let e = network_keyfiles(Some(&p)).unwrap_err();
    assert!(e.details.contains("no record of it at"), "{}", e.details);
    NetRecord::default().save(&p).unwrap();
    let e = network_keyfiles(Some(&p)).unwrap_err();
    assert!(
        e.details.contains("no configured interface"),
        "{}",
        e.details
    );
}

#[tokio::test]
async fn ignition_argument_wins_over_user_data_and_must_be_ignition() {
    let state = AgentState::new(agent_base::config::Config::default(), None);
    let arg = json!({"ignition": {"version": "3.4.0"}, "storage": {}});
    let args: InstallCoreosArgs =
        super::super::dispatch::params::parse(&json!({"ignition": arg.clone()})).unwrap();
    let ii =
        info(json!({"configdrive": {"user_data": "{\"ignition\": {\"version\": \"3.2.0\"}}"}}));
    let got = ignition_config(&state, args.ignition, &ii)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&got).unwrap(), arg);
    let got = ignition_config(&state, None, &ii).await.unwrap().unwrap();
    assert_eq!(got, br#"{"ignition": {"version": "3.2.0"}}"#);
    let cloud = info(json!({"configdrive": {"user_data": "#cloud-config\n"}}));
    let e = ignition_config(&state, None, &cloud).await.unwrap_err();
    assert!(
        e.details.contains("not an Ignition config"),
        "{}",
        e.details
    );
    let masked = info(json!({"configdrive": "******"}));
    let e = ignition_config(&state, None, &masked).await.unwrap_err();
    assert!(e.details.contains("neither a dict"), "{}", e.details);
    assert!(ignition_config(&state, None, &info(json!({})))
        .await
        .unwrap()
        .is_none());
}
