//! Validation with IPA's messages, path and partition resolution. Writing
//! into real filesystems (mounting needs root) is tested on a loop device
//! in `hardware-tests/tests/host/inject_files_loop.rs`.

use serde_json::json;

use super::*;

#[test]
fn files_from_the_node_come_first_and_mistakes_are_all_listed() {
    let props = json!([{"path": "/etc/a.conf", "content": "YQ=="}]);
    let args = json!([{"path": "/b", "partition": 2, "deleted": true, "owner": 0}]);
    let files = validate(&props, &args).unwrap();
    assert_eq!(files.len(), 2);
    assert_eq!(files[0].relative_path(), "etc/a.conf");
    assert_eq!(files[1].partition.as_deref(), Some("2"));
    assert!(files[1].deleted && files[1].owner == Some(0));

    let bad = json!([
        {"path": "/x", "content": "YQ=="},
        {"path": "/etc/", "content": "YQ=="},
        {"path": "/etc/y", "content": "YQ==", "deleted": true, "mode": "644", "colour": 1},
        {"path": "etc/rel"},
        {"path": "/etc/../../z"},
        {"content": "YQ=="},
        {"path": "/etc/u", "content": "ftp://h/x"},
        {"path": "/etc/v", "content": "http://h/{node[uuid]}"}
    ]);
    let e = validate(&Value::Null, &bad).unwrap_err().to_string();
    for want in [
        "Validation of files failed: ",
        "in root directory requires \"partition\"",
        "directories not supported for",
        "content cannot be used with deleted",
        "mode must be a number",
        "unexpected fields in",
        ": colour",
        "the path must be absolute",
        "must not contain ..",
        "expected a path in",
        "content URLs must be http(s)",
        "URL templates",
    ] {
        assert!(e.contains(want), "{want:?} missing from {e}");
    }
    assert!(validate(&json!({"a": 1}), &Value::Null)
        .unwrap_err()
        .to_string()
        .contains("The `inject_files` node property must be a list, got dict"));
    assert!(validate(&Value::Null, &json!("x"))
        .unwrap_err()
        .to_string()
        .contains("The `files` argument must be a list, got str"));
}

#[test]
fn partitions_by_number_or_device_of_the_root_disk_only() {
    let part = |number| table::Part {
        number,
        start: 1 << 20,
        len: 1 << 20,
        name: String::new(),
        type_guid: [0; 16],
        guid: [0; 16],
        mbr_type: 0x83,
    };
    let parts = [part(1), part(2)];
    let spec = |p: &str| FileSpec {
        path: "/etc/x".into(),
        partition: Some(p.into()),
        content: None,
        deleted: false,
        mode: None,
        dirmode: None,
        owner: None,
        group: None,
    };
    let sda = Path::new("/dev/sda");
    let nvme = Path::new("/dev/nvme0n1");
    assert_eq!(
        partition_of(sda, &parts, &spec("2"))
            .unwrap()
            .unwrap()
            .number,
        2
    );
    assert_eq!(
        partition_of(sda, &parts, &spec("/dev/sda1"))
            .unwrap()
            .unwrap()
            .number,
        1
    );
    assert_eq!(
        partition_of(nvme, &parts, &spec("/dev/nvme0n1p2"))
            .unwrap()
            .unwrap()
            .number,
        2
    );
    assert!(matches!(
        partition_of(sda, &parts, &spec("/dev/sdb1")),
        Err(InjectError::Invalid(_))
    ));
    assert!(matches!(
        partition_of(sda, &parts, &spec("7")),
        Err(InjectError::NotFound(_))
    ));
    let mut none = spec("1");
    none.partition = None;
    assert!(partition_of(sda, &parts, &none).unwrap().is_none());
}

#[test]
fn node_property_is_read_when_present() {
    assert_eq!(from_node(&json!({})), json!([]));
    assert_eq!(
        from_node(&json!({"properties": {"inject_files": [{"path": "/a/b"}]}})),
        json!([{"path": "/a/b"}])
    );
}
